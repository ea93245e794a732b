#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "khagent/policy/yarn.h"

using namespace khagent;

namespace {

constexpr uint64_t kMs = 1'000'000, kS = 1'000'000'000;

YarnConfig yarn_cfg() { return default_config().yarn; }

// A NodeManager with 16 vcores and 32 GiB, whose advertised resources follow
// what was posted (as the agent's loop does after a successful post).
struct Cap {
  YarnConfig cfg = yarn_cfg();
  YarnCapacityState st;
  YarnCapacityInput in;
  uint64_t now = 1000 * kS;
  Cap() {
    in.configured = {16, 32768};
    in.known = true;
    in.advertised = {16, 32768};
  }
  YarnCapacityDecision step(double budget, uint64_t advance = 1 * kS) {
    now += advance;
    in.now_ns = now;
    in.budget_cores = budget;
    auto d = yarn_capacity_step(in, cfg, st);
    if (d.post) {
      in.advertised = d.resource;
      in.known = true;
    }
    return d;
  }
};

YarnContainerInfo ctr(std::string id, int prio = 0, bool am = false, uint64_t interference_ns = 0,
                      uint64_t start_ms = 0, YarnResource r = {1, 1024}) {
  YarnContainerInfo c;
  c.id = std::move(id);
  c.app_id = "application_1_0001";
  c.queue_priority = prio;
  c.is_am = am;
  c.interference_ns = interference_ns;
  c.start_ms = start_ms;
  c.resource = r;
  return c;
}

std::vector<std::string> ranked_ids(const std::vector<YarnContainerInfo>& cs) {
  std::vector<std::string> out;
  for (size_t i : rank_for_reclaim(cs)) out.push_back(cs[i].id);
  return out;
}

using Ids = std::vector<std::string>;

}  // namespace

// ---- yarn_target --------------------------------------------------------------

TEST(YarnTarget, RoundingModesAndFloatNoise) {
  struct Case {
    double budget;
    double per_core;
    VcoreRounding rounding;
    int64_t want;
  };
  constexpr auto kDown = VcoreRounding::Down, kUp = VcoreRounding::Up, kNearest = VcoreRounding::Nearest;
  const Case cases[] = {
      {3.4, 1, kDown, 3},        {3.4, 1, kUp, 4},
      {3.4, 1, kNearest, 3},     {3.6, 1, kDown, 3},
      {3.6, 1, kNearest, 4},     {3.5, 1, kNearest, 4},
      {3.0, 1, kUp, 3},          {2.0, 1.5, kDown, 3},
      {2.5, 1.5, kDown, 3},                                    // 3.75
      {2.5, 1.5, kUp, 4},        {2.9999999999, 1, kDown, 3},  // noise below an integer
      {3.0000000001, 1, kUp, 3},                               // noise above an integer
      {0.29, 100, kDown, 29},                                  // 28.999999999999996
      {1.1, 100, kUp, 110},                                    // 110.00000000000001
  };
  for (const auto& c : cases) {
    YarnConfig cfg = yarn_cfg();
    cfg.vcores_per_core = c.per_core;
    cfg.rounding = c.rounding;
    cfg.min_vcores = 0;
    YarnResource t = yarn_target(c.budget, {256, 65536}, cfg);
    EXPECT_EQ(t.vcores, c.want) << c.budget << " x " << c.per_core << " " << vcore_rounding_name(c.rounding);
  }
}

TEST(YarnTarget, ReserveMinAndConfiguredClamps) {
  struct Case {
    double budget;
    int64_t reserve, min_vcores, configured;
    int64_t want;
  };
  const Case cases[] = {
      {6, 0, 1, 16, 6},    {6, 2, 1, 16, 4},  // reserve
      {1, 2, 1, 16, 1},                       // reserve below zero: the minimum
      {0, 0, 1, 16, 1},                       // no budget: the minimum
      {2, 0, 4, 16, 4},                       // min_vcores
      {2, 0, 4, 3, 3},                        // configured below min_vcores: configured
      {100, 0, 1, 16, 16},                    // capped at configured
      {100, 4, 1, 16, 16},                    // reserve applies before the cap
      {0, 0, 0, 16, 0},                       // min_vcores 0 allows 0
  };
  for (const auto& c : cases) {
    YarnConfig cfg = yarn_cfg();
    cfg.reserve_vcores = c.reserve;
    cfg.min_vcores = c.min_vcores;
    EXPECT_EQ(yarn_target(c.budget, {c.configured, 8192}, cfg).vcores, c.want)
        << "budget " << c.budget << " reserve " << c.reserve << " min " << c.min_vcores << " configured "
        << c.configured;
  }
}

