// CPU burst, side by side: each shape of self-throttling alone in a pod
// laid out as the kubelet makes it (a 0.2 CPU quota on the pod and its
// container), its response p99 without the agent and with it (the agent on
// its defaults, measured from a second after it wrote the burst), in
// interleaved rounds. Figures, not pass/fail: scripts/bench-burst.sh runs
// it; it fails only when it cannot measure (no root, no burst file, the
// agent never wrote a burst).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../host/burst_load.h"

using namespace hosttest;

namespace {

constexpr BurstShape kShapes[] = {
    {"issue", 200, 30, 1},    // quota + burst exactly, a multiple of the CFS period
    {"offset", 230, 28, 1},   // under quota + burst, at every point of a period
    {"under", 200, 25, 1},    // under quota + burst, a multiple of the period
    {"over", 300, 45, 1},     // over quota + burst
    {"threads", 250, 24, 2},  // two threads share each request, under quota + burst
};

double env_seconds(const char* name, double dflt) {
  const char* v = std::getenv(name);
  return v ? std::atof(v) : dflt;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

TEST(BurstBench, EachShapeWithAndWithoutTheAgent) {
  REQUIRE_ROOT();
  khagent::Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  const bool v1 = hybrid(m);
  const double window = env_seconds("WINDOW_S", 6);
  const int rounds = static_cast<int>(env_seconds("ROUNDS", 2));
  const std::string k = unique("khbb");
  const std::string dir = "/tmp/" + k;
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  struct RemoveDir {
    std::string d;
    ~RemoveDir() { std::filesystem::remove_all(d); }
  } remove_dir{dir};  // also when an assertion ends the benchmark early
  const std::string cfg = dir + "/khagent.yaml", state = dir + "/state.json", log = dir + "/agent.log";
  // The defaults but for BURST_SHARE (online.burst_share), if set.
  std::ofstream(cfg) << "offline:\n  yarn_hierarchy: " << k << "-yarn\n"
                     << (std::getenv("BURST_SHARE")
                             ? std::string("online:\n  burst_share: ") + std::getenv("BURST_SHARE") + "\n"
                             : std::string());
  const std::string kube = "/" + k + "-kubepods.slice", burstable = kube + "/" + k + "-kubepods-burstable.slice";
  std::map<std::string, std::vector<double>> off, on, ratio, given_s;
  LaidOutCgroup c_kube(m, kube), c_burst(m, burstable);
  for (int round = 0; round < rounds; round++) {
    for (size_t si = 0; si < std::size(kShapes); si++) {
      const BurstShape& s = kShapes[si];
      // A pod uid as the kubelet writes it (hex digits and underscores).
      const std::string pod = burstable + "/" + k + "-kubepods-burstable-pod" + std::to_string(2000 + si) + "_1.slice";
      auto c_pod = std::make_unique<LaidOutCgroup>(m, pod);
      auto c_ctr = std::make_unique<LaidOutCgroup>(m, pod + "/cri-containerd-0123456789ab.scope");
      ASSERT_TRUE(kubelet_quota_02(*c_pod, v1) && kubelet_quota_02(*c_ctr, v1));
      const std::string burst = burst_file(*c_ctr, v1);
      ASSERT_FALSE(burst.empty() || read_file(burst).empty()) << "no CPU burst file (5.14+)";
      Responses* r = shared_responses();
      ASSERT_NE(r, nullptr);
      Child load(c_ctr->procs(), -1, 0, [r, s] { request_loop(r, s); });
      ASSERT_GT(load.pid, 0);
      // Without the agent: a second to settle, then the window.
      sleep_s(1.0);
      uint32_t from = r->n.load();
      sleep_s(window);
      const double p_off = p99_from(r, from);
      // With it: from a second after it wrote the burst.
      const uint64_t t0 = mono_ns_now();
      pid_t agent = start_agent(cfg, state, log);
      ASSERT_GT(agent, 0);
      double at = -1;
      for (int i = 0; i < 150 && at < 0; i++) {
        if (read_file(burst) != "0\n") at = static_cast<double>(mono_ns_now() - t0) / 1e9;
        else sleep_s(0.1);
      }
      sleep_s(1.0);
      from = r->n.load();
      sleep_s(window);
      const double p_on = p99_from(r, from);
      ::kill(agent, SIGTERM);
      waitpid(agent, nullptr, 0);
      ::kill(load.pid, SIGKILL);
      waitpid(load.pid, nullptr, 0);
      load.pid = -1;
      c_ctr.reset();
      c_pod.reset();
      // No burst in 15 s is a figure too (a pod the kernel did not throttle:
      // the 200 ms shapes keep their phase in the CFS period; or
      // BURST_SHARE=0): the with-agent window is then the agent without one.
      const std::string burst_note =
          at < 0 ? std::string("no burst written in 15 s") : fmt::format("burst written {:.1f} s after start", at);
      std::printf("round %d %-8s p99 without the agent %6.1f ms, with it %6.1f ms (%.2fx); %s\n", round + 1, s.name,
                  p_off, p_on, p_on / p_off, burst_note.c_str());
      std::fflush(stdout);
      off[s.name].push_back(p_off);
      on[s.name].push_back(p_on);
      ratio[s.name].push_back(p_on / p_off);
      given_s[s.name].push_back(at);  // -1: none
    }
  }
  std::printf(
      "\n| shape (0.2 CPU quota on pod and container) | p99 without khagent | p99 with khagent | with/without "
      "| burst written after |\n|---|---|---|---|---|\n");
  std::string last;
  double worst_given = 0;
  size_t missed = 0;  // rounds with no burst written
  for (const BurstShape& s : kShapes) {
    std::vector<double> given;
    for (double g : given_s[s.name]) {
      if (g >= 0) given.push_back(g);
      else missed++;
    }
    const std::string after = given.empty() ? std::string("never") : fmt::format("{:.1f} s", median(given));
    std::printf("| %s: %llu ms every %llu ms, %u thread%s | %.1f ms | %.1f ms | %.2fx | %s |\n", s.name,
                static_cast<unsigned long long>(s.work_ms), static_cast<unsigned long long>(s.period_ms), s.threads,
                s.threads == 1 ? "" : "s", median(off[s.name]), median(on[s.name]), median(ratio[s.name]),
                after.c_str());
    last += fmt::format("{}{} {:.2f}x", last.empty() ? "" : ", ", s.name, median(ratio[s.name]));
    for (double g : given) worst_given = std::max(worst_given, g);
  }
  std::printf(
      "\ngoal (every self-throttled shape gets its burst within a few seconds on the defaults%s; p99 "
      "with/without, median of %d rounds): burst written within %.1f s at worst%s; %s\n",
      std::getenv("BURST_SHARE") ? (std::string(", burst_share ") + std::getenv("BURST_SHARE")).c_str() : "", rounds,
      worst_given, missed ? fmt::format(" ({} rounds without one)", missed).c_str() : "", last.c_str());
}
