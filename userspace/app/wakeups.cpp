#include "khagent/app/wakeups.h"

#include <poll.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "khagent/util/clock.h"

namespace khagent {

Wakeups::Woken Wakeups::wait(int timeout_ms) {
  Woken out;
  if (!psi_ || psi_->size() == 0) {
    if (auto n = bpf_.poll_events(timeout_ms); !n) out.problems.push_back(n.error().str());
    return out;
  }
  std::vector<pollfd> fds{{bpf_.events_fd(), POLLIN, 0}};
  psi_->add_to(fds);
  if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
    if (errno != EINTR) out.problems.push_back(fmt::format("waiting for events: {}", strerror(errno)));
    return out;
  }
  if (fds[0].revents)
    if (auto n = bpf_.drain_events(); !n) out.problems.push_back(n.error().str());
  for (size_t i = 1; i < fds.size(); i++) {
    const std::string* p = fds[i].revents ? psi_->path_of(fds[i].fd) : nullptr;
    if (!p) continue;
    if (fds[i].revents & (POLLERR | POLLNVAL)) {  // the cgroup is gone
      psi_->drop(std::string(*p));
      continue;
    }
    if (fds[i].revents & POLLPRI) out.memory_stalled.push_back(*p);
  }
  return out;
}

void Wakeups::sync(const std::vector<std::string>& online, LogLimiter& warned) {
  if (!psi_) return;
  for (const auto& p : psi_->sync(online))
    if (warned.allow("psi trigger", mono_ns()))
      spdlog::warn("{} (the tick's reading still cuts on a stall, up to a tick later)", p);
  if (psi_->size() && !started_) {
    started_ = true;
    spdlog::info("PSI triggers \"{}\" on {} online pod{}{}", psi_->spec(), psi_->size(), psi_->size() == 1 ? "" : "s",
                 psi_->note().empty() ? "" : ": " + psi_->note());
  }
}

}  // namespace khagent
