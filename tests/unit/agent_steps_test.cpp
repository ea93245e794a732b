// The steps the agent's loop strings together, each a function of plain
// data: the fast path's batch, the controller's, ladder's and YARN's inputs,
// and the log lines and limiter the agent writes through.
#include <gtest/gtest.h>

#include "khagent/actuate/actuator.h"
#include "khagent/export/agent_log.h"
#include "khagent/policy/controller.h"
#include "khagent/policy/ladder.h"
#include "khagent/policy/yarn.h"
#include "khagent/signals/fast_events.h"
#include "khagent/util/log_limit.h"

using namespace khagent;

namespace {

kh_wait_event wait_event(uint64_t cg, uint64_t wait_ms, uint64_t aggressor, uint32_t cause, bool ongoing, uint64_t ts) {
  kh_wait_event e{};
  e.ts_ns = ts;
  e.cgroup_id = cg;
  e.wait_ns = wait_ms * 1'000'000;
  e.aggressor_id = aggressor;
  e.aggressor_ns = wait_ms * 500'000;
  e.cause = cause;
  e.cpu = 1;
  e.flags = ongoing ? KH_EVENT_ONGOING : 0;
  return e;
}

const Config& defaults() {
  static const Config c = default_config();
  return c;
}

}  // namespace

TEST(LogLimiter, OncePerPeriodPerKey) {
  LogLimiter l(10);
  EXPECT_TRUE(l.allow("a", 100));
  EXPECT_FALSE(l.allow("a", 105));
  EXPECT_TRUE(l.allow("b", 105)) << "another key has a period of its own";
  EXPECT_FALSE(l.allow("a", 109));
  EXPECT_TRUE(l.allow("a", 110));
  EXPECT_FALSE(l.allow("a", 119)) << "the period starts again from the line let through";
}

TEST(FastBatch, ClassifiesAggressorsAndFindsTheLongestOngoingWait) {
  Classifier k(defaults().classes, "hadoop-yarn");
  const uint64_t yarn = 7, online = 8;
  k.get(yarn, "/hadoop-yarn/container_1");
  k.get(online,
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_0000_4a4a_9f9f_"
        "123456789abc.slice");
  std::vector<kh_wait_event> ev = {wait_event(online, 3, yarn, KH_WAIT_OTHER_CGROUP, false, 500),
                                   wait_event(online, 9, yarn, KH_WAIT_OTHER_CGROUP, true, 300),
                                   wait_event(online, 5, 0, KH_WAIT_THROTTLED, true, 400)};
  FastBatch b = fast_batch(ev, k);
  ASSERT_EQ(b.events.size(), 3u);
  EXPECT_TRUE(b.events[0].aggressor_offline);
  EXPECT_FALSE(b.events[0].ongoing);
  EXPECT_TRUE(b.events[2].throttled);
  EXPECT_FALSE(b.events[2].aggressor_offline) << "no aggressor is not an offline one";
  EXPECT_EQ(b.first_ts_ns, 300u);
  EXPECT_EQ(b.ongoing, 2u);
  ASSERT_TRUE(b.longest);
  EXPECT_EQ(b.longest->wait_ns, 9'000'000u);

  FastBatch none = fast_batch({}, k);
  EXPECT_TRUE(none.events.empty());
  EXPECT_FALSE(none.longest);
}

TEST(AgentLog, OngoingWaitLineNamesWhoHoldsTheCpu) {
  auto name = [](uint64_t id) { return id == 7 ? std::string("/hadoop-yarn/c1") : "/online/" + std::to_string(id); };
  std::string l = describe_ongoing_waits(wait_event(8, 12, 7, KH_WAIT_OTHER_CGROUP, true, 1), 3, name);
  EXPECT_NE(l.find("3 protected waits still going on"), std::string::npos) << l;
  EXPECT_NE(l.find("/online/8 waiting 12.0 ms on CPU 1"), std::string::npos) << l;
  EXPECT_NE(l.find("/hadoop-yarn/c1 on the CPU for 6.0 ms"), std::string::npos) << l;
  std::string t = describe_ongoing_waits(wait_event(8, 2, 0, KH_WAIT_THROTTLED, true, 1), 1, name);
  EXPECT_NE(t.find("1 protected wait still"), std::string::npos) << t;
  EXPECT_NE(t.find("its cgroup throttled"), std::string::npos) << t;
}

TEST(AgentLog, BudgetLineAndReactionSummary) {
  Decision d;
  d.budget_cores = 1.5;
  d.action = BudgetAction::Decrease;
  d.reason = "breach";
  ControllerInput in;
  in.online_cpu_cores = 0.25;
  in.offline_cpu_cores = 1.75;
  OfflineTarget t;
  t.path = "/hadoop-yarn";
  t.kind = TargetKind::YarnRoot;
  std::string l = budget_line(d, in, {t});
  EXPECT_NE(l.find("budget 1.50 cores"), std::string::npos) << l;
  EXPECT_NE(l.find("online 0.25 cores, offline 1.75 cores"), std::string::npos) << l;
  EXPECT_NE(l.find("targets [/hadoop-yarn ("), std::string::npos) << l;

  ReactionTimes r;
  EXPECT_EQ(r.summary(), "");
  r.add(2);
  r.add(4);
  EXPECT_NE(r.summary().find("2 reactions, mean 3.00 ms, max 4.00 ms"), std::string::npos) << r.summary();
}

