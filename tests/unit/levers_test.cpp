// Where each lever is written, and the ladder above cpu.idle.
#include <gtest/gtest.h>

#include <algorithm>

#include "khagent/policy/levers.h"

using namespace khagent;

namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kS = 1'000'000'000;

bool has(const std::vector<DesiredValue>& w, const std::string& cg, CgroupFile f, const std::string& v = "") {
  return std::any_of(w.begin(), w.end(), [&](const DesiredValue& d) {
    return d.cgroup == cg && d.file == f && (v.empty() || d.value == v);
  });
}

bool touches(const std::vector<DesiredValue>& w, const std::string& cg, CgroupFile f) { return has(w, cg, f); }

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
  auto w = offline_writes(in, default_config());
  EXPECT_TRUE(has(w, "/hadoop-yarn", CgroupFile::CpuIdle, "1"));
  EXPECT_TRUE(has(w, kPod, CgroupFile::CpuIdle, "1"));
  EXPECT_FALSE(touches(w, kQos, CgroupFile::CpuIdle));
  EXPECT_FALSE(touches(w, kQos, CgroupFile::CpuWeight));
  // The base lever writes no quota and no cpuset.
  for (const auto& d : w) EXPECT_TRUE(d.file == CgroupFile::CpuIdle) << d.cgroup << " " << cgroup_file_name(d.file);
}

TEST(Levers, WithoutCpuIdleTheMinimumWeightWhereKhagentOwnsIt) {
  LeverInput in;
  in.targets = usual_targets();
  in.idle_supported = false;
  in.node_cpus = 2;
  auto w = offline_writes(in, default_config());
  EXPECT_TRUE(has(w, "/hadoop-yarn", CgroupFile::CpuWeight, "1"));
  EXPECT_FALSE(touches(w, kQos, CgroupFile::CpuWeight));
  EXPECT_FALSE(touches(w, kPod, CgroupFile::CpuWeight));
  EXPECT_FALSE(touches(w, "/hadoop-yarn", CgroupFile::CpuIdle));
}

TEST(Levers, QuotaOnlyOnTheQuotaRungAndOnlyOverIdleWork) {
  Config cfg = default_config();
  LeverInput in;
  in.targets = usual_targets();
  in.budget_cores = 0.4;
  in.node_cpus = 2;
  in.quota = true;
  auto w = offline_writes(in, cfg);
  EXPECT_TRUE(has(w, "/hadoop-yarn", CgroupFile::CpuMax));
  EXPECT_TRUE(has(w, kQos, CgroupFile::CpuMax));       // its pods are idle
  EXPECT_FALSE(touches(w, kPod, CgroupFile::CpuMax));  // the kubelet owns pod quotas
  // No cpu.idle configured where the kernel has it: no quota either.
  cfg.offline.idle = false;
  w = offline_writes(in, cfg);
  for (const auto& d : w) EXPECT_NE(d.file, CgroupFile::CpuMax) << d.cgroup;
  // A kernel without cpu.idle: the quota is all there is.
  in.idle_supported = false;
  EXPECT_TRUE(has(offline_writes(in, cfg), "/hadoop-yarn", CgroupFile::CpuMax));
}

TEST(Levers, CpusetRungPartitionsParentsWithoutAQuota) {
  LeverInput in;
  in.targets = usual_targets();
  in.budget_cores = 1;
  in.node_cpus = 2;
  in.cpuset = true;
  in.offline_cpus = "1";
  auto w = offline_writes(in, default_config());
  EXPECT_TRUE(has(w, "/hadoop-yarn", CgroupFile::CpusetCpus, "1"));
  EXPECT_TRUE(has(w, kQos, CgroupFile::CpusetCpus, "1"));
  EXPECT_FALSE(touches(w, kPod, CgroupFile::CpusetCpus));
  EXPECT_FALSE(touches(w, "/hadoop-yarn", CgroupFile::CpuMax));
  Config thr = default_config();
  thr.cpuset.throttle = true;
  EXPECT_TRUE(has(offline_writes(in, thr), "/hadoop-yarn", CgroupFile::CpuMax));
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
  EXPECT_EQ(d.lever, "cpuset");
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
  EXPECT_EQ(d.lever, "cpuset");
  EXPECT_FALSE(lever_on(st, Lever::Cpuset));
  EXPECT_NE(d.reason.find("did not help"), std::string::npos) << d.reason;
  // Still in breach: the next rung is quota, cpuset is skipped while blocked.
  for (t += 200 * kMs; t <= 16 * kS; t += 200 * kMs) {
    d = tick(st, cfg, t, true, 45e6);
    if (d.action == LadderAction::Escalate) break;
  }
  ASSERT_EQ(d.action, LadderAction::Escalate);
  EXPECT_EQ(d.lever, "quota");
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
  EXPECT_EQ(d.lever, "quota");
}
