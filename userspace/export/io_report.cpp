// The IO controller's report: the metrics, and a line naming the offline
// cgroup and device when an online pod stalls on IO.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "khagent/export/controller_reports.h"

namespace khagent {

namespace {

std::string rate_text(uint64_t bytes, uint64_t interval_ns) {
  if (!interval_ns) return "?";
  return fmt::format("{:.1f} MiB/s", static_cast<double>(bytes) / 1048576.0 / (static_cast<double>(interval_ns) / 1e9));
}

}  // namespace

void ReportExporter::operator()(const IoReport& r) {
  if (metrics_) metrics_->record_io(r);
  for (const auto& s : r.steps) spdlog::info("{}", s.text);  // each step, once: they are seconds apart
  // Once per cgroup: a cgroup2 without the io controller above the offline
  // parents has no io.stat there, every tick.
  for (const auto& u : r.signals.unreadable)
    if (io_unreadable_.insert(u.substr(0, u.find(':'))).second)
      spdlog::info("io: {} (its IO is not measured; is the io controller enabled above it?)", u);
  if (!r.stalled || !warned_.allow("io-stall " + r.stalled->pod, now_ns_)) return;
  const auto& p = *r.stalled;
  const uint64_t interval = r.signals.interval_ns;
  std::string who = "no offline cgroup moved any IO";
  if (r.aggressor) {
    const auto& a = *r.aggressor;
    who = fmt::format("offline {} moved the most on {} ({}): {} read, {} written", a.cgroup, a.device,
                      r.aggressor_on_pods_device ? "a device the pod used" : "the pod's devices unknown",
                      rate_text(a.delta.rbytes, interval), rate_text(a.delta.wbytes, interval));
  }
  spdlog::warn(
      "io: online pod {} stalled on IO {:.0f}% of the last {:.0f} ms ({:.0f}% with all its tasks); {} ({}; "
      "logged once a minute per pod)",
      p.pod, p.some_share * 100.0, static_cast<double>(interval) / 1e6,
      interval ? static_cast<double>(p.full_us) * 1000.0 / static_cast<double>(interval) * 100.0 : 0.0, who,
      !cfg_.io.limit                ? "io.limit is off: measuring only"
      : !r.aggressor_on_pods_device ? "no limit: not a device the pod was seen to use"
                                    : "the io_limit lever acts on it");
}

}  // namespace khagent
