// What protects an online task, on this machine's real kernel, through the
// writers khagent uses here (v1 cpu and cpuset on a hybrid host, v2
// otherwise): a service-like probe (wakes every 5 ms, computes 1 ms) in a
// Burstable pod next to CPU hogs in a YARN container. The agent with its
// defaults must take away nearly all of the hogs' harm to the probe's p99,
// and do as well as its lever (cpu.idle) written by hand, while the hogs
// keep most of the CPU the probe leaves idle (or, where the agent climbed
// its ladder, of the CPU its split leaves them), must never put a quota on a
// cgroup without cpu.idle, and must leave the kubelet's and the
// NodeManager's own weight writes working.
//
// The latency claims are judged on percentiles of every response of each
// condition pooled over interleaved rounds, and the test measures how noisy
// the host is in the same run (its CPUs' own stalls, and how far the
// by-hand lever's p99 moves between rounds). On a host too noisy for a
// 1.25x claim it says so and fails only if khagent did worse than the lever
// by hand by more than that noise. A sanitizer build judges no latency of
// the instrumented agent.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include "host_util.h"

using namespace hosttest;
using khagent::Mounts;

namespace {

constexpr int kPeriodUs = 5000;
#ifdef KHAGENT_SANITIZED
constexpr bool kSanitized = true;  // an ASan + UBSan build (scripts/test.sh's second build)
#else
constexpr bool kSanitized = false;
#endif
constexpr int kWorkUs = 1000;
constexpr size_t kMaxSamples = 1 << 16;

// Shared with the probe child: response times in microseconds, from the
// intended start of each period (an overrun delays the next start, which
// then counts its lateness too: no coordinated omission).
struct ProbeShm {
  std::atomic<uint32_t> n{0};
  float us[kMaxSamples];
};

uint64_t now_ns(clockid_t c = CLOCK_MONOTONIC) {
  timespec ts{};
  clock_gettime(c, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

[[noreturn]] void probe_loop(ProbeShm* shm) {
  uint64_t next = now_ns() + kPeriodUs * 1000ULL;
  for (;;) {
    timespec ts{static_cast<time_t>(next / 1'000'000'000ULL), static_cast<long>(next % 1'000'000'000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
    uint64_t cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
    while (now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0 < kWorkUs * 1000ULL) asm volatile("" ::: "memory");
    uint32_t i = shm->n.load(std::memory_order_relaxed);
    if (i < kMaxSamples) shm->us[i] = static_cast<float>(static_cast<double>(now_ns() - next) / 1e3);
    shm->n.store(i + 1, std::memory_order_release);
    next += kPeriodUs * 1000ULL;
  }
}

struct Stats {
  double p50 = 0, p99 = 0, p999 = 0;
  size_t n = 0;
};

Stats stats_of(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  Stats s;
  s.n = n;
  auto q = [&](double p) {
    return n ? static_cast<double>(v[std::min(n - 1, static_cast<size_t>(p * static_cast<double>(n)))]) : 0.0;
  };
  s.p50 = q(0.5);
  s.p99 = q(0.99);
  s.p999 = q(0.999);
  return s;
}

// The probe's responses over the next `seconds`; each one is also added to
// `pool` (all windows of one condition, for the pooled percentiles).
Stats measure(ProbeShm* shm, double seconds, std::vector<float>* pool = nullptr) {
  shm->n.store(0);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  size_t n = std::min<size_t>(shm->n.load(std::memory_order_acquire), kMaxSamples);
  std::vector<float> v(shm->us, shm->us + n);
  if (pool) pool->insert(pool->end(), v.begin(), v.end());
  return stats_of(std::move(v));
}

// How much this machine's CPUs stall on their own (a VM's vCPUs losing
// their physical CPU, see scripts/bench-vcpu-stalls.sh): a loop pinned to
// CPU 0 reads the clock back to back for `seconds` while a busy loop holds
// CPU 1, as the hogs hold the CPUs in the windows that are compared; a gap
// between two reads is time the loop did not run.
struct Stalls {
  int over_1ms = 0;
  double longest_ms = 0, lost_ms = 0, seconds = 0;
  bool pinned = true;  // false: the loop could not be pinned to CPU 0 (counted as noisy)
};
Stalls measure_stalls(double seconds) {
  Child busy({}, 1, 0, [] { busy_loop(); });
  sleep_s(0.2);
  Stalls s;
  s.seconds = seconds;
  std::thread t([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
      s.pinned = false;
      return;
    }
    const uint64_t start = now_ns(), end = start + static_cast<uint64_t>(seconds * 1e9);
    uint64_t prev = start;
    for (uint64_t t = start; t < end; prev = t) {
      t = now_ns();
      const double gap_ms = static_cast<double>(t - prev) / 1e6;
      if (gap_ms > 0.05) s.lost_ms += gap_ms;
      if (gap_ms > 1) s.over_1ms++;
      s.longest_ms = std::max(s.longest_ms, gap_ms);
    }
  });
  t.join();
  return s;
}

double usage_s(const std::string& v2_dir) {
  std::istringstream in(read_file(v2_dir + "/cpu.stat"));
  std::string k;
  uint64_t v = 0;
  while (in >> k >> v)
    if (k == "usage_usec") return static_cast<double>(v) / 1e6;
  return 0;
}

// Fields `from`..`to` of /proc/<pid>/stat (1-based, counted as proc(5)
// does; the command name may hold spaces), empty if the task is gone.
std::vector<std::string> stat_fields(pid_t pid, int from, int to) {
  std::string st = read_file("/proc/" + std::to_string(pid) + "/stat");
  size_t at = st.rfind(')');
  std::vector<std::string> out;
  if (at == std::string::npos) return out;
  std::istringstream in(st.substr(at + 2));
  std::string f;
  for (int i = 3; i <= to && in >> f; i++)
    if (i >= from) out.push_back(f);
  return out;
}

// The CPU a task last ran on (field 39 of /proc/<pid>/stat), -1 if gone.
int last_cpu(pid_t pid) {
  auto f = stat_fields(pid, 39, 39);
  return f.empty() ? -1 : std::atoi(f[0].c_str());
}

// Nanoseconds a task has waited in run queues (second field of schedstat).
double rq_wait_ms(pid_t pid) {
  std::istringstream in(read_file("/proc/" + std::to_string(pid) + "/schedstat"));
  uint64_t run = 0, wait = 0;
  in >> run >> wait;
  return static_cast<double>(wait) / 1e6;
}

// Milliseconds of CPU time a process has used (utime + stime, fields 14
// and 15 of /proc/<pid>/stat, in clock ticks).
double cpu_ms(pid_t pid) {
  double ticks = 0;
  for (const auto& f : stat_fields(pid, 14, 15)) ticks += std::atof(f.c_str());
  return ticks * 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Milliseconds the hypervisor kept this machine's CPUs from running (the
// steal column of /proc/stat, all CPUs): time in which a task that the
// guest thinks is running does not run. 0 on bare metal.
double steal_ms() {
  std::istringstream in(read_file("/proc/stat"));
  std::string cpu;
  double v[8] = {};
  in >> cpu;
  for (double& x : v) in >> x;
  return v[7] * 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Where the probe and the hogs ran while they competed: the share of
// samples in which the probe's CPU also had a hog, and the hogs per CPU.
struct Placement {
  std::atomic<bool> done{false};
  int samples = 0, shared = 0, per_cpu[2] = {0, 0};
  std::thread t;
  Placement(pid_t probe, const std::vector<pid_t>& hogs) {
    t = std::thread([this, probe, hogs] {
      while (!done) {
        int pc = last_cpu(probe);
        bool with = false;
        for (pid_t h : hogs) {
          int c = last_cpu(h);
          if (c == pc) with = true;
          if (c >= 0 && c < 2) per_cpu[c]++;
        }
        samples++;
        shared += with;
        sleep_s(0.05);
      }
    });
  }
  std::string stop() {
    done = true;
    t.join();
    char b[160];
    std::snprintf(b, sizeof b, "probe's CPU shared with a hog in %d%% of samples, hogs on cpu0/cpu1 %.1f/%.1f",
                  samples ? 100 * shared / samples : 0, samples ? 1.0 * per_cpu[0] / samples : 0.0,
                  samples ? 1.0 * per_cpu[1] / samples : 0.0);
    return b;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

TEST(AgentProtection, DefaultsKeepTheProbeNearItsBaselineAndLeaveOfflineTheSpareCpu) {
  REQUIRE_ROOT();
  Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  const bool v1 = hybrid(m);
  std::printf("writers: %s\n", v1 ? "v1 cpu and cpuset (hybrid host)" : "cgroup v2");
  std::string k = unique("khp");
  std::string kube = "/" + k + "-kubepods.slice";
  std::string burst = kube + "/" + k + "-kubepods-burstable.slice";
  std::string pod = burst + "/" + k + "-kubepods-burstable-pod1111_2222.slice";
  std::string ctr = pod + "/cri-containerd-0123456789ab.scope";
  std::string be = kube + "/" + k + "-kubepods-besteffort.slice";
  std::string be_pod = be + "/" + k + "-kubepods-besteffort-pod3333_4444.slice";
  std::string yarn = "/" + k + "-yarn";
  std::string ycont = yarn + "/container_e01_1700000000000_0001_01_000002";

  auto* shm = static_cast<ProbeShm*>(
      mmap(nullptr, sizeof(ProbeShm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(shm, MAP_FAILED);
  new (shm) ProbeShm();
  std::string cfg = "/tmp/" + k + ".yaml";
  std::string state = "/tmp/" + k + "-state.json";
  std::ofstream(cfg) << "tick: 200ms\noffline:\n  yarn_hierarchy: " << k << "-yarn\n";
  {
    LaidOutCgroup c_kube(m, kube), c_burst(m, burst), c_pod(m, pod), c_ctr(m, ctr);
    LaidOutCgroup c_be(m, be), c_be_pod(m, be_pod);
    LaidOutCgroup c_yarn(m, yarn), c_ycont(m, ycont);
    const std::string yarn_v2 = c_yarn.v2().dir();
    // The files the agent writes on the offline side, v1 or v2.
    const std::string idle_file = v1 ? c_yarn.v1_file("cpu.idle") : yarn_v2 + "/cpu.idle";
    const std::string quota_file = v1 ? c_yarn.v1_file("cpu.cfs_quota_us") : yarn_v2 + "/cpu.max";
    ASSERT_FALSE(idle_file.empty()) << "no cpu.idle in this kernel's cpu controller";
    // The YARN hierarchy carries the weight of the vcores it runs (Hadoop
    // gives a container 1024 shares per vcore): 8 here against the pods'
    // 1. At equal weights EEVDF's lag credit for the mostly sleeping probe
    // decides whether free hogs delay it at all, and on some runs they did
    // not; outweighed, the probe uses more than its fair share and waits.
    if (v1) ASSERT_TRUE(write_file(c_yarn.v1_file("cpu.shares"), "8192"));
    else ASSERT_TRUE(write_file(yarn_v2 + "/cpu.weight", "800"));
    Child probe(c_ctr.procs(), -1, 0, [&] { probe_loop(shm); });
    ASSERT_GT(probe.pid, 0);
    std::vector<Child> hogs;
    auto start_hogs = [&] {
      for (int i = 0; i < 8; i++) hogs.emplace_back(c_ycont.procs(), -1, 0, [] { busy_loop(); });
    };

    std::vector<double> alone, off, by_hand, on, off_cpu, on_cpu, spare_on;
    // Every response of each condition, all rounds: the verdicts compare
    // pooled percentiles (thousands of samples), not medians of windows.
    std::vector<float> pool_alone, pool_off, pool_hand, pool_on;
    // Per round: the probe's run-queue wait (the kernel's schedstat, ms per
    // window) alone, under cpu.idle by hand and with khagent, and whether
    // the agent climbed its ladder.
    struct Round {
      double wait_alone = 0, wait_hand = 0, wait_on = 0;
      bool stepped = false;
      const char* verdict = "no verdict within the window";
    };
    std::vector<Round> rounds;
    std::string logs;
    bool quota_without_idle = false, idle_seen = false;
    const double T = 4.0;
    // The host's own stall level, before and after the rounds (the probe
    // paused, so that it is not counted as a stall).
    // One second before the rounds and after each one, so that a noisy
    // stretch in the middle is seen too.
    std::vector<Stalls> stall_runs;
    auto stalls = [&] {
      ::kill(probe.pid, SIGSTOP);
      stall_runs.push_back(measure_stalls(1.0));
      ::kill(probe.pid, SIGCONT);
      // The probe keeps its absolute schedule: it now answers every period
      // it missed, each one late by the pause (as it should, no coordinated
      // omission). Those answers belong to no window: let it catch up.
      sleep_s(1.0);
    };
    stalls();
    measure(shm, 1.0);  // warm up
    // Interleaved rounds (alone, hogs free, cpu.idle by hand, khagent), so
    // that what drifts on this shared machine drifts under every condition.
    // A sanitizer build runs fewer: its agent is several times slower, so
    // no latency of it is judged (see the verdicts below).
    const int kRounds = kSanitized ? 2 : 5;
    for (int round = 0; round < kRounds; round++) {
      Round r;
      double s0 = steal_ms(), w = rq_wait_ms(probe.pid);
      alone.push_back(measure(shm, T, &pool_alone).p99);
      double steal_alone = steal_ms() - s0;
      r.wait_alone = rq_wait_ms(probe.pid) - w;

      start_hogs();
      double u0 = usage_s(yarn_v2), w0 = rq_wait_ms(probe.pid);
      std::vector<pid_t> hog_pids;
      for (const auto& h : hogs) hog_pids.push_back(h.pid);
      Placement where(probe.pid, hog_pids);
      s0 = steal_ms();
      off.push_back(measure(shm, T, &pool_off).p99);
      double steal_off = steal_ms() - s0;
      off_cpu.push_back(usage_s(yarn_v2) - u0);
      std::printf("round %d, hogs free: the probe waited %.0f ms in run queues; %s\n", round,
                  rq_wait_ms(probe.pid) - w0, where.stop().c_str());

      // The control: khagent's first lever, cpu.idle on the YARN root,
      // written by hand with no agent running. Like khagent's window (and
      // unlike the alone one) it keeps both CPUs busy, so it sees the same
      // hypervisor effects on a VM: vCPUs that never halt wake the probe
      // at once, busy vCPUs lose time to steal.
      ASSERT_TRUE(write_file(idle_file, "1"));
      s0 = steal_ms();
      w = rq_wait_ms(probe.pid);
      by_hand.push_back(measure(shm, T, &pool_hand).p99);
      double steal_hand = steal_ms() - s0;
      r.wait_hand = rq_wait_ms(probe.pid) - w;
      hogs.clear();
      ASSERT_TRUE(write_file(idle_file, "0"));
      if (v1) ASSERT_TRUE(write_file(c_yarn.v1_file("cpu.shares"), "8192"));
      else ASSERT_TRUE(write_file(yarn_v2 + "/cpu.weight", "800"));

      std::string log = "/tmp/" + k + "-agent.log";
      ::unlink(state.c_str());
      pid_t agent = start_agent(cfg, state, log);
      for (int i = 0; i < 200 && read_file(idle_file) != "1\n"; i++) sleep_s(0.05);
      idle_seen = read_file(idle_file) == "1\n";
      start_hogs();
      // As in the by-hand window, whose hogs have run for a window already:
      // steady state, not the forks of the hogs (the agent set cpu.idle
      // before they started; its reaction is the fast path's tests' claim).
      sleep_s(0.5);
      u0 = usage_s(yarn_v2);
      double p0 = usage_s(c_pod.v2().dir());
      // Sample the offline files while the agent acts: a quota only with cpu.idle.
      std::atomic<bool> done{false};
      std::thread watch([&] {
        while (!done) {
          std::string q = read_file(quota_file);
          bool limited = v1 ? q != "-1\n" : q.rfind("max", 0) != 0;
          if (limited && read_file(idle_file) != "1\n") quota_without_idle = true;
          sleep_s(0.02);
        }
      });
      s0 = steal_ms();
      double a0 = cpu_ms(agent);
      w = rq_wait_ms(probe.pid);
      on.push_back(measure(shm, T, &pool_on).p99);
      double steal_on = steal_ms() - s0, agent_cpu = cpu_ms(agent) - a0;
      r.wait_on = rq_wait_ms(probe.pid) - w;
      done = true;
      watch.join();
      double used = usage_s(yarn_v2) - u0;
      double online = usage_s(c_pod.v2().dir()) - p0;
      on_cpu.push_back(used);
      spare_on.push_back(2.0 * T - online);  // what the probe left idle, of 2 CPUs
      hogs.clear();

      // The owners' own writes still work after khagent acted: the kubelet
      // writes the BestEffort QoS cgroup's weight, the NodeManager its
      // containers' weights.
      if (v1) {
        EXPECT_TRUE(write_file(c_be.v1_file("cpu.shares"), "2")) << "the kubelet's QoS shares write failed";
        EXPECT_TRUE(write_file(c_ycont.v1_file("cpu.shares"), "1024")) << "the NodeManager's shares write failed";
        EXPECT_EQ(read_file(c_be.v1_file("cpu.idle")), "0\n") << "cpu.idle on the BestEffort QoS cgroup";
        EXPECT_EQ(read_file(c_be_pod.v1_file("cpu.idle")), "1\n") << "no cpu.idle on the BestEffort pod";
      } else {
        EXPECT_TRUE(write_file(c_be.v2().dir() + "/cpu.weight", "1")) << "the kubelet's QoS weight write failed";
        EXPECT_TRUE(write_file(c_ycont.v2().dir() + "/cpu.weight", "100")) << "the NodeManager's weight write failed";
      }
      ::kill(agent, SIGTERM);
      int st = 0;
      waitpid(agent, &st, 0);
      std::string text = read_file(log);
      ::unlink(log.c_str());
      EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << text;
      EXPECT_EQ(read_file(idle_file), "0\n") << "cpu.idle not restored\n" << text;
      // Clearing cpu.idle resets the weight to the default in the kernel;
      // the agent puts the owner's back.
      EXPECT_EQ(read_file(v1 ? c_yarn.v1_file("cpu.shares") : yarn_v2 + "/cpu.weight"), v1 ? "8192\n" : "800\n")
          << "the YARN root's weight not restored after cpu.idle\n"
          << text;
      std::printf(
          "round %d: p99 alone %.0f, hogs %.0f, cpu.idle by hand %.0f, khagent %.0f us; offline %.2f s; steal "
          "%.0f/%.0f/%.0f/%.0f ms; the agent used %.0f ms of CPU; the probe waited %.1f/%.1f/%.1f ms in run queues "
          "(alone/by hand/khagent)\n",
          round, alone.back(), off.back(), by_hand.back(), on.back(), on_cpu.back(), steal_alone, steal_off, steal_hand,
          steal_on, agent_cpu, r.wait_alone, r.wait_hand, r.wait_on);
      r.stepped = text.find("ladder escalate") != std::string::npos;
      if (text.find("ladder kept") != std::string::npos) r.verdict = "rung kept";
      else if (text.find("did not help") != std::string::npos) r.verdict = "rung undone";
      rounds.push_back(r);
      for (const auto& line : {"ladder escalate", "ladder kept", "ladder: ", "cpu.idle: '", "reverted", "rejected"})
        for (size_t at = text.find(line); at != std::string::npos; at = text.find(line, at + 1)) {
          size_t b = text.rfind('\n', at), e = text.find('\n', at);
          std::printf(
              "  agent: %s\n",
              text.substr(b == std::string::npos ? 0 : b + 1, e - (b == std::string::npos ? 0 : b + 1)).c_str());
          break;
        }
      logs += text;
      stalls();
    }
    ::unlink(state.c_str());
    ::unlink((state + ".prev").c_str());
    probe.stop();
    // The agents' logs go to a file a failure names: the verdict stays the
    // last thing printed.
    const std::string logs_file = ::testing::TempDir() + "khagent-protection-agents.log";
    std::ofstream(logs_file) << logs;
    const std::string see_logs = "; the agents' logs are in " + logs_file;

    // Pooled percentiles: every response of a condition over all rounds.
    const double a = stats_of(pool_alone).p99, o = stats_of(pool_off).p99, h = stats_of(pool_hand).p99,
                 n = stats_of(pool_on).p99;
    const double kept = median(on_cpu), spare = median(spare_on), free_cpu = median(off_cpu);
    std::printf(
        "probe response p99 (us) over all %d rounds (%zu/%zu/%zu/%zu responses): alone %.0f, hogs %.0f, cpu.idle by "
        "hand %.0f, hogs + khagent %.0f (ratio to alone %.2f, to cpu.idle by hand %.2f)\n",
        kRounds, pool_alone.size(), pool_off.size(), pool_hand.size(), pool_on.size(), a, o, h, n, a > 0 ? n / a : 0,
        h > 0 ? n / h : 0);
    std::printf(
        "offline CPU s per %.0f s: hogs free %.2f, khagent on %.2f; the probe left %.2f s idle, offline kept "
        "%.0f%% of it\n",
        T, free_cpu, kept, spare, spare > 0 ? 100 * kept / spare : 0);
    // How noisy the host was: its own stalls, and how far the by-hand
    // lever's p99 moved between rounds under the same conditions.
    const double hand_spread = by_hand.empty() ? 0
                                               : *std::max_element(by_hand.begin(), by_hand.end()) -
                                                     *std::min_element(by_hand.begin(), by_hand.end());
    double stalls_per_s = 0, longest_ms = 0;
    bool pinned = true;
    std::string per_run;
    for (const Stalls& st : stall_runs) {
      stalls_per_s = std::max(stalls_per_s, st.over_1ms / st.seconds);
      longest_ms = std::max(longest_ms, st.longest_ms);
      pinned = pinned && st.pinned;
      per_run += (per_run.empty() ? "" : " ") + std::to_string(st.over_1ms);
    }
    const bool quiet = pinned && stalls_per_s < 1.0 && hand_spread <= 0.25 * h;
    // Per round, khagent's p99 over the by-hand lever's measured next to it:
    // their median is not moved by one bad window of either.
    std::vector<double> paired;
    for (size_t i = 0; i < on.size() && i < by_hand.size(); i++)
      if (by_hand[i] > 0) paired.push_back(on[i] / by_hand[i]);
    const double paired_ratio = median(paired);
    std::printf(
        "host noise: stalls of CPU 0 over 1 ms with CPU 1 busy, per 1 s run before and after each round: %s "
        "(longest %.2f ms)%s; cpu.idle by hand p99 moved by %.0f us between rounds (%.0f%% of its pooled p99): %s\n",
        per_run.c_str(), longest_ms, pinned ? "" : " (the stall loop could not be pinned to CPU 0)", hand_spread,
        h > 0 ? 100 * hand_spread / h : 0,
        quiet ? "quiet enough for the latency claims"
              : "TOO NOISY for the latency claims (a stall a second, or the lever's own p99 moved by more than "
                "25%); judged only on whether khagent did worse than the lever by hand beyond that noise");
    std::printf("khagent against cpu.idle by hand: pooled p99 %.2fx, median of the rounds' paired ratios %.2fx\n",
                h > 0 ? n / h : 0, paired_ratio);
    EXPECT_TRUE(idle_seen) << "the agent never set cpu.idle on the YARN root" << see_logs;
    EXPECT_FALSE(quota_without_idle) << "a quota was written on a cgroup without cpu.idle" << see_logs;
    // The hogs must hurt, or the test shows nothing.
    ASSERT_GT(o, 1.3 * a) << "the hogs did not delay the probe (alone " << a << " us, hogs " << o << " us)";
    if (kSanitized) {
      std::printf(
          "sanitizer build: no latency judged (an instrumented agent is several times slower than the one users "
          "run); the plain build's host tier makes these claims\n");
    } else if (quiet) {
      // khagent takes away nearly all of the hogs' harm...
      EXPECT_LT(n - a, 0.1 * (o - a)) << "khagent left more than a tenth of the hogs' harm" << see_logs;
      // ...and does as well as its lever set by hand: what the agent adds
      // (its CPU, its BPF programs on every switch) stays within a quarter,
      // by the pooled p99 or by the rounds' paired ratios. Against the
      // control rather than the alone baseline: on a VM the alone probe
      // wakes halted vCPUs (slower when the host is busy) while busy vCPUs
      // lose time to steal; neither is khagent's doing.
      EXPECT_TRUE(n < 1.25 * h || paired_ratio < 1.25)
          << "khagent's defaults protected the probe less than cpu.idle written by hand (pooled p99 " << n << " us vs "
          << h << " us, paired median " << paired_ratio << "x)" << see_logs;
    } else {
      EXPECT_TRUE(n < h + std::max(0.25 * h, hand_spread) || paired_ratio < 1.25)
          << "on a noisy host, khagent's defaults still did worse than cpu.idle by hand by more than the lever's own "
             "spread between rounds (pooled p99 "
          << n << " us vs " << h << " us, paired median " << paired_ratio << "x)" << see_logs;
    }
    // Offline keeps most of what the probe leaves idle while cpu.idle is the
    // only lever. When the agent climbed its ladder (it does when online
    // waits behind offline last despite cpu.idle: seen on this shared
    // machine when other tenants slowed it, with cpu.idle by hand at 1.3x
    // the alone p99), the cpuset split leaves offline one CPU of the two,
    // and it must keep most of that. (This probe cannot show what a split
    // buys a real service: its work is 1 ms of CPU time however slowly it
    // runs next to a hog; see docs/controller.md for nginx.)
    std::vector<double> shares;
    int stepped = 0;
    for (size_t i = 0; i < rounds.size(); i++) {
      const Round& r = rounds[i];
      if (r.stepped) {
        stepped++;
        std::printf(
            "round %zu: the agent climbed its ladder (%s); the probe waited %.1f ms in run queues under "
            "cpu.idle by hand, %.1f with khagent; offline %.2f s\n",
            i, r.verdict, r.wait_hand, r.wait_on, on_cpu[i]);
        EXPECT_GT(on_cpu[i], 0.8 * T) << "round " << i << ": offline did not keep the CPU the split leaves it"
                                      << see_logs;
      } else {
        shares.push_back(spare_on[i] > 0 ? on_cpu[i] / spare_on[i] : 0);
      }
    }
    if (!shares.empty()) {
      double share = median(shares);
      std::printf("rounds with cpu.idle the only lever: %zu; offline kept %.0f%% of the spare CPU (median)\n",
                  shares.size(), 100 * share);
      EXPECT_GT(share, 0.8) << "offline did not keep most of the spare CPU";
    } else {
      std::printf("the agent climbed its ladder in all %d rounds: the spare-CPU claim rests on the split's CPU\n",
                  stepped);
    }
  }
  ::unlink(cfg.c_str());
  munmap(shm, sizeof(ProbeShm));
}

// Every signal that would end the agent ends it through the restore, and a
// closed log reader does not kill it (SIGPIPE).
TEST(AgentProtection, EverySignalThatEndsTheAgentRestoresFirst) {
  REQUIRE_ROOT();
  Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  const bool v1 = hybrid(m);
  std::string k = unique("khs");
  std::string yarn = "/" + k + "-yarn";
  std::string cfg = "/tmp/" + k + ".yaml";
  std::string state = "/tmp/" + k + "-state.json";
  std::ofstream(cfg) << "tick: 100ms\noffline:\n  yarn_hierarchy: " << k << "-yarn\n";
  LaidOutCgroup c_yarn(m, yarn);
  const std::string idle_file = v1 ? c_yarn.v1_file("cpu.idle") : c_yarn.v2().dir() + "/cpu.idle";
  ASSERT_FALSE(idle_file.empty());
  for (int sig : {SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) {
    SCOPED_TRACE(sigabbrev_np(sig));
    ::unlink(state.c_str());
    int err[2];
    ASSERT_EQ(pipe(err), 0);
    pid_t agent = fork();
    if (agent == 0) {
      ::dup2(err[1], 2);
      ::close(err[0]);
      ::close(err[1]);
      execl(KHAGENT_BINARY, KHAGENT_BINARY, "--no-pin", "run", "--no-metrics", "--config", cfg.c_str(), "--state-file",
            state.c_str(), nullptr);
      _exit(127);
    }
    ::close(err[1]);
    for (int i = 0; i < 200 && read_file(idle_file) != "1\n"; i++) sleep_s(0.05);
    ASSERT_EQ(read_file(idle_file), "1\n") << "the agent never set cpu.idle";
    // The log's reader goes away: the next log line meets a closed pipe.
    ::close(err[0]);
    if (sig != SIGPIPE) ::kill(agent, sig);
    else ::kill(agent, SIGTERM);  // SIGPIPE itself comes from the closed stderr when it logs
    int st = 0;
    waitpid(agent, &st, 0);
    EXPECT_TRUE(WIFEXITED(st)) << "killed by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    EXPECT_EQ(read_file(idle_file), "0\n") << "not restored";
  }
  // SIGKILL gives no chance to restore: the next start keeps the recorded
  // original (never its own squeezed value) and restores it on its exit.
  ::unlink(state.c_str());
  auto start = [&] {
    pid_t p = fork();
    if (p == 0) {
      int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 2);
      execl(KHAGENT_BINARY, KHAGENT_BINARY, "--no-pin", "run", "--no-metrics", "--config", cfg.c_str(), "--state-file",
            state.c_str(), nullptr);
      _exit(127);
    }
    return p;
  };
  pid_t a = start();
  for (int i = 0; i < 200 && read_file(idle_file) != "1\n"; i++) sleep_s(0.05);
  ASSERT_EQ(read_file(idle_file), "1\n");
  ::kill(a, SIGKILL);
  int st = 0;
  waitpid(a, &st, 0);
  EXPECT_EQ(read_file(idle_file), "1\n");
  EXPECT_NE(read_file(state).find(v1 ? "v1:cpu.idle" : "\"cpu.idle\""), std::string::npos) << read_file(state);
  pid_t b = start();
  sleep_s(1.5);
  ::kill(b, SIGTERM);
  waitpid(b, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_EQ(read_file(idle_file), "0\n") << "the original from before the SIGKILL was not restored";
  ::unlink(state.c_str());
  ::unlink((state + ".prev").c_str());
  ::unlink(cfg.c_str());
}

// The cpuset rung on this kernel: the offline parent and (on a hybrid host,
// where v1 refuses to narrow a parent below a child) every descendant get
// the offline CPUs, and all of it comes back on exit.
TEST(AgentProtection, CpusetRungNarrowsDescendantsFirstAndRestores) {
  REQUIRE_ROOT();
  Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  const bool v1 = hybrid(m);
  if (!v1 && read_file(m.cgroup2 + "/cgroup.subtree_control").find("cpuset") == std::string::npos)
    FAIL() << "neither a v1 cpuset hierarchy nor the cpuset controller in cgroup2: cannot test the cpuset rung";
  if (v1 && m.cpuset_v1.empty()) FAIL() << "hybrid host without a v1 cpuset hierarchy";
  std::string k = unique("khc");
  std::string yarn = "/" + k + "-yarn";
  std::string ycont = yarn + "/container_e01_1700000000000_0001_01_000002";
  std::string cfg = "/tmp/" + k + ".yaml";
  std::string state = "/tmp/" + k + "-state.json";
  std::ofstream(cfg) << "tick: 100ms\noffline:\n  yarn_hierarchy: " << k
                     << "-yarn\nladder:\n  always: [cpuset]\ncpuset:\n  reserved_cpus: \"\"\n";
  LaidOutCgroup c_yarn(m, yarn), c_cont(m, ycont);
  auto cpus_of = [&](const LaidOutCgroup& c) {
    return v1 ? read_file(c.v1_file("cpuset.cpus")) : read_file(c.v2().dir() + "/cpuset.cpus");
  };
  const std::string root_before = cpus_of(c_yarn), cont_before = cpus_of(c_cont);
  std::string log = "/tmp/" + k + ".log";
  pid_t a = start_agent(cfg, state, log);
  for (int i = 0; i < 200 && cpus_of(c_yarn) == root_before; i++) sleep_s(0.05);
  std::string root_during = cpus_of(c_yarn), cont_during = cpus_of(c_cont);
  ::kill(a, SIGTERM);
  int st = 0;
  waitpid(a, &st, 0);
  std::string text = read_file(log);
  ::unlink(log.c_str());
  ::unlink(cfg.c_str());
  ::unlink(state.c_str());
  ::unlink((state + ".prev").c_str());
  std::printf("offline parent cpuset: %s -> %s; its container: %s -> %s\n", root_before.c_str(), root_during.c_str(),
              cont_before.c_str(), cont_during.c_str());
  EXPECT_NE(root_during, root_before) << "the cpuset rung did not partition the offline parent\n" << text;
  if (v1) {
    EXPECT_EQ(cont_during, root_during) << "the container kept CPUs its parent no longer has\n" << text;
  }
  EXPECT_EQ(text.find("rejected"), std::string::npos) << text;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << text;
  EXPECT_EQ(cpus_of(c_yarn), root_before) << text;
  EXPECT_EQ(cpus_of(c_cont), cont_before) << text;
}
