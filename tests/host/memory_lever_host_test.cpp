// The memory lever on the running kernel: the agent limits the offline
// parent to what the node's memory leaves (v1 memory.limit_in_bytes on a
// hybrid host, v2 memory.high in the VM), the online process survives an
// offline hog that would otherwise get it OOM-killed, the limit follows the
// online side's growth within a second, and the original comes back when the
// agent stops. The "node" is a parent cgroup with a limit, so no pressure
// leaves it.
#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host_util.h"

using namespace khagent;
using namespace hosttest;

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Touches `mib` MiB of new anonymous memory, page by page.
void grow(size_t mib) {
  for (size_t i = 0; i < mib; i++) {
    auto* p = static_cast<char*>(::malloc(kMiB));
    if (!p) _exit(3);
    for (size_t o = 0; o < kMiB; o += 4096) p[o] = 1;
  }
}

// A child in `cg` at `adj` that holds `mib` MiB, then grows by `step` MiB at
// each byte read from `ctl` (write end closed: it exits), telling `done` the
// MiB it holds after each step.
pid_t holder(const LaidOutCgroup& cg, int adj, size_t mib, size_t step, int ctl, int done) {
  pid_t p = fork();
  if (p != 0) return p;
  for (const auto& f : cg.procs())
    if (!write_file(f, std::to_string(getpid()))) _exit(5);  // not in the cgroup: the test would mean nothing
  write_file("/proc/self/oom_score_adj", std::to_string(adj));
  grow(mib);
  size_t held = mib;
  if (::write(done, &held, sizeof held) < 0) _exit(4);
  char c;
  while (::read(ctl, &c, 1) == 1) {
    grow(step);
    held += step;
    if (::write(done, &held, sizeof held) < 0) _exit(4);
  }
  _exit(0);
}

// The limit khagent writes on `cg`, in bytes; 0 when there is none.
uint64_t limit_of(const Mounts& m, bool v1, const std::string& rel) {
  std::string t = read_file(v1 ? m.memory_v1 + rel + "/memory.limit_in_bytes" : m.cgroup2 + rel + "/memory.high");
  if (t.empty() || t.rfind("max", 0) == 0) return 0;
  uint64_t v = std::stoull(t);
  return v >= (uint64_t{1} << 62) ? 0 : v;
}

int adj_of(pid_t pid) {
  std::string t = read_file("/proc/" + std::to_string(pid) + "/oom_score_adj");
  return t.empty() ? -9999 : std::stoi(t);
}

// Why the memory lever cannot be tested here; "" when it can.
std::string no_memory_lever(const Mounts& m, bool v1) {
  if (v1 && m.memory_v1.empty()) return "hybrid host without a v1 memory hierarchy: cannot test the memory lever";
  if (!v1 && read_file(m.cgroup2 + "/cgroup.subtree_control").find("memory") == std::string::npos)
    return "the memory controller is not enabled in cgroup2: cannot test the memory lever";
  return "";
}

// Waits up to `s` seconds for `pred`.
template <typename F>
bool wait_for(double s, F pred) {
  for (int i = 0; i < static_cast<int>(s * 20); i++) {
    if (pred()) return true;
    sleep_s(0.05);
  }
  return pred();
}

}  // namespace

