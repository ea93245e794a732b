// Where each lever is written, and the ladder above cpu.idle.
#include <gtest/gtest.h>

#include <algorithm>

#include "khagent/policy/lever_table.h"

using namespace khagent;

namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kS = 1'000'000'000;

bool touches(const std::vector<Setting>& w, const std::string& cg, Knob k) {
  return std::any_of(w.begin(), w.end(), [&](const Setting& s) { return s.cgroup == cg && knob_of(s.value) == k; });
}
bool has(const std::vector<Setting>& w, const std::string& cg, Knob k) { return touches(w, cg, k); }
bool has(const std::vector<Setting>& w, const std::string& cg, Knob k, const KnobValue& v) {
  return std::any_of(w.begin(), w.end(),
                     [&](const Setting& s) { return s.cgroup == cg && knob_of(s.value) == k && s.value == v; });
}

const char* kQos = "/kubepods.slice/kubepods-besteffort.slice";
const char* kPod = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234.slice";

std::vector<OfflineTarget> usual_targets() {
  TargetCandidates c;
  c.yarn_roots = {"/hadoop-yarn"};
  c.besteffort_qos = {kQos};
  c.besteffort_pods = {kPod};
  return select_targets(c, default_config().offline);
}

}  // namespace

TEST(Levers, TargetsAndTheirKinds) {
  auto t = usual_targets();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].kind, TargetKind::YarnRoot);
  EXPECT_EQ(t[1].kind, TargetKind::BestEffortQos);
  EXPECT_EQ(t[2].kind, TargetKind::BestEffortPod);
  // A configured path keeps the rules of what it is; containers are never targets.
  TargetCandidates c;
  c.configured = {kQos, "/batch.slice", "/hadoop-yarn/container_e01_1_0001_01_000002",
                  "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podab.slice/cri-containerd-0a.scope"};
  auto k = select_targets(c, default_config().offline);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].kind, TargetKind::BestEffortQos);
  EXPECT_EQ(k[1].kind, TargetKind::Configured);
  OfflineConfig no_yarn = default_config().offline;
  no_yarn.yarn = false;
  no_yarn.besteffort = false;
  EXPECT_TRUE(select_targets({{}, {kQos}, {kPod}, {"/hadoop-yarn"}}, no_yarn).empty());
}

TEST(Levers, IdleNeverOnACgroupWhoseWeightTheKubeletWrites) {
  LeverInput in;
  in.targets = usual_targets();
  in.budget_cores = 0.5;
  in.node_cpus = 2;
  auto w = lever_writes(in, default_config());
  EXPECT_TRUE(has(w, "/hadoop-yarn", Knob::Idle, CpuIdle{true}));
  EXPECT_TRUE(has(w, kPod, Knob::Idle, CpuIdle{true}));
  EXPECT_FALSE(touches(w, kQos, Knob::Idle));
  EXPECT_FALSE(touches(w, kQos, Knob::Weight));
  // The base lever writes no quota and no cpuset.
  for (const auto& d : w) EXPECT_TRUE(knob_of(d.value) == Knob::Idle) << d.cgroup << " " << knob_name(knob_of(d.value));
}

TEST(Levers, WithoutCpuIdleTheMinimumWeightWhereKhagentOwnsIt) {
  LeverInput in;
  in.targets = usual_targets();
  in.idle_supported = false;
  in.node_cpus = 2;
  auto w = lever_writes(in, default_config());
  EXPECT_TRUE(has(w, "/hadoop-yarn", Knob::Weight, CpuWeight{1}));
  EXPECT_FALSE(touches(w, kQos, Knob::Weight));
  EXPECT_FALSE(touches(w, kPod, Knob::Weight));
  EXPECT_FALSE(touches(w, "/hadoop-yarn", Knob::Idle));
}

