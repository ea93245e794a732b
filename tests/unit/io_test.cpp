// Block IO: io.stat and v1 blkio parsing (collect/io), the per-tick deltas
// (signals/io) and the IO controller's judgement (policy/io_controller).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "khagent/collect/io.h"
#include "khagent/policy/io_controller.h"
#include "khagent/signals/io.h"

namespace khagent {
namespace {

constexpr uint64_t kMs = 1'000'000;

TEST(IoStat, ParsesV2Lines) {
  auto s = parse_io_stat(
      "254:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n"
      "253:0 rbytes=1 wbytes=0 rios=1 wios=0 dbytes=0 dios=0 cost.usage=9\n"
      "7:0\n");
  ASSERT_TRUE(s) << s.error().str();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ(s->at("254:0").wbytes, 8192u);
  EXPECT_EQ(s->at("254:0").wios, 2u);
  EXPECT_EQ(s->at("253:0").rbytes, 1u);
  EXPECT_EQ(s->at("7:0").rbytes, 0u);
  EXPECT_TRUE(parse_io_stat("")->empty());
  EXPECT_FALSE(parse_io_stat("sda rbytes=1\n"));
  EXPECT_FALSE(parse_io_stat("8:0 rbytes=x\n"));
}

TEST(IoStat, ParsesV1BlkioThrottleCounters) {
  auto s = parse_blkio_throttle(
      "254:0 Read 4096\n254:0 Write 1048576\n254:0 Sync 0\n254:0 Async 1052672\n254:0 Discard 0\n"
      "254:0 Total 1052672\nTotal 1052672\n",
      "254:0 Read 1\n254:0 Write 256\n254:0 Sync 0\n254:0 Async 257\n254:0 Discard 0\n254:0 Total 257\n"
      "Total 257\n");
  ASSERT_TRUE(s) << s.error().str();
  ASSERT_EQ(s->size(), 1u);
  EXPECT_EQ(s->at("254:0").rbytes, 4096u);
  EXPECT_EQ(s->at("254:0").wbytes, 1048576u);
  EXPECT_EQ(s->at("254:0").wios, 256u);
  EXPECT_TRUE(parse_blkio_throttle("Total 0\n", "Total 0\n")->empty());
  EXPECT_FALSE(parse_blkio_throttle("254:0 Read many\n", ""));
}

// The IO files of a node, as maps.
class IoReads : public NodeReads {
 public:
  std::map<std::string, PsiTotals> psi;
  std::map<std::string, IoStat> io;
  bool has_memory() const override { return false; }
  Result<MemoryUse> memory(const std::string&) const override { return make_error(ENOTSUP, "no"); }
  Result<MemoryUse> node_memory(const std::string&) const override { return make_error(ENOTSUP, "no"); }
  Result<std::map<std::string, uint64_t>> oom_kill_counts(const std::string&) const override {
    return make_error(ENOTSUP, "no");
  }
  Result<std::string> at_own_limit(const std::string&, const std::string&) const override { return std::string(); }
  Result<PsiTotals> memory_pressure(const std::string&) const override { return make_error(ENOENT, "no"); }
  Result<PsiTotals> io_pressure(const std::string& cg) const override {
    auto it = psi.find(cg);
    if (it == psi.end()) return make_error(ENOENT, cg + "/io.pressure");
    return it->second;
  }
  Result<IoStat> io_stat(const std::string& cg) const override {
    auto it = io.find(cg);
    if (it == io.end()) return make_error(ENOENT, cg + "/io.stat");
    return it->second;
  }
  std::optional<CpuQuota> cpu_quota(const std::string&) const override { return std::nullopt; }
  std::optional<uint64_t> cpu_burst(const std::string&) const override { return std::nullopt; }
  std::vector<std::string> children(const std::string&) const override { return {}; }
  Result<CpuManagerState> cpu_manager_state() const override { return CpuManagerState{}; }
};

TEST(IoSignals, DeltasPerPodAndPerOfflineDeviceMostBytesFirst) {
  IoReads r;
  IoTracker t;
  const std::vector<std::string> online = {"/kubepods/pod-a", "/kubepods/pod-gone"};
  const std::vector<std::string> offline = {"/hadoop-yarn", "/kubepods/besteffort"};
  r.psi["/kubepods/pod-a"] = {1000, 500, 0, 0};
  r.io["/kubepods/pod-a"] = {{"254:0", {100, 0, 1, 0}}};
  r.io["/hadoop-yarn"] = {{"254:0", {0, 1000, 0, 10}}, {"253:0", {0, 10, 0, 1}}};
  r.io["/kubepods/besteffort"] = {{"254:0", {0, 0, 0, 0}}};
  auto s = t.step(TickSnapshot(r, 1000 * kMs), online, offline);
  EXPECT_EQ(s.interval_ns, 0u);  // the first step: nothing to compare
  EXPECT_TRUE(s.offline.empty());
  ASSERT_EQ(s.unreadable.size(), 1u);
  EXPECT_NE(s.unreadable[0].find("pod-gone"), std::string::npos);

  r.psi["/kubepods/pod-a"] = {51000, 20500, 0, 0};  // 50 ms of 200
  r.io["/kubepods/pod-a"] = {{"254:0", {4196, 0, 2, 0}}};
  r.io["/hadoop-yarn"] = {{"254:0", {0, 1000 + (8 << 20), 0, 74}}, {"253:0", {0, 10, 0, 1}}};
  r.io["/kubepods/besteffort"] = {{"254:0", {1 << 20, 0, 256, 0}}};
  s = t.step(TickSnapshot(r, 1200 * kMs), online, offline);
  EXPECT_EQ(s.interval_ns, 200 * kMs);
  ASSERT_EQ(s.online.size(), 1u);
  EXPECT_EQ(s.online[0].some_us, 50000u);
  EXPECT_EQ(s.online[0].full_us, 20000u);
  EXPECT_DOUBLE_EQ(s.online[0].some_share, 0.25);
  EXPECT_EQ(s.online[0].devices.at("254:0").rbytes, 4096u);
  ASSERT_EQ(s.offline.size(), 2u);  // 253:0 did nothing this interval
  EXPECT_EQ(s.offline[0].cgroup, "/hadoop-yarn");
  EXPECT_EQ(s.offline[0].delta.wbytes, uint64_t{8} << 20);
  EXPECT_EQ(s.offline[1].cgroup, "/kubepods/besteffort");

  // A cgroup made again under the same path: counters start over.
  r.io["/hadoop-yarn"] = {{"254:0", {0, 4096, 0, 1}}};
  s = t.step(TickSnapshot(r, 1400 * kMs), online, offline);
  ASSERT_FALSE(s.offline.empty());
  EXPECT_EQ(s.offline[0].delta.wbytes, 4096u);
}

TEST(IoController, NamesTheOfflineCgroupOnTheStalledPodsDevice) {
  IoConfig cfg;
  cfg.stall_limit = 0.1;
  IoSignals s;
  s.interval_ns = 200 * kMs;
  IoPodStall calm{"/pod-calm", 1000, 0, 0.005, {}};
  IoPodStall hurt{"/pod-hurt", 60000, 30000, 0.3, {{"254:0", {4096, 0, 1, 0}}}};
  s.online = {calm, hurt};
  s.offline = {{"/hadoop-yarn", "253:0", {0, 100 << 20, 0, 100}},
               {"/kubepods/besteffort", "254:0", {0, 8 << 20, 0, 64}}};
  auto r = io_judge(s, cfg);
  ASSERT_TRUE(r.stalled);
  EXPECT_EQ(r.stalled->pod, "/pod-hurt");
  EXPECT_EQ(r.stalled_pods, 1u);
  ASSERT_TRUE(r.aggressor);
  EXPECT_EQ(r.aggressor->cgroup, "/kubepods/besteffort");  // not the bigger writer on another device
  EXPECT_TRUE(r.aggressor_on_pods_device);

  // Its devices unknown: the biggest writer anywhere.
  s.online[1].devices.clear();
  r = io_judge(s, cfg);
  ASSERT_TRUE(r.aggressor);
  EXPECT_EQ(r.aggressor->cgroup, "/hadoop-yarn");
  EXPECT_FALSE(r.aggressor_on_pods_device);

  // Nobody over the limit: nothing named.
  s.online[1].some_share = 0.05;
  r = io_judge(s, cfg);
  EXPECT_FALSE(r.stalled);
  EXPECT_FALSE(r.aggressor);
}

// One tick of the limiter: the pod's stall share, and what the offline
// YARN root moved on 254:0 (wbytes, wios) in a 1 s tick.
IoReport limiter_tick(IoLimitState& st, const IoConfig& cfg, uint64_t now_ns, double share, uint64_t wbytes,
                      uint64_t wios, uint64_t pod_reads = 1) {
  IoSignals s;
  s.interval_ns = 1000 * kMs;
  s.online = {{"/pod", static_cast<uint64_t>(share * 1e6), 0, share, {{"254:0", {4096 * pod_reads, 0, pod_reads, 0}}}}};
  if (wbytes) s.offline = {{"/hadoop-yarn", "254:0", {0, wbytes, 0, wios}}};
  IoReport r = io_judge(s, cfg);
  io_limit_step(r, cfg, now_ns, st);
  return r;
}

TEST(IoLimiter, LimitsTheAggressorAtHalfItsRateThenJudgesTightensRaisesAndLifts) {
  IoConfig cfg;  // stall_limit 0.1, step 0.5, verdict after 2 s, calm after 10 s
  IoLimitState st;
  constexpr uint64_t kS = 1000 * kMs;
  // A 200 MiB/s, 3200 IOPS writer while the pod stalls 40%: named on one
  // tick, limited to half on the second.
  auto r = limiter_tick(st, cfg, 0, 0.4, 200 << 20, 3200);
  EXPECT_TRUE(r.limits.empty()) << "limited on the first tick named";
  r = limiter_tick(st, cfg, 1 * kS, 0.4, 200 << 20, 3200);
  ASSERT_EQ(r.limits.size(), 1u);
  const IoLimit& l = r.limits[0].limit;
  EXPECT_EQ(r.limits[0].cgroup, "/hadoop-yarn");
  EXPECT_EQ(l.device, "254:0");
  EXPECT_EQ(l.wbps, 100u << 20);
  EXPECT_EQ(l.wiops, 1600u);
  EXPECT_FALSE(l.rbps) << "a direction it did not use is left alone";
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_NE(r.steps[0].text.find("limited to wbps=100.0MiB/s wiops=1600"), std::string::npos) << r.steps[0].text;
  // Before the verdict, nothing moves.
  r = limiter_tick(st, cfg, 2 * kS, 0.35, 100 << 20, 1600);
  EXPECT_TRUE(r.steps.empty());
  EXPECT_EQ(r.limits[0].limit.wbps, 100u << 20);
  // 2 s after the step: 40% -> 20% helped (by more than a quarter), and it
  // still stalls over the limit: tightened to half again.
  r = limiter_tick(st, cfg, 3 * kS, 0.2, 100 << 20, 1600);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_NE(r.steps[0].text.find("helped"), std::string::npos) << r.steps[0].text;
  EXPECT_NE(r.steps[1].text.find("tightened"), std::string::npos) << r.steps[1].text;
  EXPECT_EQ(r.limits[0].limit.wbps, 50u << 20);
  EXPECT_EQ(r.limits[0].limit.wiops, 800u);
  // Helped again (to 4%), then calm: raised after 10 s calm, and lifted
  // once above what it moved before the first step.
  r = limiter_tick(st, cfg, 5 * kS, 0.04, 50 << 20, 800);
  EXPECT_NE(r.steps.at(0).text.find("helped"), std::string::npos);
  uint64_t t = 5 * kS;
  std::vector<std::string> steps;
  while (!r.limits.empty() && t < 100 * kS) {
    t += kS;
    r = limiter_tick(st, cfg, t, 0.01, 50 << 20, 800);
    for (const auto& x : r.steps) steps.push_back(x.text);
  }
  ASSERT_EQ(steps.size(), 2u);  // 50 -> 100 MiB/s, then 200 (what it moved before): lifted
  EXPECT_NE(steps[0].find("raised"), std::string::npos) << steps[0];
  EXPECT_NE(steps[0].find("wbps=50.0MiB/s wiops=800 -> wbps=100.0MiB/s wiops=1600"), std::string::npos) << steps[0];
  EXPECT_NE(steps[1].find("lifted"), std::string::npos) << steps[1];
  EXPECT_EQ(t, 25 * kS) << "one step each 10 s of calm, from the first calm tick (5 s, the verdict's)";
}

TEST(IoLimiter, AUselessStepIsLiftedAndNotRetriedDuringTheHoldOff) {
  IoConfig cfg;
  IoLimitState st;
  constexpr uint64_t kS = 1000 * kMs;
  limiter_tick(st, cfg, 0, 0.4, 200 << 20, 3200);
  auto r = limiter_tick(st, cfg, 1 * kS, 0.4, 200 << 20, 3200);
  ASSERT_EQ(r.limits.size(), 1u);
  // The pod stalls as much 2 s later: the limit did not help.
  r = limiter_tick(st, cfg, 3 * kS, 0.38, 100 << 20, 1600);
  EXPECT_TRUE(r.limits.empty());
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_NE(r.steps[0].text.find("useless"), std::string::npos) << r.steps[0].text;
  // Named again while held off: not limited; after 60 s it may be again.
  r = limiter_tick(st, cfg, 4 * kS, 0.4, 200 << 20, 3200);
  EXPECT_TRUE(r.limits.empty());
  r = limiter_tick(st, cfg, 63 * kS, 0.4, 200 << 20, 3200);
  r = limiter_tick(st, cfg, 64 * kS, 0.4, 200 << 20, 3200);
  EXPECT_EQ(r.limits.size(), 1u);
}

TEST(IoLimiter, NothingOnADeviceThePodDidNotUseNorBelowTheFloors) {
  IoConfig cfg;
  IoLimitState st;
  // The pod's devices unknown: the aggressor is named, nothing written.
  IoSignals s;
  s.interval_ns = 1000 * kMs;
  s.online = {{"/pod", 400000, 0, 0.4, {}}};
  s.offline = {{"/hadoop-yarn", "254:0", {0, 200 << 20, 0, 3200}}};
  IoReport r = io_judge(s, cfg);
  io_limit_step(r, cfg, 1000 * kMs, st);
  ASSERT_TRUE(r.aggressor);
  EXPECT_TRUE(r.limits.empty());
  // A writer moving less than twice the floors: not worth a limit.
  r = limiter_tick(st, cfg, 2000 * kMs, 0.4, 1 << 20, 20);
  EXPECT_TRUE(r.limits.empty());
  // Tightening stops at the floors.
  cfg.min_bps = 60u << 20;
  cfg.min_iops = 1000;
  r = limiter_tick(st, cfg, 3000 * kMs, 0.4, 200 << 20, 3200);
  ASSERT_EQ(r.limits.size(), 1u);
  EXPECT_EQ(r.limits[0].limit.wbps, 100u << 20);
  r = limiter_tick(st, cfg, 5000 * kMs, 0.2, 100 << 20, 1600);
  EXPECT_EQ(r.limits[0].limit.wbps, 60u << 20);
  EXPECT_EQ(r.limits[0].limit.wiops, 1000u);
  r = limiter_tick(st, cfg, 7000 * kMs, 0.12, 60 << 20, 1000);
  EXPECT_EQ(r.limits[0].limit.wbps, 60u << 20);
}

// An IO-bound pod stalls on IO most of the time whatever its latency: a
// step helps when its wait per IO falls. A tighter step that does not help
// goes back to the last limit and stays; a limit the cgroup no longer
// uses is raised and lifted.
TEST(IoLimiter, WaitPerIoJudgesStepsAndAnUnusedLimitIsLifted) {
  IoConfig cfg;
  IoLimitState st;
  constexpr uint64_t kS = 1000 * kMs;
  // 80% stalled, 1000 reads: 800 us per read.
  limiter_tick(st, cfg, 0, 0.8, 200 << 20, 3200, 1000);
  auto r = limiter_tick(st, cfg, 1 * kS, 0.8, 200 << 20, 3200, 1000);
  ASSERT_EQ(r.limits.size(), 1u);
  EXPECT_NEAR(r.limits[0].wait_before, 800, 1);
  // Still 80% stalled, but 2000 reads: 400 us each: helped; tightened.
  r = limiter_tick(st, cfg, 3 * kS, 0.8, 100 << 20, 1600, 2000);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(std::string(r.steps[0].kind), "helped") << r.steps[0].text;
  EXPECT_EQ(std::string(r.steps[1].kind), "tightened") << r.steps[1].text;
  EXPECT_EQ(r.limits[0].limit.wbps, 50u << 20);
  // The tighter step: 390 us per read, not a quarter better: back to
  // 100 MiB/s, and no tighter while it stalls.
  r = limiter_tick(st, cfg, 5 * kS, 0.78, 50 << 20, 800, 2000);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(std::string(r.steps[0].kind), "useless") << r.steps[0].text;
  EXPECT_NE(r.steps[0].text.find("back to wbps=100.0MiB/s"), std::string::npos) << r.steps[0].text;
  EXPECT_EQ(r.limits.at(0).limit.wbps, 100u << 20);
  for (uint64_t t = 6; t < 20; t++) {
    r = limiter_tick(st, cfg, t * kS, 0.8, 100 << 20, 1600, 2000);
    EXPECT_TRUE(r.steps.empty()) << r.steps[0].text;
  }
  // The writer stops (the pod still reads as hard as it can): the limit is
  // unused, raised after 10 s, lifted at the next.
  std::vector<std::string> kinds;
  uint64_t t = 20;
  for (; t < 60 && !r.limits.empty(); t++) {
    r = limiter_tick(st, cfg, t * kS, 0.8, 0, 0, 2500);
    for (const auto& x : r.steps) kinds.emplace_back(x.kind);
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"lifted"})) << "100 MiB/s raised to 200 MiB/s is what it moved before";
  EXPECT_EQ(t, 31u);
}

