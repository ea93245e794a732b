// Helpers for host tests: root check, cgroups, workload processes, schedstat.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "khagent/collect/cgroupfs.h"
#include "khagent/util/clock.h"

namespace hosttest {

// Host tests need root and BPF: without them they fail and say so.
#define REQUIRE_ROOT()                                                              \
  do {                                                                              \
    if (geteuid() != 0)                                                             \
      FAIL() << "host tests need root (BPF programs, cgroup writes); run as root: " \
                "sudo scripts/test.sh";                                             \
  } while (0)

inline bool write_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
  return n == static_cast<ssize_t>(text.size());
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline uint64_t inode_of(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_ino;
}

// A cgroup made by the test (v2, or v1 under a controller's mount), removed
// at the end once its processes are gone.
struct TestCgroup {
  std::string root;  // the hierarchy's mount point
  std::string rel;   // path relative to it, starting with '/'
  std::string dir() const { return root + rel; }
  uint64_t id() const { return inode_of(dir()); }

  TestCgroup(std::string r, std::string p) : root(std::move(r)), rel(std::move(p)) {
    std::filesystem::create_directories(dir());
  }
  // A cgroup stays busy until the kernel has finished with its killed
  // tasks, which on a loaded machine took longer than a second: wait up to
  // 10 s, and fail the test rather than leave the cgroup behind silently.
  ~TestCgroup() {
    int i = 0;
    while (::rmdir(dir().c_str()) != 0 && errno == EBUSY && i++ < 500) usleep(20000);
    if (::access(dir().c_str(), F_OK) == 0) ADD_FAILURE() << "test cgroup left behind: " << dir();
  }
  TestCgroup(const TestCgroup&) = delete;
  TestCgroup& operator=(const TestCgroup&) = delete;
};

// Test cgroups made parents first and removed children first (a cgroup
// with children cannot be removed).
class CgroupStack {
 public:
  TestCgroup& add(const std::string& root, const std::string& rel) {
    v_.push_back(std::make_unique<TestCgroup>(root, rel));
    return *v_.back();
  }
  ~CgroupStack() {
    while (!v_.empty()) v_.pop_back();
  }

 private:
  std::vector<std::unique_ptr<TestCgroup>> v_;
};

// A child process running `body` after joining cgroups and a CPU.
struct Child {
  pid_t pid = -1;
  Child() = default;
  Child(const std::vector<std::string>& procs_files, int cpu, int nice_value, const std::function<void()>& body) {
    int ready[2];
    if (pipe(ready) != 0) return;
    pid = fork();
    if (pid == 0) {
      ::close(ready[0]);
      for (const auto& f : procs_files)
        if (!write_file(f, "0")) _exit(90);
      if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0) _exit(91);
      }
      if (nice_value && setpriority(PRIO_PROCESS, 0, nice_value) != 0) _exit(92);
      char c = 1;
      if (::write(ready[1], &c, 1) != 1) _exit(93);
      ::close(ready[1]);
      body();
      _exit(0);
    }
    ::close(ready[1]);
    char c = 0;
    if (::read(ready[0], &c, 1) != 1) {
      int st = 0;
      waitpid(pid, &st, 0);
      pid = -1;  // the child could not set itself up
    }
    ::close(ready[0]);
  }
  ~Child() { stop(); }
  Child(Child&& o) noexcept : pid(o.pid) { o.pid = -1; }
  Child& operator=(Child&& o) noexcept {
    stop();
    pid = o.pid;
    o.pid = -1;
    return *this;
  }
  void stop() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      int st = 0;
      waitpid(pid, &st, 0);
      pid = -1;
    }
  }
};

// Stops a child and returns once it has stopped, so that nothing of it is
// queued or in flight while counters are read; thaw() lets it go on.
inline bool freeze(pid_t pid) {
  if (::kill(pid, SIGSTOP) != 0) return false;
  int st = 0;
  return waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st);
}
inline bool thaw(pid_t pid) { return ::kill(pid, SIGCONT) == 0; }

[[noreturn]] inline void busy_loop() {
  for (;;) asm volatile("" ::: "memory");
}

[[noreturn]] inline void sleep_loop(long ns) {
  timespec ts{0, ns};
  for (;;) nanosleep(&ts, nullptr);
}

struct Schedstat {
  uint64_t cpu_ns = 0, run_delay_ns = 0, pcount = 0;
};

inline Schedstat schedstat(pid_t pid) {
  Schedstat s;
  std::istringstream in(read_file("/proc/" + std::to_string(pid) + "/schedstat"));
  in >> s.cpu_ns >> s.run_delay_ns >> s.pcount;
  return s;
}

inline khagent::Mounts mounts() {
  auto m = khagent::find_mounts();
  return m.ok() ? m.value() : khagent::Mounts{};
}

// True when the cpu controller is not in cgroup2 (a hybrid host): khagent
// then writes the v1 cpu and cpuset hierarchies at the same relative path.
inline bool hybrid(const khagent::Mounts& m) {
  std::string ctl = read_file(m.cgroup2 + "/cgroup.controllers");
  return !m.cpu_v1.empty() && ctl.find("cpu ") == std::string::npos && ctl.find("cpu\n") == std::string::npos &&
         !(ctl.size() >= 3 && ctl.compare(ctl.size() - 3, 3, "cpu") == 0);
}