TEST(YarnTarget, NegativeNanAndInfiniteBudgets) {
  YarnConfig cfg = yarn_cfg();
  cfg.min_vcores = 0;
  EXPECT_EQ(yarn_target(-3, {16, 8192}, cfg).vcores, 0);
  EXPECT_EQ(yarn_target(std::nan(""), {16, 8192}, cfg).vcores, 0);
  EXPECT_EQ(yarn_target(std::numeric_limits<double>::infinity(), {16, 8192}, cfg).vcores, 16);
  cfg.min_vcores = 2;
  EXPECT_EQ(yarn_target(-3, {16, 8192}, cfg).vcores, 2);
}

TEST(YarnTarget, MemoryModes) {
  YarnConfig cfg = yarn_cfg();
  // Configured memory.
  EXPECT_EQ(yarn_target(5, {16, 32768}, cfg), (YarnResource{5, 32768}));
  // Fixed, capped at the configured memory.
  cfg.memory_mb = 8192;
  EXPECT_EQ(yarn_target(5, {16, 32768}, cfg), (YarnResource{5, 8192}));
  cfg.memory_mb = 65536;
  EXPECT_EQ(yarn_target(5, {16, 32768}, cfg), (YarnResource{5, 32768}));
  // Scaled with the vcores (memory_mb is then not used), rounded down.
  cfg.memory_follows_cpu = true;
  cfg.memory_mb = 1024;
  EXPECT_EQ(yarn_target(5, {16, 32768}, cfg), (YarnResource{5, 10240}));
  EXPECT_EQ(yarn_target(100, {16, 32768}, cfg), (YarnResource{16, 32768}));
  EXPECT_EQ(yarn_target(2, {3, 10000}, cfg), (YarnResource{2, 6666}));
  // No configured vcores: the configured memory.
  EXPECT_EQ(yarn_target(5, {0, 4096}, cfg), (YarnResource{0, 4096}));
}

TEST(YarnTarget, MemoryNeverAboveTheMemoryLeversBudget) {
  YarnConfig cfg = yarn_cfg();
  EXPECT_EQ(yarn_target(5, {16, 32768}, cfg, 20000), (YarnResource{5, 20000}));
  EXPECT_EQ(yarn_target(5, {16, 32768}, cfg, 40000), (YarnResource{5, 32768})) << "never above the configured";
  EXPECT_EQ(yarn_target(5, {16, 32768}, cfg, -5), (YarnResource{5, 0}));
  EXPECT_EQ(yarn_target(5, {16, 32768}, cfg, std::nullopt), (YarnResource{5, 32768})) << "no memory lever";
  cfg.memory_follows_cpu = true;
  EXPECT_EQ(yarn_target(5, {16, 32768}, cfg, 4096), (YarnResource{5, 4096})) << "the lower of the two";
  cfg.memory_follows_budget = false;
  EXPECT_EQ(yarn_target(5, {16, 32768}, cfg, 4096), (YarnResource{5, 10240}));
  // A budget cut shrinks the advertised memory at once, like a vcore cut.
  YarnCapacityInput in;
  in.now_ns = 1;
  in.budget_cores = 16;
  in.configured = {16, 32768};
  in.known = true;
  in.advertised = {16, 32768};
  in.memory_budget_mb = 8192;
  YarnCapacityState st;
  auto d = yarn_capacity_step(in, yarn_cfg(), st);
  EXPECT_TRUE(d.post);
  EXPECT_EQ(d.resource, (YarnResource{16, 8192}));
  EXPECT_NE(d.reason.find("8192 MB"), std::string::npos) << d.reason;
  // A grow posts no more memory than the budget either.
  in.advertised = {8, 8192};
  in.memory_budget_mb = 16384;
  st = {};
  d = yarn_capacity_step(in, yarn_cfg(), st);
  EXPECT_FALSE(d.post);
  in.now_ns += yarn_cfg().grow_stable_ns + 1;
  d = yarn_capacity_step(in, yarn_cfg(), st);
  ASSERT_TRUE(d.post) << d.reason;
  EXPECT_EQ(d.resource, (YarnResource{16, 16384}));
}

// ---- yarn_capacity_step -------------------------------------------------------

TEST(YarnCapacity, ActionNames) {
  EXPECT_STREQ(yarn_action_name(YarnCapacityAction::Hold), "hold");
  EXPECT_STREQ(yarn_action_name(YarnCapacityAction::Shrink), "shrink");
  EXPECT_STREQ(yarn_action_name(YarnCapacityAction::Grow), "grow");
  EXPECT_STREQ(yarn_action_name(YarnCapacityAction::WaitStable), "wait_stable");
  EXPECT_STREQ(yarn_action_name(YarnCapacityAction::WaitInterval), "wait_interval");
  EXPECT_STREQ(yarn_action_name(YarnCapacityAction::Deadband), "deadband");
  EXPECT_STREQ(yarn_action_name(YarnCapacityAction::Unknown), "unknown");
}

