#include "khagent/actuate/oom_order.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <optional>
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

// One process's /proc directory, held open: if the pid is reused meanwhile,
// every read and write through it fails (ESRCH) instead of reaching the new
// process.
class ProcDir {
 public:
  ProcDir(const std::string& proc, int pid)
      : fd_(::open((proc + "/" + std::to_string(pid)).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)) {}
  ~ProcDir() {
    if (fd_ >= 0) ::close(fd_);
  }
  ProcDir(const ProcDir&) = delete;
  ProcDir& operator=(const ProcDir&) = delete;
  bool ok() const { return fd_ >= 0; }

  std::optional<std::string> read(const char* name) const {
    int fd = ::openat(fd_, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return std::nullopt;
    std::string out;
    char buf[1024];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0 && out.size() < 65536) out.append(buf, static_cast<size_t>(n));
    ::close(fd);
    if (n < 0) return std::nullopt;
    return out;
  }
  // One write(2), as echo(1) does it.
  bool write_adj(int adj) const {
    int fd = ::openat(fd_, "oom_score_adj", O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    const std::string text = std::to_string(adj) + "\n";
    const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    return ok;
  }
  std::optional<int> adj() const {
    auto t = read("oom_score_adj");
    int v = 0;
    if (!t || !parse_int(*t, v)) return std::nullopt;
    return v;
  }
  // Field 22 of stat (starttime), after the command in parentheses; 0 if unreadable.
  uint64_t start_time() const {
    auto t = read("stat");
    if (!t) return 0;
    size_t pos = t->rfind(')');
    if (pos == std::string::npos) return 0;
    pos += 2;  // field 3, the state
    for (int field = 3; field < 22; field++) {
      pos = t->find(' ', pos);
      if (pos == std::string::npos) return 0;
      pos++;
    }
    uint64_t v = 0;
    std::from_chars(t->data() + pos, t->data() + t->size(), v);
    return v;
  }

 private:
  int fd_;
};

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
      const bool is_pid = parse_int(std::string_view(*procs).substr(pos, nl - pos), pid) && pid > 0;
      pos = nl + 1;
      if (!is_pid) continue;
      seen.insert(pid);
      if (saved_.count(pid)) continue;  // raised before (a reused pid is caught at restore)
      ProcDir p(proc_, pid);
      // Read through the open directory: the start time first, so that the
      // saved identity is the process the write reached.
      const uint64_t start = p.ok() ? p.start_time() : 0;
      const auto now = p.ok() ? p.adj() : std::nullopt;
      if (!now || *now >= adj || !p.write_adj(adj)) continue;
      saved_[pid] = {*now, adj, start, cg};
      out.push_back({pid, *now, adj, cg});
    }
  }
  // Forget only processes that are gone (or whose pid is another process
  // now), not those a walk missed: they would keep 1000 after khagent.
  for (auto it = saved_.begin(); it != saved_.end();) {
    if (seen.count(it->first)) {
      ++it;
      continue;
    }
    ProcDir p(proc_, it->first);
    it = p.ok() && p.start_time() == it->second.start ? std::next(it) : saved_.erase(it);
  }
  return out;
}

std::vector<OomChange> OomOrder::restore() {
  std::vector<OomChange> out;
  for (const auto& [pid, s] : saved_) {
    ProcDir p(proc_, pid);
    if (!p.ok() || p.start_time() != s.start) continue;  // exited, or the pid is another process now
    const auto now = p.adj();
    if (!now || *now != s.raised_to) continue;  // someone else changed it since
    if (p.write_adj(s.adj)) out.push_back({pid, *now, s.adj, s.cgroup});
  }
  saved_.clear();
  return out;
}

}  // namespace khagent