TEST(Levers, QuotaOnlyOnTheQuotaRungAndOnlyOverIdleWork) {
  Config cfg = default_config();
  LeverInput in;
  in.targets = usual_targets();
  in.budget_cores = 0.4;
  in.node_cpus = 2;
  in.quota = true;
  auto w = lever_writes(in, cfg);
  EXPECT_TRUE(has(w, "/hadoop-yarn", Knob::Quota));
  EXPECT_TRUE(has(w, kQos, Knob::Quota));       // its pods are idle
  EXPECT_FALSE(touches(w, kPod, Knob::Quota));  // the kubelet owns pod quotas
  // No cpu.idle configured where the kernel has it: no quota either.
  cfg.offline.idle = false;
  w = lever_writes(in, cfg);
  for (const auto& d : w) EXPECT_NE(knob_of(d.value), Knob::Quota) << d.cgroup;
  // A kernel without cpu.idle: the quota is all there is.
  in.idle_supported = false;
  EXPECT_TRUE(has(lever_writes(in, cfg), "/hadoop-yarn", Knob::Quota));
}

TEST(Levers, CpusetRungPartitionsParentsWithoutAQuota) {
  LeverInput in;
  in.targets = usual_targets();
  in.budget_cores = 1;
  in.node_cpus = 2;
  in.cpuset = true;
  in.offline_cpus = CpuSet{1};
  auto w = lever_writes(in, default_config());
  EXPECT_TRUE(has(w, "/hadoop-yarn", Knob::Cpus, CpuList{{1}}));
  EXPECT_TRUE(has(w, kQos, Knob::Cpus, CpuList{{1}}));
  EXPECT_FALSE(touches(w, kPod, Knob::Cpus));
  EXPECT_FALSE(touches(w, "/hadoop-yarn", Knob::Quota));
  Config thr = default_config();
  thr.cpuset.throttle = true;
  EXPECT_TRUE(has(lever_writes(in, thr), "/hadoop-yarn", Knob::Quota));
}

TEST(LeverTable, OneEntryPerLeverWithItsNameAndRungs) {
  auto table = lever_table();
  ASSERT_EQ(table.size(), kAllLevers.size());
  for (size_t i = 0; i < table.size(); i++) {
    EXPECT_EQ(table[i].lever, kAllLevers[i]) << "table order is the order values are listed";
    EXPECT_EQ(&lever_spec(kAllLevers[i]), &table[i]);
    EXPECT_EQ(lever_from_name(lever_name(kAllLevers[i])), kAllLevers[i]);
    EXPECT_NE(std::string(table[i].kernels), "");
    EXPECT_NE(std::string(table[i].where), "");
    EXPECT_NE(std::string(table[i].undo), "");
  }
  EXPECT_FALSE(lever_from_name("idle2"));
  // The rungs are the levers that carry the budget.
  for (const auto& s : table) EXPECT_EQ(lever_is_rung(s.lever), s.carries_budget) << lever_name(s.lever);
  EXPECT_TRUE(lever_spec(Lever::Cpuset).needs_spare_cpu);
  EXPECT_FALSE(lever_spec(Lever::Quota).needs_spare_cpu);
}

TEST(LeverTable, EachLeverWritesOnlyItsKnobOnTheTargetsItTouches) {
  Config cfg = default_config();
  cfg.cpuset.throttle = true;
  LeverInput in;
  in.targets = usual_targets();
  in.budget_cores = 1;
  in.node_cpus = 4;
  in.cpuset = in.quota = true;
  in.offline_cpus = CpuSet{2, 3};
  auto w = lever_writes(in, cfg);
  for (const auto& set : w) {
    const OfflineTarget* t = nullptr;
    for (const auto& x : in.targets)
      if (x.path == set.cgroup) t = &x;
    ASSERT_NE(t, nullptr) << set.cgroup;
    bool by_some_lever = false;
    for (const auto& spec : lever_table())
      if (spec.knob == knob_of(set.value) && spec.touches(t->kind)) by_some_lever = true;
    EXPECT_TRUE(by_some_lever) << set.cgroup << " " << knob_name(knob_of(set.value));
  }
  EXPECT_TRUE(has(w, "/hadoop-yarn", Knob::Cpus, CpuList{{2, 3}}));
  EXPECT_TRUE(has(w, "/hadoop-yarn", Knob::Quota));
  // The fast path moves the budget only: the cpuset and the quota.
  in.budget_only = true;
  for (const auto& set : lever_writes(in, cfg))
    EXPECT_TRUE(knob_of(set.value) == Knob::Cpus || knob_of(set.value) == Knob::Quota) << set.cgroup;
}