TEST(YarnCapacity, FirstContactPostsTheTarget) {
  Cap c;
  c.in.known = false;
  c.in.advertised = {};
  c.st.grow_pending = true;
  c.st.grow_since_ns = 5;
  c.st.grow_min_vcores = 3;
  auto d = c.step(6);
  EXPECT_TRUE(d.post);
  EXPECT_EQ(d.resource, (YarnResource{6, 32768}));
  EXPECT_EQ(d.target, d.resource);
  EXPECT_EQ(d.action, YarnCapacityAction::Shrink);
  EXPECT_FALSE(c.st.grow_pending);
  EXPECT_NE(d.reason.find("first contact"), std::string::npos) << d.reason;

  Cap g;
  g.in.known = false;
  auto dg = g.step(100);
  EXPECT_TRUE(dg.post);
  EXPECT_EQ(dg.resource, (YarnResource{16, 32768}));
  EXPECT_EQ(dg.action, YarnCapacityAction::Grow);
}

TEST(YarnCapacity, ShrinksAtOnce) {
  Cap c;
  auto d = c.step(3.4);
  EXPECT_TRUE(d.post);
  EXPECT_EQ(d.action, YarnCapacityAction::Shrink);
  EXPECT_EQ(d.resource, (YarnResource{3, 32768}));
  EXPECT_NE(d.reason.find("3.40"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("shrink"), std::string::npos) << d.reason;
  auto h = c.step(3.4);
  EXPECT_FALSE(h.post);
  EXPECT_EQ(h.action, YarnCapacityAction::Hold);
}

TEST(YarnCapacity, DeadbandBothDirections) {
  struct Case {
    double budget;
    YarnCapacityAction want;
  };
  const Case cases[] = {
      {8, YarnCapacityAction::Hold},   {7, YarnCapacityAction::Deadband},    {9, YarnCapacityAction::Deadband},
      {6, YarnCapacityAction::Shrink}, {10, YarnCapacityAction::WaitStable},
  };
  for (const auto& k : cases) {
    Cap c;
    c.cfg.deadband_vcores = 2;
    c.in.advertised = {8, 32768};
    auto d = c.step(k.budget);
    EXPECT_EQ(d.action, k.want) << k.budget << ": " << d.reason;
    EXPECT_EQ(d.post, k.want == YarnCapacityAction::Shrink) << k.budget;
  }
  // A pending grow ends when the target falls back into the deadband.
  Cap c;
  c.cfg.deadband_vcores = 2;
  c.in.advertised = {8, 32768};
  EXPECT_EQ(c.step(12).action, YarnCapacityAction::WaitStable);
  EXPECT_TRUE(c.st.grow_pending);
  EXPECT_EQ(c.step(9).action, YarnCapacityAction::Deadband);
  EXPECT_FALSE(c.st.grow_pending);
}

TEST(YarnCapacity, GrowWaitsForStabilityThenPostsTheLowestTarget) {
  Cap c;
  c.in.advertised = {4, 32768};
  auto d = c.step(10);
  EXPECT_EQ(d.action, YarnCapacityAction::WaitStable);
  EXPECT_FALSE(d.post);
  EXPECT_EQ(d.target.vcores, 10);
  uint64_t since = c.now;
  EXPECT_EQ(c.st.grow_since_ns, since);
  EXPECT_EQ(c.step(8, 10 * kS).action, YarnCapacityAction::WaitStable);
  EXPECT_EQ(c.step(12, 10 * kS).action, YarnCapacityAction::WaitStable);
  EXPECT_EQ(c.st.grow_min_vcores, 8);
  EXPECT_EQ(c.step(12, 10 * kS - 1).action, YarnCapacityAction::WaitStable);  // 1ns short
  auto g = c.step(12, 1);
  EXPECT_EQ(g.action, YarnCapacityAction::Grow);
  EXPECT_TRUE(g.post);
  EXPECT_EQ(g.resource, (YarnResource{8, 32768}));
  EXPECT_EQ(g.target.vcores, 12);
  EXPECT_EQ(c.st.last_grow_ns, c.now);
  EXPECT_FALSE(c.st.grow_pending);
}

TEST(YarnCapacity, GrowMemoryFollowsTheLowestVcores) {
  Cap c;
  c.cfg.memory_follows_cpu = true;
  c.in.advertised = {4, 8192};
  c.step(10);
  c.step(6, 15 * kS);
  auto g = c.step(12, 15 * kS);
  EXPECT_EQ(g.action, YarnCapacityAction::Grow);
  EXPECT_EQ(g.resource, (YarnResource{6, 12288}));
}

TEST(YarnCapacity, SecondGrowWaitsForTheInterval) {
  Cap c;
  c.in.advertised = {4, 32768};
  c.step(8);
  ASSERT_EQ(c.step(8, 30 * kS).action, YarnCapacityAction::Grow);
  uint64_t grew = c.now;
  ASSERT_EQ(c.in.advertised.vcores, 8);
  EXPECT_EQ(c.step(12).action, YarnCapacityAction::WaitStable);  // grew + 1s
  auto w = c.step(12, 30 * kS);                                  // stable, 31s after the grow
  EXPECT_EQ(w.action, YarnCapacityAction::WaitInterval);
  EXPECT_FALSE(w.post);
  EXPECT_TRUE(c.st.grow_pending);
  c.now = grew + 60 * kS - 1;
  EXPECT_EQ(c.step(12, 0).action, YarnCapacityAction::WaitInterval);
  auto g = c.step(12, 1);
  EXPECT_EQ(g.action, YarnCapacityAction::Grow);
  EXPECT_EQ(g.resource, (YarnResource{12, 32768}));
  EXPECT_EQ(c.st.last_grow_ns, grew + 60 * kS);
}

TEST(YarnCapacity, DipToTheAdvertisedValueResetsTheGrow) {
  Cap c;
  c.in.advertised = {4, 32768};
  c.step(10);
  EXPECT_TRUE(c.st.grow_pending);
  EXPECT_EQ(c.step(4, 10 * kS).action, YarnCapacityAction::Hold);
  EXPECT_FALSE(c.st.grow_pending);
  EXPECT_EQ(c.step(10, 10 * kS).action, YarnCapacityAction::WaitStable);
  EXPECT_EQ(c.step(10, 20 * kS).action, YarnCapacityAction::WaitStable);  // window restarted
  auto g = c.step(10, 10 * kS);
  EXPECT_EQ(g.action, YarnCapacityAction::Grow);
  EXPECT_EQ(g.resource.vcores, 10);  // the dip to 4 is not remembered
}

TEST(YarnCapacity, DipBelowTheAdvertisedValueShrinksAndResetsTheGrow) {
  Cap c;
  c.in.advertised = {4, 32768};
  c.step(10);
  auto s = c.step(2, 10 * kS);
  EXPECT_EQ(s.action, YarnCapacityAction::Shrink);
  EXPECT_EQ(s.resource.vcores, 2);
  EXPECT_FALSE(c.st.grow_pending);
}

TEST(YarnCapacity, AdvertisedRisingDuringTheWindowTurnsTheGrowIntoDeadband) {
  Cap c;
  c.in.advertised = {4, 32768};
  c.step(8);
  c.in.advertised = {10, 32768};  // re-read from the RM: someone else raised it
  auto d = c.step(12, 30 * kS);
  EXPECT_EQ(d.action, YarnCapacityAction::Deadband) << d.reason;
  EXPECT_FALSE(d.post);
  EXPECT_FALSE(c.st.grow_pending);
}

TEST(YarnCapacity, MemoryDropForcesAShrink) {
  // Scaled memory: vcores inside the deadband, memory lower.
  Cap c;
  c.cfg.memory_follows_cpu = true;
  c.cfg.deadband_vcores = 2;
  c.in.advertised = {8, 16384};
  auto d = c.step(7);
  EXPECT_EQ(d.action, YarnCapacityAction::Shrink);
  EXPECT_EQ(d.resource, (YarnResource{7, 14336}));

  // Fixed memory lowered in the configuration, same vcores.
  Cap f;
  f.cfg.memory_mb = 8192;
  f.in.advertised = {8, 32768};
  auto e = f.step(8);
  EXPECT_EQ(e.action, YarnCapacityAction::Shrink);
  EXPECT_EQ(e.resource, (YarnResource{8, 8192}));

  // Memory down, vcores up: the memory drops now, the vcores wait for the
  // grow rules (a shrink never grows a dimension).
  Cap m;
  m.cfg.memory_mb = 8192;
  m.in.advertised = {4, 32768};
  auto s = m.step(10);
  EXPECT_EQ(s.action, YarnCapacityAction::Shrink);
  EXPECT_EQ(s.resource, (YarnResource{4, 8192}));
  EXPECT_EQ(s.target, (YarnResource{10, 8192}));
  EXPECT_EQ(m.step(10).action, YarnCapacityAction::WaitStable);
  EXPECT_EQ(m.step(10, 30 * kS).resource, (YarnResource{10, 8192}));
}

TEST(YarnCapacity, ShrinkDoesNotGrowTheMemory) {
  Cap c;
  c.in.advertised = {8, 8192};
  auto d = c.step(4);
  EXPECT_EQ(d.action, YarnCapacityAction::Shrink);
  EXPECT_EQ(d.resource, (YarnResource{4, 8192}));
}

TEST(YarnCapacity, MemoryOnlyGrowNeedsStability) {
  Cap c;
  c.in.advertised = {8, 8192};
  EXPECT_EQ(c.step(8).action, YarnCapacityAction::WaitStable);
  EXPECT_EQ(c.step(8, 29 * kS).action, YarnCapacityAction::WaitStable);
  auto g = c.step(8, 1 * kS);
  EXPECT_EQ(g.action, YarnCapacityAction::Grow);
  EXPECT_EQ(g.resource, (YarnResource{8, 32768}));
}

TEST(YarnCapacity, ZeroStableAndIntervalGrowAtOnce) {
  Cap c;
  c.cfg.grow_stable_ns = 0;
  c.cfg.grow_interval_ns = 0;
  c.in.advertised = {4, 32768};
  EXPECT_EQ(c.step(6).action, YarnCapacityAction::Grow);
  EXPECT_EQ(c.step(9).action, YarnCapacityAction::Grow);
  EXPECT_EQ(c.in.advertised.vcores, 9);
}

// ---- rank_for_reclaim ---------------------------------------------------------

TEST(YarnRank, WholeOrder) {
  const std::vector<YarnContainerInfo> cs = {
      ctr("container_1_0001_01_000001", 0, true, 0, 100),  // AM, queue 0
      ctr("container_1_0001_01_000002", 0, false, 0, 200),
      ctr("container_1_0001_01_000003", 0, false, 0, 200),          // same age: higher id first
      ctr("container_1_0002_01_000002", 0, false, 5 * kMs, 150),    // interferes
      ctr("container_1_0003_01_000002", 10, false, 50 * kMs, 300),  // kept queue
      ctr("container_1_0003_01_000001", 10, true, 0, 50),           // AM in the kept queue
      ctr("container_1_0004_01_000002", -5, false, 0, 0),           // cheap queue
      ctr("container_1_0002_01_000003", 0, false, 0, 0),            // unknown start: oldest
      ctr("container_1_0002_01_000004", 0, false, 0, 250),          // youngest
  };
  EXPECT_EQ(ranked_ids(cs), (Ids{
                                "container_1_0004_01_000002",
                                "container_1_0002_01_000002",
                                "container_1_0002_01_000004",
                                "container_1_0001_01_000003",
                                "container_1_0001_01_000002",
                                "container_1_0002_01_000003",
                                "container_1_0001_01_000001",
                                "container_1_0003_01_000002",
                                "container_1_0003_01_000001",
                            }));
}

TEST(YarnRank, AmGoesLastEvenIfItInterferesMost) {
  const std::vector<YarnContainerInfo> cs = {
      ctr("container_1_0001_01_000001", 0, true, 900 * kMs, 500),
      ctr("container_1_0001_01_000002", 0, false, 0, 100),
      ctr("container_1_0001_01_000003", 0, false, 1 * kMs, 100),
  };
  EXPECT_EQ(ranked_ids(cs),
            (Ids{"container_1_0001_01_000003", "container_1_0001_01_000002", "container_1_0001_01_000001"}));
}

TEST(YarnRank, IdTieBreakComparesNumbers) {
  // The sequence number is padded to six digits but may grow wider.
  const std::vector<YarnContainerInfo> cs = {
      ctr("container_e17_1700000000000_0001_01_999999"),  ctr("container_e17_1700000000000_0001_01_1000000"),
      ctr("container_e17_1700000000000_0001_01_000002"),  ctr("container_e17_1700000000000_9999_01_000001"),
      ctr("container_e17_1700000000000_10000_01_000001"),
  };
  EXPECT_EQ(ranked_ids(cs), (Ids{
                                "container_e17_1700000000000_10000_01_000001",
                                "container_e17_1700000000000_9999_01_000001",
                                "container_e17_1700000000000_0001_01_1000000",
                                "container_e17_1700000000000_0001_01_999999",
                                "container_e17_1700000000000_0001_01_000002",
                            }));
}

TEST(YarnRank, EmptyAndFullTiesKeepInputOrder) {
  EXPECT_TRUE(rank_for_reclaim({}).empty());
  std::vector<YarnContainerInfo> cs = {ctr("c"), ctr("c"), ctr("c")};
  cs[0].queue = "a";
  cs[1].queue = "b";
  cs[2].queue = "c";
  EXPECT_EQ(rank_for_reclaim(cs), (std::vector<size_t>{0, 1, 2}));
}

// ---- reclaim_step -------------------------------------------------------------

namespace {

// Four containers of 2 vcores/2048 MB, ranked w4, w3, w2, w1 (youngest first).
std::vector<YarnContainerInfo> four_workers() {
  return {
      ctr("container_1_0001_01_000001", 0, false, 0, 100, {2, 2048}),
      ctr("container_1_0001_01_000002", 0, false, 0, 200, {2, 2048}),
      ctr("container_1_0001_01_000003", 0, false, 0, 300, {2, 2048}),
      ctr("container_1_0001_01_000004", 0, false, 0, 400, {2, 2048}),
  };
}

}  // namespace

TEST(Reclaim, FitsMeansNoVictimsAndClearsMarks) {
  YarnConfig cfg = yarn_cfg();
  ReclaimState st;
  st.marked_ns["container_1_0001_01_000004"] = 5;
  st.marked_ns["container_gone"] = 5;
  ReclaimInput in;
  in.now_ns = 1000 * kS;
  in.capacity = {8, 8192};
  in.containers = four_workers();
  auto d = reclaim_step(in, cfg, st);
  EXPECT_EQ(d.used, (YarnResource{8, 8192}));
  EXPECT_TRUE(d.victims.empty());
  EXPECT_TRUE(d.kill.empty());
  EXPECT_EQ(d.reason, "");
  EXPECT_TRUE(st.marked_ns.empty());
}

TEST(Reclaim, VictimsUntilTheRestFits) {
  struct Case {
    const char* name;
    YarnResource capacity;
    Ids want;
  };
  const Case cases[] = {
      {"vcores only", {4, 65536}, {"container_1_0001_01_000004", "container_1_0001_01_000003"}},
      {"memory only", {64, 5000}, {"container_1_0001_01_000004", "container_1_0001_01_000003"}},
      {"memory only, one", {64, 6144}, {"container_1_0001_01_000004"}},
      {"both", {5, 3000}, {"container_1_0001_01_000004", "container_1_0001_01_000003", "container_1_0001_01_000002"}},
      {"nothing left",
       {0, 0},
       {"container_1_0001_01_000004", "container_1_0001_01_000003", "container_1_0001_01_000002",
        "container_1_0001_01_000001"}},
  };
  for (const auto& c : cases) {
    YarnConfig cfg = yarn_cfg();
    ReclaimState st;
    ReclaimInput in;
    in.now_ns = 1000 * kS;
    in.capacity = c.capacity;
    in.containers = four_workers();
    auto d = reclaim_step(in, cfg, st);
    EXPECT_EQ(d.victims, c.want) << c.name;
    EXPECT_TRUE(d.kill.empty()) << c.name;
    EXPECT_EQ(st.marked_ns.size(), c.want.size()) << c.name;
  }
}

TEST(Reclaim, MixedSizesStopWhenBothDimensionsFit) {
  YarnConfig cfg = yarn_cfg();
  ReclaimState st;
  ReclaimInput in;
  in.now_ns = 1000 * kS;
  in.capacity = {4, 8192};
  in.containers = {
      ctr("x", 0, false, 0, 400, {1, 6144}),
      ctr("y", 0, false, 0, 300, {3, 1024}),
      ctr("z", 0, false, 0, 200, {2, 2048}),
      ctr("w", 0, false, 0, 100, {2, 4096}),
  };
  auto d = reclaim_step(in, cfg, st);
  EXPECT_EQ(d.used, (YarnResource{8, 13312}));
  EXPECT_EQ(d.victims, (Ids{"x", "y"}));  // after x: 7/7168 (memory fits), after y: 4/6144
  EXPECT_NE(d.reason.find("used 8 vcores/13312 MB over capacity 4 vcores/8192 MB: 2 victims"), std::string::npos)
      << d.reason;
}

TEST(Reclaim, PassesOverContainersThatFreeNothingNeeded) {
  YarnConfig cfg = yarn_cfg();
  ReclaimState st;
  ReclaimInput in;
  in.now_ns = 1000 * kS;
  in.capacity = {16, 2048};  // over in memory only
  in.containers = {
      ctr("no-memory", 0, false, 0, 900, {1, 0}),
      ctr("a", 0, false, 0, 400, {1, 2048}),
      ctr("b", 0, false, 0, 300, {1, 2048}),
  };
  EXPECT_EQ(reclaim_step(in, cfg, st).victims, (Ids{"a"}));
}

TEST(Reclaim, MarksGraceAndDroppedMarks) {
  YarnConfig cfg = yarn_cfg();  // 180 s grace
  ReclaimState st;
  ReclaimInput in;
  const uint64_t t0 = 1000 * kS;
  in.now_ns = t0;
  in.capacity = {4, 65536};
  in.containers = four_workers();
  const std::string w4 = "container_1_0001_01_000004", w3 = "container_1_0001_01_000003",
                    w2 = "container_1_0001_01_000002";

  auto d = reclaim_step(in, cfg, st);
  EXPECT_EQ(d.victims, (Ids{w4, w3}));
  EXPECT_TRUE(d.kill.empty());
  EXPECT_EQ(st.marked_ns, (std::map<std::string, uint64_t>{{w4, t0}, {w3, t0}}));
  EXPECT_NE(d.reason.find("2 victims, 0 past the 180 s grace"), std::string::npos) << d.reason;

  in.now_ns = t0 + 100 * kS;
  d = reclaim_step(in, cfg, st);
  EXPECT_TRUE(d.kill.empty());
  EXPECT_EQ(st.marked_ns, (std::map<std::string, uint64_t>{{w4, t0}, {w3, t0}}));  // kept

  // w4 ended on its own; the capacity shrank further: w2 is new.
  in.containers.pop_back();
  in.capacity = {2, 65536};
  in.now_ns = t0 + 150 * kS;
  d = reclaim_step(in, cfg, st);
  EXPECT_EQ(d.victims, (Ids{w3, w2}));
  EXPECT_EQ(st.marked_ns, (std::map<std::string, uint64_t>{{w3, t0}, {w2, t0 + 150 * kS}}));

  in.now_ns = t0 + 180 * kS - 1;
  EXPECT_TRUE(reclaim_step(in, cfg, st).kill.empty());
  in.now_ns = t0 + 180 * kS;
  d = reclaim_step(in, cfg, st);
  EXPECT_EQ(d.kill, (Ids{w3}));
  EXPECT_NE(d.reason.find("2 victims, 1 past the 180 s grace"), std::string::npos) << d.reason;
  in.now_ns = t0 + 330 * kS;
  EXPECT_EQ(reclaim_step(in, cfg, st).kill, (Ids{w3, w2}));

  // The capacity recovers: nothing over, every mark dropped.
  in.capacity = {16, 65536};
  d = reclaim_step(in, cfg, st);
  EXPECT_TRUE(d.victims.empty());
  EXPECT_TRUE(st.marked_ns.empty());
}

TEST(Reclaim, ReclaimOffNeverKills) {
  YarnConfig cfg = yarn_cfg();
  cfg.reclaim = false;
  cfg.emergency = true;
  ReclaimState st;
  ReclaimInput in;
  in.now_ns = 1000 * kS;
  in.capacity = {4, 65536};
  in.containers = four_workers();
  in.containers[3].interference_ns = 10 * kMs;
  in.emergency = true;
  auto d = reclaim_step(in, cfg, st);
  EXPECT_EQ(d.victims.size(), 2u);
  EXPECT_TRUE(d.kill.empty());
  in.now_ns += 3600 * kS;
  d = reclaim_step(in, cfg, st);
  EXPECT_EQ(d.victims.size(), 2u);
  EXPECT_TRUE(d.kill.empty());
  EXPECT_EQ(st.marked_ns.size(), 2u);  // kept for reporting
  EXPECT_NE(d.reason.find("2 past the 180 s grace"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("reclaim off"), std::string::npos) << d.reason;
}

TEST(Reclaim, EmergencyKillsTheTopInterferingVictimAtOnce) {
  auto containers = [] {
    return std::vector<YarnContainerInfo>{
        ctr("cheap-quiet", -1, false, 0, 100, {2, 2048}),      // first victim, no interference
        ctr("noisy", 0, false, 10 * kMs, 100, {2, 2048}),      // second victim
        ctr("noisier-am", 0, true, 90 * kMs, 100, {2, 2048}),  // AM: not a victim
        ctr("quiet", 0, false, 0, 100, {2, 2048}),
    };
  };
  struct Case {
    bool cfg_emergency, in_emergency;
    Ids want_kill;
  };
  const Case cases[] = {
      {true, true, {"noisy"}},
      {true, false, {}},
      {false, true, {}},
      {false, false, {}},
  };
  for (const auto& c : cases) {
    YarnConfig cfg = yarn_cfg();
    cfg.emergency = c.cfg_emergency;
    ReclaimState st;
    ReclaimInput in;
    in.now_ns = 1000 * kS;
    in.capacity = {4, 65536};
    in.containers = containers();
    in.emergency = c.in_emergency;
    auto d = reclaim_step(in, cfg, st);
    EXPECT_EQ(d.victims, (Ids{"cheap-quiet", "noisy"})) << c.cfg_emergency << c.in_emergency;
    EXPECT_EQ(d.kill, c.want_kill) << c.cfg_emergency << c.in_emergency;
  }
}

TEST(Reclaim, MemoryEmergencyKillsTheTopContainerHoldingMemoryAtMostEveryTwoSeconds) {
  YarnConfig cfg = yarn_cfg();
  EXPECT_TRUE(cfg.memory_emergency) << "on by default";
  ReclaimState st;
  ReclaimInput in;
  in.now_ns = 1000 * kS;
  in.capacity = {8, 8192};  // the allocations fit
  in.containers = four_workers();
  in.containers[3].resource.memory_mb = 0;  // w4 ranks first but holds no memory
  in.memory_emergency = "100 MiB free";
  auto d = reclaim_step(in, cfg, st);
  EXPECT_TRUE(d.victims.empty());
  EXPECT_EQ(d.kill, (Ids{"container_1_0001_01_000003"}));
  EXPECT_EQ(d.memory_urgent, "container_1_0001_01_000003");
  EXPECT_NE(d.reason.find("memory emergency (100 MiB free): container_1_0001_01_000003 goes at once"),
            std::string::npos)
      << d.reason;
  // The caller records the kill: the next one waits 2 s.
  st.memory_kill_ns = in.now_ns;
  in.now_ns += kS;
  d = reclaim_step(in, cfg, st);
  EXPECT_TRUE(d.kill.empty());
  in.now_ns += kS;
  d = reclaim_step(in, cfg, st);
  EXPECT_EQ(d.kill.size(), 1u);

  // Over the capacity: the first victim that holds memory, before its grace.
  st = {};
  in.capacity = {4, 65536};
  d = reclaim_step(in, cfg, st);
  EXPECT_EQ(d.victims, (Ids{"container_1_0001_01_000004", "container_1_0001_01_000003"}));
  EXPECT_EQ(d.kill, (Ids{"container_1_0001_01_000003"}));
  EXPECT_NE(d.reason.find("memory emergency"), std::string::npos) << d.reason;

  // Off, or reclaim off, or no emergency: nothing at once.
  for (int off = 0; off < 3; off++) {
    YarnConfig c = cfg;
    ReclaimInput i = in;
    if (off == 0) c.memory_emergency = false;
    if (off == 1) c.reclaim = false;
    if (off == 2) i.memory_emergency.reset();
    st = {};
    d = reclaim_step(i, c, st);
    EXPECT_TRUE(d.kill.empty()) << off;
    EXPECT_EQ(d.memory_urgent, "") << off;
  }
}

TEST(Reclaim, EmergencyAfterGraceKeepsRankOrderWithoutDuplicates) {
  YarnConfig cfg = yarn_cfg();
  cfg.emergency = true;
  ReclaimState st;
  ReclaimInput in;
  in.now_ns = 1000 * kS;
  in.capacity = {4, 65536};
  in.containers = four_workers();
  in.containers[2].interference_ns = 5 * kMs;  // w3 ranks first now
  in.emergency = true;
  auto d = reclaim_step(in, cfg, st);
  EXPECT_EQ(d.victims, (Ids{"container_1_0001_01_000003", "container_1_0001_01_000004"}));
  EXPECT_EQ(d.kill, (Ids{"container_1_0001_01_000003"}));
  in.now_ns += 180 * kS;
  d = reclaim_step(in, cfg, st);
  EXPECT_EQ(d.kill, (Ids{"container_1_0001_01_000003", "container_1_0001_01_000004"}));
}

TEST(Reclaim, AmGoesLastEvenIfItInterferesMost) {
  YarnConfig cfg = yarn_cfg();
  ReclaimState st;
  ReclaimInput in;
  in.now_ns = 1000 * kS;
  in.capacity = {4, 65536};
  in.containers = {
      ctr("am", 0, true, 500 * kMs, 900, {2, 2048}),
      ctr("w1", 0, false, 0, 100, {2, 2048}),
      ctr("w2", 0, false, 1 * kMs, 100, {2, 2048}),
  };
  EXPECT_EQ(reclaim_step(in, cfg, st).victims, (Ids{"w2"}));
  in.capacity = {2, 65536};
  EXPECT_EQ(reclaim_step(in, cfg, st).victims, (Ids{"w2", "w1"}));
  in.capacity = {0, 65536};
  EXPECT_EQ(reclaim_step(in, cfg, st).victims, (Ids{"w2", "w1", "am"}));
}