TEST(AgentSteps, BudgetWrittenCountsOnlyBudgetFilesThatChanged) {
  ActionRecord idle{"/y", CgroupFile::CpuIdle, "0", "1", ActionOutcome::Written, "", false};
  ActionRecord quota{"/y", CgroupFile::CpuMax, "max 100000", "50000 100000", ActionOutcome::Written, "", false};
  ActionRecord same = quota;
  same.outcome = ActionOutcome::Unchanged;
  ActionRecord dry = quota;
  dry.outcome = ActionOutcome::DryRun;
  ActionRecord dry_again = dry;
  dry_again.repeat = true;
  EXPECT_FALSE(budget_written({idle}));
  EXPECT_TRUE(budget_written({idle, quota}));
  EXPECT_FALSE(budget_written({same}));
  EXPECT_TRUE(budget_written({dry}));
  EXPECT_FALSE(budget_written({dry_again}));
}

TEST(AgentSteps, LadderInputSeesBreachesAndTheRateBehindOffline) {
  Decision d;
  ControllerInput in;
  in.now_ns = 42;
  OnlinePodLoad a, b;
  a.offline_wait_ns = 30'000'000;
  b.offline_wait_ns = 20'000'000;
  in.online_pods = {a, b};
  LadderInput li = ladder_input(d, in, 0, 500'000'000, true);
  EXPECT_EQ(li.now_ns, 42u);
  EXPECT_FALSE(li.breach);
  EXPECT_DOUBLE_EQ(li.offline_wait_rate, 100'000'000.0) << "50 ms behind offline in a 0.5 s tick";
  EXPECT_DOUBLE_EQ(li.stolen_wait_rate, 0.0);
  in.online_pods[0].stolen_wait_ns = 5'000'000;  // through CPU stalls: not behind offline
  EXPECT_DOUBLE_EQ(ladder_input(d, in, 0, 500'000'000, true).offline_wait_rate, 100'000'000.0);
  EXPECT_DOUBLE_EQ(ladder_input(d, in, 0, 500'000'000, true).stolen_wait_rate, 10'000'000.0);
  EXPECT_TRUE(li.can_cpuset);
  EXPECT_TRUE(ladder_input(d, in, 2, 500'000'000, false).breach) << "fast-path breaches since the last tick";
  d.verdicts.push_back({"u", "/p", PodVerdictKind::SelfThrottled, 9000, 0, 1, ""});
  EXPECT_FALSE(ladder_input(d, in, 0, 500'000'000, true).breach) << "its own quota is no breach";
  d.verdicts.push_back({"v", "/q", PodVerdictKind::Breach, 9000, 1, 0, ""});
  EXPECT_TRUE(ladder_input(d, in, 0, 500'000'000, true).breach);
}

TEST(AgentSteps, YarnOfferCarriesBudgetEmergencyAndContainers) {
  Config cfg = default_config();
  Decision d;
  d.budget_cores = 0.5;
  NodeSignals node;
  YarnContainerSignals c;
  c.container = "container_1_0001_01_000002";
  c.path = "/hadoop-yarn/container_1_0001_01_000002";
  c.online_wait_caused_ns_total = 77;
  YarnContainerSignals unnamed;
  unnamed.path = "/hadoop-yarn/other";
  node.yarn = {c, unnamed};
  const double over = cfg.yarn.emergency_p99_factor * cfg.online.wait_p99_target_us;
  d.verdicts.push_back({"u", "/p", PodVerdictKind::Breach, over * 0.9, 1, 0, ""});
  YarnOffer o = yarn_offer(d, node, cfg, 5);
  EXPECT_EQ(o.now_ns, 5u);
  EXPECT_DOUBLE_EQ(o.budget_cores, 0.5);
  EXPECT_FALSE(o.emergency);
  ASSERT_EQ(o.containers.size(), 1u) << "a cgroup with no container id is no container";
  EXPECT_EQ(o.containers.at(c.container).caused_total_ns, 77u);
  d.verdicts.push_back({"v", "/q", PodVerdictKind::SelfThrottled, over * 2, 0, 1, ""});
  EXPECT_FALSE(yarn_offer(d, node, cfg, 5).emergency) << "a pod throttled by its own quota is no emergency";
  d.verdicts.push_back({"w", "/r", PodVerdictKind::Breach, over * 1.1, 1, 0, ""});
  EXPECT_TRUE(yarn_offer(d, node, cfg, 5).emergency);
}

TEST(AgentSteps, ControllerInputFromTheRollup) {
  NodeSignals node;
  node.classes[static_cast<size_t>(CgroupClass::Online)].cpu_cores = 0.75;
  node.classes[static_cast<size_t>(CgroupClass::Offline)].cpu_cores = 1.25;
  ControllerInput in = controller_input(node, 2, 9);
  EXPECT_EQ(in.now_ns, 9u);
  EXPECT_DOUBLE_EQ(in.node_cpus, 2);
  EXPECT_DOUBLE_EQ(in.online_cpu_cores, 0.75);
  EXPECT_DOUBLE_EQ(in.offline_cpu_cores, 1.25);
  EXPECT_TRUE(in.online_pods.empty());
}