// One cgroup path in cgroup2 and, on a hybrid host, in the v1 cpu and
// cpuset hierarchies too, as a kubelet or NodeManager makes it there (v1
// cpusets get their parent's CPUs and memory nodes, or no task may join).
// Make parents first; destroyed in reverse order by the owner.
struct LaidOutCgroup {
  std::vector<std::unique_ptr<TestCgroup>> parts;
  // `memory`: in the memory controller's hierarchy too (v1 memory on a
  // hybrid host; +memory for the children on v2, except on a `leaf`: v2
  // refuses processes in a cgroup that hands a domain controller such as
  // memory to its children).
  LaidOutCgroup(const khagent::Mounts& m, const std::string& rel, bool memory = false, bool leaf = false) {
    parts.push_back(std::make_unique<TestCgroup>(m.cgroup2, rel));
    if (!hybrid(m)) {
      // Pure v2: the controllers the parent has, for the children to come
      // (as the kubelet and systemd enable them down their trees).
      std::string avail = read_file(parts.front()->dir() + "/cgroup.controllers");
      for (const char* c : {"cpu", "cpuset", "memory"})
        if (avail.find(c) != std::string::npos && ((memory && !leaf) || std::string(c) != "memory"))
          write_file(parts.front()->dir() + "/cgroup.subtree_control", std::string("+") + c);
      return;
    }
    if (memory && !m.memory_v1.empty()) parts.push_back(std::make_unique<TestCgroup>(m.memory_v1, rel));
    parts.push_back(std::make_unique<TestCgroup>(m.cpu_v1, rel));
    if (!m.cpuset_v1.empty()) {
      auto cs = std::make_unique<TestCgroup>(m.cpuset_v1, rel);
      std::string parent = cs->dir().substr(0, cs->dir().rfind('/'));
      write_file(cs->dir() + "/cpuset.cpus", read_file(parent + "/cpuset.cpus"));
      write_file(cs->dir() + "/cpuset.mems", read_file(parent + "/cpuset.mems"));
      parts.push_back(std::move(cs));
    }
  }
  const TestCgroup& v2() const { return *parts.front(); }
  // Where a task must be written to join it everywhere.
  std::vector<std::string> procs() const {
    std::vector<std::string> out;
    for (const auto& p : parts) out.push_back(p->dir() + (p->root == parts.front()->root ? "/cgroup.procs" : "/tasks"));
    return out;
  }
  // The file `name` of the v1 cpu (or cpuset, or memory) part, "" on a v2 host.
  std::string v1_file(const std::string& name) const {
    for (const auto& p : parts)
      if (p->root != parts.front()->root && std::filesystem::exists(p->dir() + "/" + name))
        return p->dir() + "/" + name;
    return "";
  }
};

// Whether this runs in the vmtest guest (KHAGENT_VMTEST, set by
// vmtest/run.sh): QEMU TCG, whose clocks are emulated. There the kernel's
// schedstat run_delay is no bound on the true waits (checked on 6.1, with
// khagent and the reference tracer agreeing within 1%: run_delay 62 ms
// against their 241 ms in one boot, 772 ms against 420 ms in another, whose
// console said "tsc: Unable to calibrate against PIT"; the cause of the
// high one is not established: a boot with notsc, whose scheduler clock is
// jiffies, read low, 45 ms against 242 ms).
inline bool in_vmtest_guest() { return std::getenv("KHAGENT_VMTEST") != nullptr; }

inline std::string unique(const std::string& base) { return base + "-" + std::to_string(getpid()); }

#ifdef KHAGENT_BINARY
// `khagent --no-pin run --no-metrics` with `cfg` and `state`, its output in
// `log`; the child's pid (-1 if fork failed). Returns once the agent says
// it is running (its BPF programs loaded, the first tick due one interval
// later), once it has exited, or after 90 s: loading takes a fraction of a
// second on a host and from 3 to over 9 s under QEMU's TCG, so waits for
// what its ticks do start from here.
inline pid_t start_agent(const std::string& cfg, const std::string& state, const std::string& log) {
  pid_t p = fork();
  if (p == 0) {
    std::string cmd = std::string("exec ") + KHAGENT_BINARY + " --no-pin run --no-metrics --config " + cfg +
                      " --state-file " + state + " > " + log + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  if (p < 0) return p;
  for (int i = 0; i < 1800; i++) {
    std::ifstream in(log);
    std::string line;
    while (std::getline(in, line))
      if (line.find(" running: set up in ") != std::string::npos) return p;
    siginfo_t si{};  // exited: WNOWAIT leaves it for the caller's waitpid
    if (::waitid(P_PID, static_cast<id_t>(p), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == p) return p;
    timespec ts{0, 50'000'000};
    nanosleep(&ts, nullptr);
  }
  return p;
}
#endif

inline uint64_t mono_ns_now() { return khagent::mono_ns(); }

inline void sleep_s(double s) {
  timespec ts{static_cast<time_t>(s), static_cast<long>((s - static_cast<long>(s)) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

}  // namespace hosttest
