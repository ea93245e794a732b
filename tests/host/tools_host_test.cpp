// khagent doctor / status / top as an operator runs them: the real binary,
// as root, on this kernel.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "host_util.h"
#include "khagent/abi/runq.h"
#include "khagent/loader/runq_loader.h"
#include "runq.skel.h"

using namespace hosttest;

namespace {

struct Cmd {
  int code = -1;
  std::string out;
};

// Runs a shell command line, capturing stdout (and stderr unless the command
// redirects it itself).
Cmd run(const std::string& cmd) {
  Cmd r;
  FILE* p = popen((cmd.find("2>") == std::string::npos ? cmd + " 2>&1" : cmd).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

std::string bin() { return KHAGENT_BINARY; }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}

bool has_line_starting(const std::string& text, const std::string& prefix) {
  for (const auto& l : lines_of(text))
    if (l.rfind(prefix, 0) == 0) return true;
  return false;
}

// `khagent --pin-dir DIR observe ...` in a child process (the test's
// "running agent"), stopped by its pid.
struct ObserveAgent {
  pid_t pid = -1;
  std::string log;
  ObserveAgent(const std::string& pin_dir, const std::string& log_file) : log(log_file) {
    pid = fork();
    if (pid == 0) {
      int fd = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
      }
      execl(KHAGENT_BINARY, KHAGENT_BINARY, "--pin-dir", pin_dir.c_str(), "observe", "--interval", "200ms", "--count",
            "50", nullptr);
      _exit(127);
    }
  }
  // Waits until the maps are pinned (or the agent died).
  bool wait_pinned(const std::string& pin_dir, double seconds) {
    for (int i = 0; i < static_cast<int>(seconds * 20); i++) {
      if (::access((pin_dir + "/counters").c_str(), F_OK) == 0 &&
          ::access((pin_dir + "/protected_cgroups").c_str(), F_OK) == 0)
        return true;
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return false;
      }
      sleep_s(0.05);
    }
    return false;
  }
  int stop(int sig) {
    if (pid <= 0) return -1;
    ::kill(pid, sig);
    int st = 0;
    waitpid(pid, &st, 0);
    pid = -1;
    return st;
  }
  ~ObserveAgent() {
    stop(SIGKILL);
    ::unlink(log.c_str());
  }
};

// `khagent top --interval 200ms` on a fresh pseudo-terminal. The test keeps
// its own fd of the terminal to read the mode top leaves behind.
struct PtyTop {
  int master = -1, slave = -1;
  pid_t pid = -1;
  std::string screen;  // everything top wrote

  PtyTop() {
    master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) return;
    std::string name = ptsname(master);
    slave = ::open(name.c_str(), O_RDWR | O_NOCTTY);
    winsize ws{30, 140, 0, 0};
    ioctl(master, TIOCSWINSZ, &ws);
    pid = fork();
    if (pid == 0) {
      setsid();
      int fd = ::open(name.c_str(), O_RDWR);  // becomes the controlling terminal
      if (fd < 0) _exit(126);
      dup2(fd, 0);
      dup2(fd, 1);
      dup2(fd, 2);
      execl(KHAGENT_BINARY, KHAGENT_BINARY, "top", "--interval", "200ms", nullptr);
      _exit(127);
    }
  }
  bool ok() const { return master >= 0 && slave >= 0 && pid > 0; }
  void pump(double seconds) {
    for (int i = 0; i < static_cast<int>(seconds * 20); i++) {
      pollfd p{master, POLLIN, 0};
      if (poll(&p, 1, 50) > 0) {
        char buf[8192];
        ssize_t n = ::read(master, buf, sizeof(buf));
        if (n > 0) screen.append(buf, static_cast<size_t>(n));
      }
    }
  }
  bool type(const char* keys) { return ::write(master, keys, strlen(keys)) == static_cast<ssize_t>(strlen(keys)); }
  // Exit status once top ended by itself within `seconds`; -1 otherwise (then killed).
  int wait_exit(double seconds) {
    int st = 0;
    for (int i = 0; i < static_cast<int>(seconds * 20); i++) {
      pump(0.05);
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        pump(0.1);
        return st;
      }
    }
    return -1;
  }
  termios mode() const {
    termios t{};
    tcgetattr(slave, &t);
    return t;
  }
  std::string tail() const { return screen.substr(screen.size() > 3000 ? screen.size() - 3000 : 0); }
  ~PtyTop() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      int st = 0;
      waitpid(pid, &st, 0);
    }
    if (slave >= 0) ::close(slave);
    if (master >= 0) ::close(master);
  }
};