// CPU burst: only on the online pods listed, those with a quota, as
// online.burst_share of it (at most the quota, the kernel's cap); no other
// lever touches them, and burst touches nothing offline.
TEST(LeverTable, BurstOnlyOnOnlinePodsWithAQuota) {
  Config cfg = default_config();
  cfg.cpuset.throttle = true;
  LeverInput in;
  in.targets = usual_targets();
  in.budget_cores = 1;
  in.node_cpus = 4;
  in.cpuset = in.quota = true;
  in.offline_cpus = CpuSet{2, 3};
  in.memory_budget = uint64_t{1} << 30;
  for (auto& t : in.targets) t.memory_known = true;
  const std::string pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod42.slice";
  auto online = [](const std::string& path, std::optional<uint64_t> quota) {
    OfflineTarget t;
    t.path = path;
    t.kind = TargetKind::OnlinePod;
    t.quota = CpuQuota{quota, 100000};
    return t;
  };
  auto w = lever_writes(in, cfg);
  for (const auto& s : w) EXPECT_NE(knob_of(s.value), Knob::Burst) << s.cgroup << ": no online pod listed";
  for (auto [l, on] : levers_in_force(in, cfg))
    if (l == Lever::Burst) {
      EXPECT_FALSE(on);
    }
  in.online = {online(pod, 20000), online(pod + "/cri-containerd-a.scope", 20000),
               online(pod + "/cri-containerd-b.scope", std::nullopt)};
  w = lever_writes(in, cfg);
  EXPECT_TRUE(has(w, pod, Knob::Burst, CpuBurst{10000})) << "half the 20 ms quota by default";
  EXPECT_TRUE(has(w, pod + "/cri-containerd-a.scope", Knob::Burst, CpuBurst{10000}));
  EXPECT_FALSE(touches(w, pod + "/cri-containerd-b.scope", Knob::Burst)) << "no quota: nothing throttles it";
  for (const auto& s : w) {
    const bool on_pod = s.cgroup.rfind(pod, 0) == 0;
    EXPECT_EQ(on_pod, knob_of(s.value) == Knob::Burst) << s.cgroup << " " << knob_name(knob_of(s.value));
  }
  for (auto [l, on] : levers_in_force(in, cfg))
    if (l == Lever::Burst) {
      EXPECT_TRUE(on);
    }
  cfg.online.burst_share = 1.0;
  EXPECT_TRUE(has(lever_writes(in, cfg), pod, Knob::Burst, CpuBurst{20000})) << "at most the quota";
  // Not on the fast path (it does not carry the budget), and off at 0.
  in.budget_only = true;
  EXPECT_FALSE(touches(lever_writes(in, cfg), pod, Knob::Burst));
  in.budget_only = false;
  cfg.online.burst_share = 0;
  EXPECT_FALSE(touches(lever_writes(in, cfg), pod, Knob::Burst));
}

TEST(LeverTable, QuotaSplitsTheBudgetByRecentUse) {
  LeverInput in;
  in.targets = usual_targets();
  in.targets[0].usage_cores = 3;  // the YARN root
  in.targets[1].usage_cores = 1;  // the QoS cgroup
  in.budget_cores = 2;
  in.node_cpus = 8;
  in.quota = true;
  auto w = lever_writes(in, default_config());
  EXPECT_TRUE(has(w, "/hadoop-yarn", Knob::Quota, CpuQuota{150000, 100000}));
  EXPECT_TRUE(has(w, kQos, Knob::Quota, CpuQuota{50000, 100000}));
  // The whole node: no limit.
  in.budget_cores = 8;
  in.targets.resize(1);
  EXPECT_TRUE(has(lever_writes(in, default_config()), "/hadoop-yarn", Knob::Quota, CpuQuota{std::nullopt, 100000}));
}

