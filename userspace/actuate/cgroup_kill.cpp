#include "khagent/actuate/cgroup_kill.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "khagent/actuate/cgroup_writer.h"

namespace khagent {

namespace {

// The cgroup and all its descendants, parents first.
void walk(const std::string& dir, std::vector<std::string>& out) {
  out.push_back(dir);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
    walk(dir + "/" + e->d_name, out);
  }
  ::closedir(d);
}

std::vector<pid_t> procs_of(const std::string& dir) {
  std::vector<pid_t> pids;
  std::ifstream in(dir + "/cgroup.procs");
  long pid = 0;
  while (in >> pid) pids.push_back(static_cast<pid_t>(pid));
  return pids;
}

bool populated(const std::string& dir) {
  std::vector<std::string> all;
  walk(dir, all);
  for (const auto& d : all) {
    if (!procs_of(d).empty()) return true;
  }
  return false;
}

}  // namespace

Result<CgroupKillResult> kill_cgroup(const std::string& mount, const std::string& rel, const CgroupKillOptions& opts) {
  auto confined = confine_cgroup_path(mount, rel);
  if (!confined && rel.find("..") == std::string::npos && rel.find_first_not_of("/.") == std::string::npos)
    return make_error(EPERM, "refusing to kill the root cgroup of " + mount);
  if (!confined) return confined.error();
  if (confined.value().empty() || confined.value() == "/") {
    return make_error(EPERM, "refusing to kill the root cgroup of " + mount);
  }
  const std::string dir = mount + confined.value();
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) return make_error(errno, "cgroup " + dir);
  if (!S_ISDIR(st.st_mode)) return make_error(ENOTDIR, "cgroup " + dir);

  CgroupKillResult res;
  const std::string kill_file = dir + "/cgroup.kill";
  if (opts.allow_cgroup_kill && ::access(kill_file.c_str(), F_OK) == 0) {
    int fd = ::open(kill_file.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return make_error(errno, "open " + kill_file);
    ssize_t n = ::write(fd, "1", 1);
    int err = errno;
    ::close(fd);
    if (n != 1) return make_error(err, "write 1 to " + kill_file);
    res.used_cgroup_kill = true;
  }

  // Without cgroup.kill, signal what is listed until nothing is (a process
  // may fork between reading cgroup.procs and the kill). With it, only wait:
  // the kernel delivers SIGKILL to everything, including later forks.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts.settle_ms);
  for (;;) {
    if (!res.used_cgroup_kill) {
      std::vector<std::string> all;
      walk(dir, all);
      for (const auto& d : all) {
        for (pid_t pid : procs_of(d)) {
          if (pid > 0 && ::kill(pid, SIGKILL) == 0) res.signalled++;
        }
      }
    }
    if (!populated(dir)) {
      res.empty = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return res;
}

}  // namespace khagent