// A pod's wait per IO measured while no offline IO shares its devices is
// its baseline: a pod that waits no more than 1.25x that is not limited
// for, and a limit is not tightened once the pod is back near it.
TEST(IoLimiter, NoLimitNorTighterOneNearThePodsBaseline) {
  IoConfig cfg;
  IoLimitState st;
  constexpr uint64_t kS = 1000 * kMs;
  // Quiet ticks: 80% stalled, 2000 reads: 400 us per read alone.
  for (uint64_t t = 1; t <= 5; t++) limiter_tick(st, cfg, t * kS, 0.8, 0, 0, 2000);
  ASSERT_TRUE(st.baseline_wait_us.count("/pod"));
  EXPECT_NEAR(st.baseline_wait_us.at("/pod"), 400, 1);
  // A writer, but the pod waits 450 us per read (within 1.25x): no limit.
  auto r = limiter_tick(st, cfg, 6 * kS, 0.8, 200 << 20, 3200, 1778);
  ASSERT_TRUE(r.aggressor);
  EXPECT_TRUE(r.limits.empty());
  // 800 us per read on two ticks: limited, and the line says the baseline.
  r = limiter_tick(st, cfg, 6500 * kMs, 0.8, 200 << 20, 3200, 1000);
  EXPECT_TRUE(r.limits.empty());
  r = limiter_tick(st, cfg, 7 * kS, 0.8, 200 << 20, 3200, 1000);
  ASSERT_EQ(r.limits.size(), 1u);
  EXPECT_NE(r.steps.at(0).text.find("400 us per IO alone"), std::string::npos) << r.steps[0].text;
  // Back to 480 us per read, still 80% stalled: helped, and not tightened.
  r = limiter_tick(st, cfg, 9 * kS, 0.8, 100 << 20, 1600, 1667);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(std::string(r.steps[0].kind), "helped") << r.steps[0].text;
  for (uint64_t t = 10; t < 20; t++) {
    r = limiter_tick(st, cfg, t * kS, 0.8, 100 << 20, 1600, 1667);
    EXPECT_TRUE(r.steps.empty()) << r.steps[0].text;
  }
  EXPECT_EQ(r.limits.at(0).limit.wbps, 100u << 20);
}

}  // namespace
}  // namespace khagent