// The largest M in "N of M cgroups" footers drawn so far.
uint64_t most_cgroups_shown(const std::string& screen) {
  static const std::regex re(" of ([0-9]+) cgroups");
  uint64_t best = 0;
  for (auto it = std::sregex_iterator(screen.begin(), screen.end(), re); it != std::sregex_iterator(); ++it)
    best = std::max<uint64_t>(best, std::stoull((*it)[1]));
  return best;
}

}  // namespace

// doctor: every line is a verdict, the fentry line matches what this kernel
// allows, the cpu controller line matches the cgroup2 root, and the exit code
// follows the FAIL lines.
TEST(ToolsHost, DoctorReportsThisNodeAndExitsByItsFailLines) {
  REQUIRE_ROOT();
  Cmd r = run(bin() + " doctor 2>/dev/null");
  ASSERT_TRUE(r.code == 0 || r.code == 1) << r.code << "\n" << r.out;
  auto ls = lines_of(r.out);
  ASSERT_GE(ls.size(), 10u) << r.out;
  size_t ok = 0, warn = 0, fail = 0;
  for (size_t i = 0; i + 1 < ls.size(); i++) {
    const auto& l = ls[i];
    if (l.rfind("OK   ", 0) == 0) ok++;
    else if (l.rfind("WARN ", 0) == 0) warn++;
    else if (l.rfind("FAIL ", 0) == 0) fail++;
    else ADD_FAILURE() << "not a verdict line: '" << l << "'\n" << r.out;
  }
  EXPECT_EQ(ls.back(), std::to_string(ok) + " OK, " + std::to_string(warn) + " WARN, " + std::to_string(fail) + " FAIL")
      << r.out;
  EXPECT_EQ(r.code, fail ? 1 : 0) << r.out;

  EXPECT_TRUE(has_line_starting(r.out, "OK   root")) << r.out;
  EXPECT_TRUE(has_line_starting(r.out, "OK   kernel")) << r.out;
  EXPECT_TRUE(has_line_starting(r.out, "OK   btf")) << r.out;
  EXPECT_TRUE(has_line_starting(r.out, "OK   bpf programs: tp_btf")) << "the host tier loads them:\n" << r.out;
  EXPECT_TRUE(has_line_starting(r.out, "OK   bpf maps")) << r.out;
  bool fentry = khagent::probe_fentry("throttle_cfs_rq") && khagent::probe_fentry("unthrottle_cfs_rq");
  if (fentry) EXPECT_TRUE(has_line_starting(r.out, "OK   throttle hooks: fentry")) << r.out;
  else
    EXPECT_TRUE(has_line_starting(r.out, "WARN throttle hooks: fentry refused: throttling read from cpu.stat"))
        << r.out;

  auto m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  std::istringstream sub(read_file(m.cgroup2 + "/cgroup.subtree_control"));
  bool cpu = false;
  for (std::string w; sub >> w;) cpu |= w == "cpu";
  if (cpu) {
    EXPECT_TRUE(has_line_starting(r.out, "OK   cpu controller")) << r.out;
    EXPECT_TRUE(has_line_starting(r.out, "OK   cgroup backend: cgroup v2")) << r.out;
  } else if (!m.cpu_v1.empty()) {
    // A hybrid host: written through the v1 hierarchies.
    EXPECT_TRUE(has_line_starting(r.out, "OK   cpu controller: hybrid host: on cgroup v1")) << r.out;
    EXPECT_TRUE(has_line_starting(r.out, "OK   cgroup backend: hybrid")) << r.out;
  } else {
    EXPECT_TRUE(has_line_starting(r.out, "FAIL cpu controller")) << r.out;
    EXPECT_EQ(r.code, 1);
  }
}