TEST(LeverTable, WeightWhereIdleIsOffAndTheSummarySaysWhatIsInForce) {
  Config cfg = default_config();
  cfg.offline.idle = false;
  cfg.offline.weight = 5;
  LeverInput in;
  in.targets = usual_targets();
  in.node_cpus = 2;
  auto w = lever_writes(in, cfg);
  EXPECT_TRUE(has(w, "/hadoop-yarn", Knob::Weight, CpuWeight{5}));
  EXPECT_FALSE(touches(w, kQos, Knob::Weight));
  EXPECT_FALSE(touches(w, kPod, Knob::Weight));
  for (auto [l, on] : levers_in_force(in, cfg)) EXPECT_EQ(on, l == Lever::Weight) << lever_name(l);
  EXPECT_EQ(levers_summary(cfg, true, true),
            "cpu.weight 5 on offline targets; offline memory limited to the memory budget (memory.high, memory.max "
            "backstop on YARN roots, memory.reclaim while online refaults); CPU burst 50% of the quota for "
            "self-throttled online pods; ladder [cpuset, quota] on a lasting breach");
  cfg.memory.oom_group = true;
  cfg.memory.reclaim = false;
  EXPECT_EQ(levers_summary(cfg, true, false),
            "cpu.weight 5 on offline targets; offline memory limited to the memory budget (memory.limit_in_bytes); "
            "memory.oom_group needs cgroup v2's memory controller: not written; CPU burst 50% of the quota for "
            "self-throttled online pods; ladder [cpuset, quota] on a lasting breach");
  cfg.memory.reclaim = true;
  EXPECT_NE(levers_summary(cfg, true, true)
                .find("(memory.high, memory.max backstop on YARN roots, memory.oom.group on YARN containers, "
                      "memory.reclaim while online refaults)"),
            std::string::npos);
  EXPECT_NE(levers_summary(cfg, true, false).find("(memory.limit_in_bytes, limit pulses while online refaults)"),
            std::string::npos);
  Config d = default_config();
  d.ladder.always = {Lever::Quota};
  d.cpuset.enabled = true;
  d.memory.enabled = false;
  d.online.burst_share = 0;
  EXPECT_EQ(levers_summary(d, false, true),
            "minimum weight (no cpu.idle in this kernel) on offline targets, cpuset and quota always; ladder "
            "[cpuset, quota] on a lasting breach");
  LadderState st;
  EXPECT_TRUE(rung_in_force(Lever::Quota, d, st));
  EXPECT_FALSE(rung_in_force(Lever::Quota, default_config(), st));
  st.active = {Lever::Quota};
  EXPECT_TRUE(rung_in_force(Lever::Quota, default_config(), st));
}

namespace {

LadderDecision tick(LadderState& st, const LadderConfig& cfg, uint64_t t, bool breach, double rate) {
  LadderInput in;
  in.now_ns = t;
  in.breach = breach;
  in.offline_wait_rate = rate;
  return ladder_step(in, cfg, st);
}

}  // namespace