TEST(AgentMemory, OfflineLimitedToWhatOnlineLeavesAndTheOnlineProcessSurvivesAHog) {
  REQUIRE_ROOT();
  Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  const bool v1 = hybrid(m);
  if (auto why = no_memory_lever(m, v1); !why.empty()) FAIL() << why;

  const std::string k = unique("khm");
  const std::string node = "/" + k + "-node", yarn = node + "/yarn";
  LaidOutCgroup c_node(m, node, true), c_yarn(m, yarn, true), c_online(m, node + "/online", true, true),
      c_cont(m, yarn + "/container_e01_1700000000000_0001_01_000002", true, true);
  // The node: 768 MiB, nothing else in it.
  const std::string node_limit = v1 ? m.memory_v1 + node + "/memory.limit_in_bytes" : m.cgroup2 + node + "/memory.max";
  ASSERT_TRUE(write_file(node_limit, std::to_string(768 * kMiB))) << node_limit;
  const uint64_t before = limit_of(m, v1, yarn);

  // Online: 192 MiB at the oom_score_adj of a Burstable pod (958), which
  // the kernel kills before an offline process at 0 of any size.
  int on_ctl[2], on_done[2], hog_ctl[2], hog_done[2];
  ASSERT_EQ(::pipe2(on_ctl, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(on_done, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(hog_ctl, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(hog_done, O_CLOEXEC), 0);
  ::signal(SIGPIPE, SIG_IGN);  // a killed holder must fail the test, not end it
  pid_t online = holder(c_online, 958, 192, 128, on_ctl[0], on_done[1]);
  ::close(on_ctl[0]);
  ::close(on_done[1]);
  size_t held = 0;
  ASSERT_EQ(::read(on_done[0], &held, sizeof held), static_cast<ssize_t>(sizeof held));

  const std::string cfg = "/tmp/" + k + ".yaml", state = "/tmp/" + k + "-state.json", log = "/tmp/" + k + ".log";
  std::ofstream(cfg) << "tick: 100ms\noffline:\n  yarn_hierarchy: " << yarn.substr(1)
                     << "\nmemory:\n  node_cgroup: " << node
                     << "\n  reserve: 64Mi\n  reserve_share: 0\n  eviction_threshold: 0\n  min_offline: 32Mi\n";
  pid_t agent = start_agent(cfg, state, log);
  // 768 - 64 reserve - 192 online (and the test's page cache) = at most 512 MiB.
  const bool limited = wait_for(10, [&] { return limit_of(m, v1, yarn) != before; });
  const uint64_t first = limit_of(m, v1, yarn);
  // An offline process that only sleeps: raised to oom_score_adj 1000, and
  // put back when the agent stops.
  pid_t sleeper = fork();
  if (sleeper == 0) {
    // Its adj before it joins: written after, it could undo the agent's
    // raise, which the agent makes once per process.
    write_file("/proc/self/oom_score_adj", "0");
    for (const auto& f : c_cont.procs())
      if (!write_file(f, std::to_string(getpid()))) _exit(5);
    ::pause();
    _exit(0);
  }
  const bool sleeper_raised = wait_for(5, [&] { return adj_of(sleeper) == 1000; });

  // The hog: 600 MiB in the container, 8 MiB at a time. Unlimited, it
  // fills the node and the kernel kills the online process (958 > 0).
  pid_t hog = holder(c_cont, 0, 0, 8, hog_ctl[0], hog_done[1]);
  ::close(hog_ctl[0]);
  ::close(hog_done[1]);
  size_t hog_held = 0, got = 0;
  // (No ASSERT while the agent runs: it must be stopped below.)
  const bool hog_joined = ::read(hog_done[0], &got, sizeof got) == static_cast<ssize_t>(sizeof got);
  const uint64_t hog_start = mono_ns_now();
  for (int i = 0; hog_joined && i < 75; i++) {
    if (::write(hog_ctl[1], "x", 1) != 1) break;
    // v1: the hog is killed in its limit (EOF); v2: memory.high throttles it
    // (no answer within 3 s).
    pollfd pf{hog_done[0], POLLIN, 0};
    if (::poll(&pf, 1, 3000) <= 0 || ::read(hog_done[0], &got, sizeof got) != static_cast<ssize_t>(sizeof got)) break;
    hog_held = got;
  }
  const double hog_s = static_cast<double>(mono_ns_now() - hog_start) / 1e9;
  int hog_st = 0;
  const bool hog_died = wait_for(1, [&] { return ::waitpid(hog, &hog_st, WNOHANG) == hog; });
  if (!hog_died) {
    ::kill(hog, SIGKILL);
    waitpid(hog, &hog_st, 0);
  }
  const bool online_alive = ::waitpid(online, nullptr, WNOHANG) == 0;

  // Online grows by 128 MiB: the limit follows within a second. (A dead
  // online process answers with EOF.)
  const uint64_t mid = limit_of(m, v1, yarn);
  uint64_t grown_ns = mono_ns_now();
  const bool grew = online_alive && ::write(on_ctl[1], "x", 1) == 1 &&
                    ::read(on_done[0], &held, sizeof held) == static_cast<ssize_t>(sizeof held);
  // Within 3 s on a real kernel; the emulated guest's clock and ticks are
  // slow, so there the bound is only that the cut comes (10 s).
  const int cut_bound_s = in_vmtest_guest() ? 10 : 3;
  // The cut is the growth as the node's working set shows it: 128 MiB on
  // the host, 98-128 MiB in the 6.1 guest (where the rest of the node's
  // working set moved by up to 30 MiB meanwhile); half of it is asked.
  const bool cut = grew && wait_for(cut_bound_s, [&] { return limit_of(m, v1, yarn) + 64 * kMiB <= mid; });
  const double cut_ms = static_cast<double>(mono_ns_now() - grown_ns) / 1e6;
  const uint64_t after_growth = limit_of(m, v1, yarn);

  const int online_adj = adj_of(online);
  ::kill(agent, SIGTERM);
  int st = 0;
  waitpid(agent, &st, 0);
  const int sleeper_after = adj_of(sleeper);
  ::kill(sleeper, SIGKILL);
  waitpid(sleeper, nullptr, 0);
  const std::string text = read_file(log);
  ::close(on_ctl[1]);
  ::kill(online, SIGKILL);
  waitpid(online, nullptr, 0);
  for (const auto& f : {cfg, state, state + ".prev", log}) ::unlink(f.c_str());
  for (int fd : {on_done[0], hog_ctl[1], hog_done[0]}) ::close(fd);

  std::printf(
      "offline limit (%s): %llu MiB at start; the hog reached %zu MiB in %.1f s (%s); limit %llu MiB -> %llu "
      "MiB %.0f ms after online grew by 128 MiB\n",
      v1 ? "v1 memory.limit_in_bytes" : "memory.high", static_cast<unsigned long long>(first / kMiB), hog_held, hog_s,
      hog_died ? "killed by the kernel" : "stopped by the test", static_cast<unsigned long long>(mid / kMiB),
      static_cast<unsigned long long>(after_growth / kMiB), cut_ms);
  ASSERT_TRUE(limited) << "khagent did not limit the offline parent\n" << text;
  EXPECT_LE(first, 512 * kMiB) << text;
  EXPECT_GE(first, 384 * kMiB) << "more than the test's own page cache was counted as online\n" << text;
  EXPECT_TRUE(hog_joined) << "the hog could not join its cgroup\n" << text;
  EXPECT_TRUE(sleeper_raised) << "an offline process was not put first in the OOM order\n" << text;
  EXPECT_EQ(sleeper_after, 0) << "its oom_score_adj was not put back\n" << text;
  EXPECT_EQ(online_adj, 958) << "online's oom_score_adj is the kubelet's, never khagent's\n" << text;
  EXPECT_TRUE(online_alive) << "the online process was killed\n" << text;
  if (v1 && hog_died && WIFSIGNALED(hog_st)) {  // the kill is counted (v1 memory.oom_control of the container)
    EXPECT_NE(text.find("OOM kill inside the offline parents"), std::string::npos) << text;
  }
  EXPECT_LT(hog_held, 600u) << "the hog got all it asked for\n" << text;
  EXPECT_LE(hog_held * kMiB, first + 64 * kMiB) << "the hog grew past its limit\n" << text;
  EXPECT_TRUE(grew) << "the online process could not grow by 128 MiB\n" << text;
  EXPECT_TRUE(cut) << "the limit did not follow online's growth within " << cut_bound_s << " s\n" << text;
  EXPECT_EQ(text.find("rejected"), std::string::npos) << text;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << text;
  EXPECT_EQ(limit_of(m, v1, yarn), before) << "the original limit was not restored\n" << text;
}

// SIGKILL gives the agent no chance to put the limit back: the next start
// keeps the original from the state file (never the limit it finds, its own)
// and restores it when it stops.
TEST(AgentMemory, LimitRestoredAfterSigkillAndRestart) {
  REQUIRE_ROOT();
  Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  const bool v1 = hybrid(m);
  if (auto why = no_memory_lever(m, v1); !why.empty()) FAIL() << why;
  const std::string k = unique("khmr");
  const std::string node = "/" + k + "-node", yarn = node + "/yarn";
  LaidOutCgroup c_node(m, node, true), c_yarn(m, yarn, true),
      c_cont(m, yarn + "/container_e01_1700000000000_0001_01_000002", true, true);
  const std::string node_limit = v1 ? m.memory_v1 + node + "/memory.limit_in_bytes" : m.cgroup2 + node + "/memory.max";
  ASSERT_TRUE(write_file(node_limit, std::to_string(512 * kMiB))) << node_limit;
  const uint64_t before = limit_of(m, v1, yarn);
  const std::string cfg = "/tmp/" + k + ".yaml", state = "/tmp/" + k + "-state.json";
  std::ofstream(cfg) << "tick: 100ms\noffline:\n  yarn_hierarchy: " << yarn.substr(1)
                     << "\nmemory:\n  node_cgroup: " << node
                     << "\n  reserve: 64Mi\n  reserve_share: 0\n  eviction_threshold: 0\n  min_offline: 32Mi\n";
  auto start = [&] {
    pid_t p = fork();
    if (p == 0) {
      int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      execl(KHAGENT_BINARY, KHAGENT_BINARY, "--no-pin", "run", "--no-metrics", "--config", cfg.c_str(), "--state-file",
            state.c_str(), nullptr);
      _exit(127);
    }
    return p;
  };
  pid_t a = start();
  const bool limited = wait_for(10, [&] { return limit_of(m, v1, yarn) != before; });
  const uint64_t set = limit_of(m, v1, yarn);
  ::kill(a, SIGKILL);
  int st = 0;
  waitpid(a, &st, 0);
  const uint64_t after_kill = limit_of(m, v1, yarn);
  const std::string saved = read_file(state);
  pid_t b = start();
  sleep_s(1.5);
  ::kill(b, SIGTERM);
  waitpid(b, &st, 0);
  const uint64_t restored = limit_of(m, v1, yarn);
  for (const auto& f : {cfg, state, state + ".prev"}) ::unlink(f.c_str());
  ASSERT_TRUE(limited) << "khagent did not limit the offline parent";
  EXPECT_LE(set, 512 * kMiB);
  EXPECT_EQ(after_kill, set) << "a SIGKILLed agent restores nothing";
  EXPECT_NE(saved.find(v1 ? "v1:memory.limit_in_bytes" : "\"memory.high\""), std::string::npos) << saved;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_EQ(restored, before) << "the original from before the SIGKILL was not restored";
}

namespace {

// A file of `mib` MiB on disk and out of the page cache (written by the
// test, outside any node: its cache is nobody's once dropped).
bool make_file(const std::string& path, size_t mib) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::vector<char> buf(kMiB, 'k');
  bool ok = true;
  for (size_t i = 0; ok && i < mib; i++) ok = ::write(fd, buf.data(), buf.size()) == static_cast<ssize_t>(kMiB);
  ok = ok && ::fsync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return ok;
}

// A child in `cg` that reads `path` from start to end again and again, once
// a byte comes from `go` (-1: at once); with `write_mib`, it first writes the
// file anew with that many MiB each time (dirty pages to write back).
pid_t reader(const LaidOutCgroup& cg, const std::string& path, int go = -1, size_t write_mib = 0) {
  pid_t p = fork();
  if (p != 0) return p;
  for (const auto& f : cg.procs())
    if (!write_file(f, std::to_string(getpid()))) _exit(5);
  // Waiting, it wakes every 50 ms: a task that never switches after the
  // agent starts is not seen in its cgroup.
  for (pollfd pf{go, POLLIN, 0}; go >= 0 && ::poll(&pf, 1, 50) == 0;) {
  }
  char c;
  if (go >= 0 && ::read(go, &c, 1) != 1) _exit(0);
  std::vector<char> buf(kMiB, 'o');
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) _exit(6);
  for (;;) {
    if (write_mib) {
      if (::ftruncate(fd, 0) != 0) _exit(7);
      for (size_t i = 0; i < write_mib; i++)
        if (::pwrite(fd, buf.data(), buf.size(), static_cast<off_t>(i * kMiB)) < 0) _exit(7);
    }
    ::lseek(fd, 0, SEEK_SET);
    while (::read(fd, buf.data(), buf.size()) > 0) {
    }
  }
}

}  // namespace

// The event path, end to end: with ticks 8 s apart, an online pod that
// starts to stall on memory in a node that offline's page cache keeps full
// wakes the agent through its PSI trigger on the pod's memory.pressure, and
// the agent cuts the offline limit then, not at the next tick; the write is
// logged as the trigger's. The stall is page-cache thrashing (a file read
// again and again, with the node's room taken by an offline reader), so
// this needs a disk-backed file system: the vmtest guest runs from RAM and
// leaves the test out (tests/CMakeLists.txt).
TEST(AgentMemory, AnOnlinePodsStallCutsOfflineBetweenTicksThroughItsPsiTrigger) {
  REQUIRE_ROOT();
  Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  const bool v1 = hybrid(m);
  if (auto why = no_memory_lever(m, v1); !why.empty()) FAIL() << why;
  if (read_file(m.cgroup2 + "/memory.pressure").empty())
    FAIL() << "no memory.pressure in cgroup2: a kernel without PSI (or booted with psi=0)";
  const std::string k = unique("khmp");
  const std::string node = "/" + k + "-node", yarn = node + "/yarn";
  const std::string kube = node + "/kubepods.slice", burstable = kube + "/kubepods-burstable.slice";
  const std::string pod = burstable + "/kubepods-burstable-pod1111_2222.slice";
  LaidOutCgroup c_node(m, node, true), c_yarn(m, yarn, true),
      c_cont(m, yarn + "/container_e01_1700000000000_0001_01_000002", true, true), c_kube(m, kube, true),
      c_burst(m, burstable, true), c_pod(m, pod, true),
      c_ctr(m, pod + "/cri-containerd-abcdef012345.scope", true, true);
  const std::string node_limit = v1 ? m.memory_v1 + node + "/memory.limit_in_bytes" : m.cgroup2 + node + "/memory.max";
  ASSERT_TRUE(write_file(node_limit, std::to_string(384 * kMiB))) << node_limit;
  const uint64_t before = limit_of(m, v1, yarn);
  // Page cache to thrash needs a file system on a disk: tmpfs and ramfs
  // pages are not reclaimed without swap.
  struct statfs fs{};
  ASSERT_EQ(::statfs("/var/tmp", &fs), 0) << "statfs /var/tmp: " << std::strerror(errno);
  if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)
    FAIL() << "/var/tmp is in memory (tmpfs or ramfs): no page cache the kernel can reclaim, no stall to make";
  const std::string off_file = "/var/tmp/" + k + "-offline.dat", on_file = "/var/tmp/" + k + "-online.dat";
  const bool files = make_file(off_file, 512) && make_file(on_file, 160);
  if (!files) {
    ::unlink(off_file.c_str());
    ::unlink(on_file.c_str());
    FAIL() << "cannot write 672 MiB of test files in /var/tmp";
  }

  // Offline streams a file larger than the node; the agent's first tick
  // (8 s after its start) limits it to what online leaves, which is all of
  // the node but the reserve while online does nothing.
  int go[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  ::signal(SIGPIPE, SIG_IGN);  // a dead reader must fail the test, not end it
  pid_t streamer = reader(c_cont, off_file);
  // Online waits in its container, so that the agent knows the pod (from
  // its tasks' switches) at the first tick.
  pid_t online = reader(c_ctr, on_file, go[0], 160);
  ::close(go[0]);
  const std::string cfg = "/tmp/" + k + ".yaml", state = "/tmp/" + k + "-state.json", log = "/tmp/" + k + ".log";
  std::ofstream(cfg) << "tick: 8s\noffline:\n  yarn_hierarchy: " << yarn.substr(1)
                     << "\nmemory:\n  node_cgroup: " << node
                     << "\n  reserve: 32Mi\n  reserve_share: 0\n  eviction_threshold: 0\n  min_offline: 32Mi\n"
                     << "  stall_limit: 0.02\n";
  pid_t agent = start_agent(cfg, state, log);
  // (No ASSERT while the agent runs: it must be stopped below.)
  const bool armed = wait_for(15, [&] { return read_file(log).find("PSI triggers") != std::string::npos; });
  const uint64_t first_tick = mono_ns_now();
  // (The triggers are logged as the tick begins; its write follows.)
  wait_for(2, [&] { return limit_of(m, v1, yarn) != before; });
  const uint64_t limit0 = limit_of(m, v1, yarn);
  // Online starts to read its own file again and again: the node has room
  // for a reserve's worth of it, the rest is reclaimed and read back.
  const bool started = armed && ::write(go[1], "x", 1) == 1;
  const uint64_t online_start = mono_ns_now();
  const bool cut = started && wait_for(7, [&] {
                     const uint64_t l = limit_of(m, v1, yarn);
                     return l != 0 && l < limit0;
                   });
  const uint64_t cut_at = mono_ns_now();
  const uint64_t limit1 = limit_of(m, v1, yarn);
  const std::string pressure = read_file(m.cgroup2 + pod + "/memory.pressure");
  ::kill(agent, SIGTERM);
  int st = 0;
  waitpid(agent, &st, 0);
  const std::string text = read_file(log);
  ::close(go[1]);
  for (pid_t p : {online, streamer}) {
    ::kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
  for (const auto& f : {cfg, state, state + ".prev", log, off_file, on_file}) ::unlink(f.c_str());

  std::printf(
      "offline limit %llu MiB at the first tick, %llu MiB %.2f s after online began to read (%.2f s after the "
      "first tick; the next tick was due at 8 s)\nthe online pod's memory.pressure:\n%s",
      static_cast<unsigned long long>(limit0 / kMiB), static_cast<unsigned long long>(limit1 / kMiB),
      static_cast<double>(cut_at - online_start) / 1e9, static_cast<double>(cut_at - first_tick) / 1e9,
      pressure.c_str());
  const size_t woke = text.find("after the trigger woke the agent");
  if (woke != std::string::npos) {
    const size_t bol = text.rfind('\n', woke);
    std::printf("%s\n", text.substr(bol == std::string::npos ? 0 : bol + 1, text.find('\n', woke) - bol - 1).c_str());
  }
  ASSERT_TRUE(armed) << "no PSI trigger on the online pod after the first tick\n" << text;
  ASSERT_TRUE(started) << "the online reader is gone\n" << text;
  ASSERT_NE(limit0, 0u) << "the first tick did not limit offline\n" << text;
  EXPECT_TRUE(cut) << "the online stall did not cut offline before the next tick\n" << pressure << text;
  EXPECT_NE(woke, std::string::npos) << "the cut was not the PSI trigger's\n" << text;
  EXPECT_LT(cut_at - first_tick, 7'500'000'000u) << "the cut came with the second tick, not the trigger\n" << text;
  EXPECT_EQ(text.find("rejected"), std::string::npos) << text;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << text;
  EXPECT_EQ(limit_of(m, v1, yarn), before) << "the original limit was not restored\n" << text;
}

namespace {

// A cgroup's page cache refaults (memory.stat; v1: the hierarchical total).
uint64_t refaults_file(const Mounts& m, bool v1, const std::string& rel) {
  const std::string stat = read_file((v1 ? m.memory_v1 : m.cgroup2) + rel + "/memory.stat");
  const std::string key = std::string(v1 ? "total_" : "") + "workingset_refault_file ";
  for (size_t at = stat.find(key); at != std::string::npos; at = stat.find(key, at + 1))
    if (at == 0 || stat[at - 1] == '\n') return std::stoull(stat.substr(at + key.size()));
  return 0;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

}  // namespace

// Proactive reclaim on the running kernel: an online pod reads its files
// again and again in a node that an offline streamer's page cache keeps
// full; the pod refaults, and the agent asks the offline parent for page
// cache (v1: a pulse of memory.limit_in_bytes, v2: memory.reclaim) at most
// once a second, judges each step, and puts the offline limit back after
// every pulse and at exit; the budget counts what online refaulted with
// its working set. The stall cut is left out (stall_limit 1), so what
// moves is reclaim's and the refaults' doing. Whether it helps online is measured by
// scripts/bench-memory.sh (the stream rows), not asserted here. Page cache
// needs a disk-backed file system: vmtest runs it in a boot with a RAM disk
// (ext4) at /var/tmp.
TEST(AgentMemory, OfflinePageCacheIsReclaimedWhileAnOnlinePodRefaults) {
  REQUIRE_ROOT();
  Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  const bool v1 = hybrid(m);
  if (auto why = no_memory_lever(m, v1); !why.empty()) FAIL() << why;
  const std::string k = unique("khrc");
  const std::string node = "/" + k + "-node", yarn = node + "/yarn";
  const std::string kube = node + "/kubepods.slice", burstable = kube + "/kubepods-burstable.slice";
  const std::string pod = burstable + "/kubepods-burstable-pod3333_4444.slice";
  LaidOutCgroup c_node(m, node, true), c_yarn(m, yarn, true),
      c_cont(m, yarn + "/container_e01_1700000000000_0001_01_000002", true, true), c_kube(m, kube, true),
      c_burst(m, burstable, true), c_pod(m, pod, true),
      c_ctr(m, pod + "/cri-containerd-abcdef012345.scope", true, true);
  const std::string node_limit = v1 ? m.memory_v1 + node + "/memory.limit_in_bytes" : m.cgroup2 + node + "/memory.max";
  ASSERT_TRUE(write_file(node_limit, std::to_string(512 * kMiB))) << node_limit;
  const uint64_t before = limit_of(m, v1, yarn);
  struct statfs fs{};
  ASSERT_EQ(::statfs("/var/tmp", &fs), 0) << "statfs /var/tmp: " << std::strerror(errno);
  if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)
    FAIL() << "/var/tmp is in memory (tmpfs or ramfs): no page cache the kernel can reclaim";
  const std::string off_file = "/var/tmp/" + k + "-offline.dat", on_file = "/var/tmp/" + k + "-online.dat";
  if (!make_file(off_file, 768) || !make_file(on_file, 192)) {
    ::unlink(off_file.c_str());
    ::unlink(on_file.c_str());
    FAIL() << "cannot write 960 MiB of test files in /var/tmp";
  }
  // Offline fills the node first; online starts to read once the agent
  // has limited offline to what online left then (all but the reserve).
  int go[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  ::signal(SIGPIPE, SIG_IGN);
  pid_t streamer = reader(c_cont, off_file);
  pid_t online = reader(c_ctr, on_file, go[0]);
  ::close(go[0]);
  const std::string cfg = "/tmp/" + k + ".yaml", state = "/tmp/" + k + "-state.json", log = "/tmp/" + k + ".log";
  std::ofstream(cfg) << "tick: 200ms\noffline:\n  yarn_hierarchy: " << yarn.substr(1)
                     << "\nmemory:\n  node_cgroup: " << node
                     << "\n  reserve: 32Mi\n  reserve_share: 0\n  eviction_threshold: 0\n  min_offline: 32Mi\n"
                     << "  stall_limit: 1\n  stall_window: 0s\n  reclaim_interval: 1s\n";
  pid_t agent = start_agent(cfg, state, log);
  const bool limited = wait_for(15, [&] { return limit_of(m, v1, yarn) != before; });
  const bool started = limited && ::write(go[1], "x", 1) == 1;
  const uint64_t r0 = refaults_file(m, v1, pod);
  sleep_s(10);
  const uint64_t r1 = refaults_file(m, v1, pod);
  ::kill(agent, SIGTERM);
  int st = 0;
  waitpid(agent, &st, 0);
  const std::string text = read_file(log);
  ::close(go[1]);
  for (pid_t p : {online, streamer}) {
    ::kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
  for (const auto& f : {cfg, state, state + ".prev", log, off_file, on_file}) ::unlink(f.c_str());

  ASSERT_TRUE(limited) << "the agent did not limit offline\n" << text;
  ASSERT_TRUE(started) << "the online reader is gone\n" << text;
  const size_t asks = count_of(text, "memory reclaim: asking"), helped = count_of(text, "memory reclaim helped"),
               useless = count_of(text, "memory reclaim did not help"),
               costly = count_of(text, "memory reclaim cost online");
  std::printf(
      "online refaulted %.1f MiB/s of page cache over 10 s; %zu reclaim steps: %zu helped, %zu useless, "
      "%zu costly\n",
      static_cast<double>((r1 - r0) * 4096) / kMiB / 10.0, asks, helped, useless, costly);
  for (size_t at = text.find("memory "); at != std::string::npos; at = text.find("memory ", at + 1)) {
    const size_t bol = text.rfind('\n', at), eol = text.find('\n', at);
    const std::string line = text.substr(bol == std::string::npos ? 0 : bol + 1, eol - bol - 1);
    if (line.find("memory reclaim") != std::string::npos || line.find("memory budget") != std::string::npos)
      std::printf("  %s\n", line.c_str());
    at = eol == std::string::npos ? text.size() : eol;
  }
  ASSERT_GT(r1, r0) << "the online pod refaulted nothing: the test made no pressure\n" << text;
  EXPECT_GE(asks, 1u) << text;
  EXPECT_LE(asks, 11u) << "more than one step a second\n" << text;
  EXPECT_GE(helped + useless + costly, 1u) << "no step was judged\n" << text;
  // What online refaulted is counted with its working set too (up to its
  // inactive page cache): the budget was cut for it.
  EXPECT_NE(text.find("of online page cache refaulted lately"), std::string::npos)
      << "no budget counted the online pod's refaulted page cache\n"
      << text;
  EXPECT_EQ(text.find("rejected"), std::string::npos) << text;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << text;
  EXPECT_EQ(limit_of(m, v1, yarn), before) << "the original limit was not restored\n" << text;
}

// `khagent status` lists the online pods under the node cgroup with their
// memory, says which is at its own limit (a stall there is not offline's
// doing), and leaves out a BestEffort pod (offline by default).
TEST(MemoryStatus, ListsOnlinePodsWithTheirMemoryAndWhetherAtTheirOwnLimit) {
  REQUIRE_ROOT();
  Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  const bool v1 = hybrid(m);
  if (auto why = no_memory_lever(m, v1); !why.empty()) FAIL() << why;
  const std::string k = unique("khms");
  const std::string node = "/" + k + "-node", kube = node + "/kubepods.slice";
  const std::string burstable = kube + "/kubepods-burstable.slice", besteffort = kube + "/kubepods-besteffort.slice";
  const std::string free_pod = burstable + "/kubepods-burstable-pod1111_aaaa.slice";
  const std::string full_pod = burstable + "/kubepods-burstable-pod2222_bbbb.slice";
  const std::string be_pod = besteffort + "/kubepods-besteffort-pod3333_cccc.slice";
  LaidOutCgroup c_node(m, node, true), c_kube(m, kube, true), c_burst(m, burstable, true), c_be(m, besteffort, true),
      c_free(m, free_pod, true), c_full(m, full_pod, true), c_bep(m, be_pod, true),
      c_free_ctr(m, free_pod + "/cri-containerd-aaaa.scope", true, true),
      c_full_ctr(m, full_pod + "/cri-containerd-bbbb.scope", true, true);
  auto limit_file = [&](const std::string& rel) {
    return v1 ? m.memory_v1 + rel + "/memory.limit_in_bytes" : m.cgroup2 + rel + "/memory.max";
  };
  ASSERT_TRUE(write_file(limit_file(node), std::to_string(256 * kMiB)));
  ASSERT_TRUE(write_file(limit_file(full_pod), std::to_string(64 * kMiB)));
  int ctl[2], done[2];
  ASSERT_EQ(::pipe2(ctl, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(done, O_CLOEXEC), 0);
  // 61 MiB of a 64 MiB limit is within its 4 MiB margin; 24 MiB with no
  // limit of its own (the node's 256 MiB is the node's) is not. They hold
  // still (no byte is ever written to `ctl`) until killed.
  pid_t a = holder(c_free_ctr, 0, 24, 0, ctl[0], done[1]);
  pid_t b = holder(c_full_ctr, 0, 61, 0, ctl[0], done[1]);
  ::close(ctl[0]);
  ::close(done[1]);
  size_t held = 0;
  // Each holder reports once; a holder that failed to start reports
  // nothing, and the other holds the pipe open: wait 30 s at most.
  auto report = [&] {
    pollfd pfd{done[0], POLLIN, 0};
    return ::poll(&pfd, 1, 30000) == 1 && ::read(done[0], &held, sizeof held) == sizeof held;
  };
  const bool ready = report() && report();
  const std::string cfg = "/tmp/" + k + ".yaml", state = "/tmp/" + k + "-state.json";
  std::ofstream(cfg) << "memory:\n  node_cgroup: " << node << "\n";
  std::string out;
  if (FILE* p = popen((std::string(KHAGENT_BINARY) + " --pin-dir /sys/fs/bpf/" + k + " status --json --config " + cfg +
                       " --state-file " + state + " 2>/dev/null")
                          .c_str(),
                      "r")) {
    char buf[4096];
    size_t n = 0;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  for (pid_t h : {a, b}) {  // each holds the other's pipe ends: no EOF ends them
    int st = 0;
    ::kill(h, SIGKILL);
    waitpid(h, &st, 0);
  }
  ::close(ctl[1]);
  ::close(done[0]);
  for (const auto& f : {cfg, state}) ::unlink(f.c_str());
  ASSERT_TRUE(ready) << "a holder did not get its memory";
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  const auto& mem = j["memory"];
  ASSERT_TRUE(mem.is_object()) << out;
  EXPECT_EQ(mem["online_pods_under"], node);
  ASSERT_EQ(mem["online_pods"].size(), 2u) << "the two Burstable pods, not the BestEffort one: " << out;
  auto pod_named = [&](const std::string& cg) {
    for (const auto& p : mem["online_pods"])
      if (p["cgroup"] == cg) return p;
    return nlohmann::json::object();
  };
  const auto full = pod_named(full_pod);
  const auto free = pod_named(free_pod);
  ASSERT_FALSE(full.empty() || free.empty()) << out;
  EXPECT_GE(full["usage_bytes"].get<uint64_t>(), 61 * kMiB) << out;
  EXPECT_EQ(full["limit_bytes"], 64 * kMiB) << out;
  EXPECT_NE(full["own_limit"].get<std::string>().find(full_pod), std::string::npos) << out;
  EXPECT_GE(free["usage_bytes"].get<uint64_t>(), 24 * kMiB) << out;
  EXPECT_LT(free["usage_bytes"].get<uint64_t>(), 40 * kMiB) << out;
  EXPECT_TRUE(free["limit_bytes"].is_null()) << out;
  EXPECT_EQ(free["own_limit"], "") << out;
  EXPECT_TRUE(free["some_avg10"].is_number()) << "memory.pressure of the pod unread: " << out;
}