// A state file nobody can write is a FAIL, and FAIL means exit code 1.
TEST(ToolsHost, DoctorFailsOnAnUnwritableStateFileDirectory) {
  REQUIRE_ROOT();
  Cmd r = run(bin() + " doctor --state-file /proc/" + unique("khagent") + "/state.json 2>/dev/null");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has_line_starting(
      r.out, "FAIL state file: /proc/" + unique("khagent") + " does not exist and /proc is not writable"))
      << r.out;
}

TEST(ToolsHost, StatusWithoutAgentExitsOne) {
  REQUIRE_ROOT();
  std::string dir = "/sys/fs/bpf/" + unique("khagent-none");
  Cmd r = run(bin() + " --pin-dir " + dir + " status --state-file /tmp/" + unique("kh-none") + ".json");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("no running agent found under " + dir), std::string::npos) << r.out;
  Cmd j = run(bin() + " --pin-dir " + dir + " status --json 2>/dev/null");
  EXPECT_EQ(j.code, 1) << j.out;
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_FALSE(doc["agent_found"].get<bool>());
}

// An agent started here (observe, pinning under a directory of its own):
// status finds it, its programs and process, and reads live counters; once
// it is SIGKILLed, the pins it leaves are reported as stale, not as an agent.
TEST(ToolsHost, StatusReportsARunningAgent) {
  REQUIRE_ROOT();
  std::string dir = "/sys/fs/bpf/" + unique("khagent-status");
  std::string state = "/tmp/" + unique("kh-status") + ".json";
  ObserveAgent agent(dir, "/tmp/" + unique("kh-status") + ".log");
  ASSERT_GT(agent.pid, 0);
  ASSERT_TRUE(agent.wait_pinned(dir, 15)) << read_file(agent.log);
  sleep_s(0.5);

  Cmd r = run(bin() + " --pin-dir " + dir + " status --state-file " + state);
  EXPECT_EQ(r.code, 0) << r.out;
  // 3 programs use the pinned maps, 4 where the fentry throttle hooks load.
  EXPECT_NE(r.out.find("agent: running (maps pinned under " + dir + ", used by "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" BPF programs; process " + std::to_string(agent.pid) + " khagent)"), std::string::npos)
      << r.out;
  EXPECT_TRUE(has_line_starting(r.out,
                                "pinned maps: cgroup_stats, cgroup_slots, interference, pair_slots, throttle_stats, "
                                "cpu_state, counters, protected_cgroups, reclaim_stats"))
      << r.out;
  EXPECT_NE(r.out.find("handle_sched_switch"), std::string::npos) << "full program names from BTF:\n" << r.out;
  EXPECT_TRUE(has_line_starting(r.out, "BPF counters: switches ")) << r.out;
  EXPECT_TRUE(has_line_starting(r.out, "map layout version: " + std::to_string(KH_RUNQ_ABI_VERSION))) << r.out;
  EXPECT_TRUE(has_line_starting(r.out, "cgroups tracked: ")) << r.out;
  EXPECT_TRUE(has_line_starting(r.out, "protected (online) cgroups: 0")) << "observe protects nothing:\n" << r.out;
  EXPECT_NE(r.out.find("state file " + state + ": no original values recorded"), std::string::npos) << r.out;

  // JSON, twice: the counters are the live maps'.
  Cmd j1 = run(bin() + " --pin-dir " + dir + " status --json --state-file " + state + " 2>/dev/null");
  ASSERT_EQ(j1.code, 0) << j1.out;
  sleep_s(0.5);
  Cmd j2 = run(bin() + " --pin-dir " + dir + " status --json --state-file " + state + " 2>/dev/null");
  ASSERT_EQ(j2.code, 0) << j2.out;
  auto a = nlohmann::json::parse(j1.out), b = nlohmann::json::parse(j2.out);
  EXPECT_TRUE(a["agent_found"].get<bool>());
  EXPECT_GT(a["counters"]["switches"].get<uint64_t>(), 0u) << j1.out;
  EXPECT_GT(b["counters"]["switches"].get<uint64_t>(), a["counters"]["switches"].get<uint64_t>());
  EXPECT_GE(a["cgroups_tracked"].get<uint64_t>(), 1u) << j1.out;
  EXPECT_EQ(a["max_cgroups"].get<uint64_t>(), 4096u);
  bool fentry = khagent::probe_fentry("throttle_cfs_rq") && khagent::probe_fentry("unthrottle_cfs_rq");
  EXPECT_EQ(a["throttle_source"], fentry ? "fentry" : "cpu.stat");
  ASSERT_EQ(a["processes"].size(), 1u) << j1.out;
  EXPECT_EQ(a["processes"][0]["pid"], agent.pid);
  EXPECT_EQ(a["processes"][0]["comm"], "khagent");

  // Killed without cleanup: pins stay, programs go. The kernel frees them
  // asynchronously after the process is gone: for a moment a program can
  // still be listed while its read-only data is already gone (status then
  // reports an unknown layout version), so wait for the settled answer.
  agent.stop(SIGKILL);
  const std::string stale =
      "no running agent found under " + dir + ": maps are pinned but no loaded BPF program uses them";
  Cmd s;
  for (int i = 0; i < 50; i++) {
    s = run(bin() + " --pin-dir " + dir + " status --state-file " + state);
    if (s.code == 1 && s.out.find(stale) != std::string::npos) break;
    sleep_s(0.1);
  }
  EXPECT_EQ(s.code, 1) << s.out;
  EXPECT_NE(s.out.find(stale), std::string::npos) << s.out;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST(ToolsHost, TopRefusesWithoutATerminal) {
  REQUIRE_ROOT();
  // stderr to the pipe, stdout (not a terminal) to /dev/null.
  Cmd r = run(bin() + " top </dev/null 2>&1 >/dev/null");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("not a terminal"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("khagent observe"), std::string::npos) << r.out;
}

// top in a pseudo-terminal: it draws, reacts to s and o, quits on q with exit
// code 0 and leaves the terminal as it found it.
TEST(ToolsHost, TopInAPseudoTerminal) {
  REQUIRE_ROOT();
  PtyTop top;
  ASSERT_TRUE(top.ok());
  termios before = top.mode();
  ASSERT_TRUE(before.c_lflag & ICANON);
  // Loading BPF takes seconds under emulation (vmtest): wait for the first frame.
  for (int i = 0; i < 60 && top.screen.find("CLASS") == std::string::npos; i++) top.pump(0.5);
  top.pump(0.5);
  EXPECT_NE(top.screen.find("\033[?1049h"), std::string::npos) << "alternate screen";
  EXPECT_NE(top.screen.find("khagent top  "), std::string::npos) << top.tail();
  EXPECT_NE(top.screen.find("throttling from "), std::string::npos) << top.tail();
  EXPECT_NE(top.screen.find("CLASS"), std::string::npos) << top.tail();
  EXPECT_GE(most_cgroups_shown(top.screen), 1u) << "the root cgroup always runs something:\n" << top.tail();
  termios raw = top.mode();
  EXPECT_FALSE(raw.c_lflag & ICANON) << "keys are read one at a time";
  EXPECT_FALSE(raw.c_lflag & ECHO);

  size_t mark = top.screen.size();
  ASSERT_TRUE(top.type("s"));
  top.pump(0.5);
  EXPECT_NE(top.screen.find("sort wait", mark), std::string::npos) << top.screen.substr(mark);
  mark = top.screen.size();
  ASSERT_TRUE(top.type("o"));
  top.pump(0.5);
  EXPECT_NE(top.screen.find("online only: on", mark), std::string::npos) << top.screen.substr(mark);
  ASSERT_TRUE(top.type("q"));
  int st = top.wait_exit(3);
  ASSERT_NE(st, -1) << "top did not quit on q:\n" << top.tail();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st << "\n" << top.tail();
  EXPECT_NE(top.screen.rfind("\033[?1049l"), std::string::npos) << "left the alternate screen";
  termios after = top.mode();
  EXPECT_EQ(after.c_lflag & (ICANON | ECHO), before.c_lflag & (ICANON | ECHO)) << "terminal mode restored";
  EXPECT_EQ(after.c_cc[VSUSP], before.c_cc[VSUSP]);
}

// Ctrl-C (SIGINT from the terminal) quits as cleanly as q.
TEST(ToolsHost, TopRestoresTheTerminalOnCtrlC) {
  REQUIRE_ROOT();
  PtyTop top;
  ASSERT_TRUE(top.ok());
  for (int i = 0; i < 60 && top.screen.find("CLASS") == std::string::npos; i++) top.pump(0.5);
  ASSERT_NE(top.screen.find("khagent top  "), std::string::npos) << top.tail();
  ASSERT_FALSE(top.mode().c_lflag & ICANON);
  ASSERT_TRUE(top.type("\x03"));  // the terminal's interrupt character
  int st = top.wait_exit(3);
  ASSERT_NE(st, -1) << "top did not stop on Ctrl-C:\n" << top.tail();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  termios after = top.mode();
  EXPECT_TRUE(after.c_lflag & ICANON);
  EXPECT_TRUE(after.c_lflag & ECHO);
  EXPECT_NE(top.screen.rfind("\033[?1049l"), std::string::npos);
}

// Maps of another layout version (an agent of another release) are not read:
// status says which versions differ and exits 1. The object is loaded here
// with another kh_abi_version in its rodata and its maps pinned as the
// agent pins them.
TEST(ToolsHost, StatusRefusesMapsOfAnotherLayoutVersion) {
  REQUIRE_ROOT();
  std::string dir = "/sys/fs/bpf/" + unique("khagent-abi");
  runq_bpf* skel = runq_bpf__open();
  ASSERT_NE(skel, nullptr);
  skel->rodata->kh_abi_version = KH_RUNQ_ABI_VERSION + 1;
  // The maps, the read-only data and one program using them (status looks
  // for it) are what matter here: what this kernel may refuse (fentry,
  // iterators) is not loaded.
  bpf_program* p = nullptr;
  bpf_object__for_each_program(p, skel->obj) bpf_program__set_autoload(p, p == skel->progs.handle_sched_switch);
  ASSERT_EQ(runq_bpf__load(skel), 0);
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  for (bpf_map* m : {skel->maps.cgroup_stats, skel->maps.interference, skel->maps.throttle_stats, skel->maps.cpu_state,
                     skel->maps.counters, skel->maps.protected_cgroups})
    ASSERT_EQ(bpf_map__pin(m, (dir + "/" + bpf_map__name(m)).c_str()), 0);
  Cmd r = run(bin() + " --pin-dir " + dir + " status --state-file /tmp/" + unique("kh-abi") + ".json");
  for (bpf_map* m : {skel->maps.cgroup_stats, skel->maps.interference, skel->maps.throttle_stats, skel->maps.cpu_state,
                     skel->maps.counters, skel->maps.protected_cgroups})
    bpf_map__unpin(m, nullptr);
  ::rmdir(dir.c_str());
  runq_bpf__destroy(skel);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("layout version " + std::to_string(KH_RUNQ_ABI_VERSION + 1) + ", this khagent reads version " +
                       std::to_string(KH_RUNQ_ABI_VERSION)),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(has_line_starting(r.out, "cgroups tracked: ")) << r.out;
}