TEST(Ladder, EscalatesAfterALastingBreachAndKeepsAStepThatHelped) {
  LadderConfig cfg;
  LadderState st;
  uint64_t t = 10 * kS;
  for (int i = 0; i < 5; i++, t += 200 * kMs) EXPECT_EQ(tick(st, cfg, t, true, 50e6).action, LadderAction::Hold);
  auto d = tick(st, cfg, t, true, 50e6);  // 1 s of breach
  EXPECT_EQ(d.action, LadderAction::Escalate);
  EXPECT_EQ(d.lever, Lever::Cpuset);
  EXPECT_TRUE(lever_on(st, Lever::Cpuset));
  EXPECT_FALSE(lever_on(st, Lever::Quota));
  EXPECT_NEAR(d.before_rate, 50e6, 1);
  // Verifying: no other step meanwhile, even in breach.
  for (t += 200 * kMs; t < 14 * kS; t += 200 * kMs) EXPECT_EQ(tick(st, cfg, t, false, 5e6).action, LadderAction::Hold);
  d = tick(st, cfg, t, false, 5e6);
  EXPECT_EQ(d.action, LadderAction::Kept);
  EXPECT_NEAR(d.after_rate, 5e6, 1);
  EXPECT_TRUE(lever_on(st, Lever::Cpuset));
}

TEST(Ladder, UndoesAStepThatDidNotHelpAndDoesNotRetryItSoon) {
  LadderConfig cfg;
  LadderState st;
  uint64_t t = 10 * kS;
  for (; t <= 11 * kS; t += 200 * kMs) tick(st, cfg, t, true, 40e6);
  ASSERT_TRUE(lever_on(st, Lever::Cpuset));
  LadderDecision d;
  for (; t <= 14 * kS + 400 * kMs; t += 200 * kMs) {
    d = tick(st, cfg, t, true, 45e6);  // worse, not better
    if (d.action == LadderAction::Undone) break;
  }
  ASSERT_EQ(d.action, LadderAction::Undone);
  EXPECT_EQ(d.lever, Lever::Cpuset);
  EXPECT_FALSE(lever_on(st, Lever::Cpuset));
  EXPECT_NE(d.reason.find("did not help"), std::string::npos) << d.reason;
  // Still in breach: the next rung is quota, cpuset is skipped while blocked.
  for (t += 200 * kMs; t <= 16 * kS; t += 200 * kMs) {
    d = tick(st, cfg, t, true, 45e6);
    if (d.action == LadderAction::Escalate) break;
  }
  ASSERT_EQ(d.action, LadderAction::Escalate);
  EXPECT_EQ(d.lever, Lever::Quota);
  EXPECT_NE(d.reason.find("skipped cpuset (did not help recently)"), std::string::npos) << d.reason;
  EXPECT_FALSE(lever_on(st, Lever::Cpuset));
  EXPECT_TRUE(lever_on(st, Lever::Quota));
}

TEST(Ladder, RelaxesOneRungAfterACalmPeriod) {
  LadderConfig cfg;
  cfg.rungs = {Lever::Quota};
  cfg.relax_after_ns = 10 * kS;
  LadderState st;
  uint64_t t = kS;
  for (; t <= 2 * kS; t += 200 * kMs) tick(st, cfg, t, true, 40e6);
  ASSERT_TRUE(lever_on(st, Lever::Quota));
  LadderDecision d;
  for (; t < 40 * kS && d.action != LadderAction::Relaxed; t += 200 * kMs) d = tick(st, cfg, t, false, 1e6);
  EXPECT_EQ(d.action, LadderAction::Relaxed);
  EXPECT_FALSE(lever_on(st, Lever::Quota));
  EXPECT_GE(t, 12 * kS);  // 3 s verify + 10 s calm after the last breach
}

TEST(Ladder, NoRungWithoutABreachAndNoCpusetWithoutACoreToSpare) {
  LadderConfig cfg;
  LadderState st;
  for (uint64_t t = kS; t < 20 * kS; t += 200 * kMs) EXPECT_EQ(tick(st, cfg, t, false, 0).action, LadderAction::Hold);
  LadderInput in;
  in.breach = true;
  in.can_cpuset = false;
  LadderDecision d;
  for (uint64_t t = 20 * kS; t <= 21 * kS; t += 200 * kMs) {
    in.now_ns = t;
    d = ladder_step(in, cfg, st);
  }
  EXPECT_EQ(d.action, LadderAction::Escalate);
  EXPECT_EQ(d.lever, Lever::Quota);
}
