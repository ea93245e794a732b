#include "khagent/actuate/oom_order.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <set>

#include "khagent/util/cgroup_path.h"
#include "khagent/util/file.h"

namespace khagent {

namespace {

bool parse_int(std::string_view s, int& v) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

// Field 22 of /proc/PID/stat, after the command in parentheses.
uint64_t start_time(const std::string& proc, int pid) {
  auto t = read_file(proc + "/" + std::to_string(pid) + "/stat");
  if (!t) return 0;
  size_t at = t->rfind(')');
  if (at == std::string::npos) return 0;
  // After ") ": state is field 3; starttime is field 22.
  size_t pos = at + 2;
  for (int field = 3; field < 22 && pos < t->size(); field++) {
    pos = t->find(' ', pos);
    if (pos == std::string::npos) return 0;
    pos++;
  }
  uint64_t v = 0;
  std::from_chars(t->data() + pos, t->data() + t->size(), v);
  return v;
}

// One write(2), as echo(1) does it; false if the process is gone or refused it.
bool write_adj(const std::string& proc, int pid, int adj) {
  const std::string path = proc + "/" + std::to_string(pid) + "/oom_score_adj";
  int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const std::string text = std::to_string(adj) + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

}  // namespace

OomOrder::OomOrder(std::string unified_root, std::string proc_root)
    : root_(std::move(unified_root)), proc_(std::move(proc_root)) {}

std::vector<OomChange> OomOrder::raise(const std::vector<std::string>& parents, int adj) {
  std::vector<OomChange> out;
  std::set<int> seen;
  std::vector<std::string> todo(parents.begin(), parents.end());
  for (size_t i = 0; i < todo.size() && i < 65536; i++) {
    const std::string cg = todo[i];
    auto more = child_cgroups(root_, cg);
    todo.insert(todo.end(), more.begin(), more.end());
    auto procs = read_file(root_ + (cg == "/" ? "" : cg) + "/cgroup.procs");
    if (!procs) continue;
    size_t pos = 0;
    while (pos < procs->size()) {
      size_t nl = procs->find('\n', pos);
      if (nl == std::string::npos) nl = procs->size();
      int pid = 0;
      if (parse_int(std::string_view(*procs).substr(pos, nl - pos), pid) && pid > 0) {
        seen.insert(pid);
        int now = 0;
        auto text = read_file(proc_ + "/" + std::to_string(pid) + "/oom_score_adj");
        if (text && parse_int(*text, now) && now < adj && write_adj(proc_, pid, adj)) {
          if (!saved_.count(pid)) saved_[pid] = {now, adj, start_time(proc_, pid), cg};
          out.push_back({pid, now, adj, cg});
        }
      }
      pos = nl + 1;
    }
  }
  for (auto it = saved_.begin(); it != saved_.end();) it = seen.count(it->first) ? std::next(it) : saved_.erase(it);
  return out;
}

std::vector<OomChange> OomOrder::restore() {
  std::vector<OomChange> out;
  for (const auto& [pid, s] : saved_) {
    if (start_time(proc_, pid) != s.start) continue;  // exited, or the pid is another process now
    int now = 0;
    auto text = read_file(proc_ + "/" + std::to_string(pid) + "/oom_score_adj");
    if (!text || !parse_int(*text, now) || now != s.raised_to) continue;  // someone else changed it since
    if (write_adj(proc_, pid, s.adj)) out.push_back({pid, now, s.adj, s.cgroup});
  }
  saved_.clear();
  return out;
}

}  // namespace khagent
