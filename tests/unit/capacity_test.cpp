// The capacity split and the publishing rule (policy/capacity), and the
// node status patch (actuate/kube_node_status).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

#include "khagent/actuate/kube_node_status.h"
#include "khagent/policy/capacity.h"

namespace khagent {
namespace {

constexpr uint64_t kS = 1'000'000'000;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

YarnOffer offer(double cores, std::optional<uint64_t> memory, uint64_t now_ns = 0, bool breach = false) {
  YarnOffer o;
  o.now_ns = now_ns;
  o.budget_cores = cores;
  o.memory_budget_bytes = memory;
  o.online_breach = breach;
  return o;
}

TEST(CapacitySplit, FixedShareSumsToTheBudget) {
  CapacityConfig c;
  c.batch_share = 0.25;
  auto s = split_budget(offer(8, 16 * kGiB), {}, true, c);
  EXPECT_DOUBLE_EQ(s.batch_cores, 2.0);
  EXPECT_DOUBLE_EQ(s.yarn_cores, 6.0);
  EXPECT_EQ(*s.batch_memory, 4 * kGiB);
  EXPECT_EQ(*s.yarn_memory, 12 * kGiB);
  EXPECT_FALSE(s.cpu_floored);
}

TEST(CapacitySplit, WithoutYarnBatchGetsTheWholeBudget) {
  CapacityConfig c;
  c.batch_share = 0.25;
  auto s = split_budget(offer(3, std::nullopt), {}, false, c);
  EXPECT_DOUBLE_EQ(s.batch_cores, 3.0);
  EXPECT_DOUBLE_EQ(s.yarn_cores, 0.0);
  EXPECT_FALSE(s.batch_memory.has_value());
}

TEST(CapacitySplit, FloorWhileOnlineIsWithinItsTargetOnly) {
  CapacityConfig c;
  c.batch_share = 0.1;
  c.floor_cores = 0.5;
  c.floor_memory_bytes = 512 * kMiB;
  auto s = split_budget(offer(2, kGiB), {}, true, c);
  EXPECT_DOUBLE_EQ(s.batch_cores, 0.5);  // 10% would be 0.2
  EXPECT_TRUE(s.cpu_floored);
  EXPECT_DOUBLE_EQ(s.yarn_cores, 1.5);
  EXPECT_EQ(*s.batch_memory, 512 * kMiB);
  // A budget under the floor: all of it, never more.
  s = split_budget(offer(0.3, 100 * kMiB), {}, true, c);
  EXPECT_DOUBLE_EQ(s.batch_cores, 0.3);
  EXPECT_DOUBLE_EQ(s.yarn_cores, 0.0);
  EXPECT_EQ(*s.batch_memory, 100 * kMiB);
  // Online over its target: the share, no floor.
  s = split_budget(offer(2, kGiB, 0, true), {}, true, c);
  EXPECT_NEAR(s.batch_cores, 0.2, 1e-9);
  EXPECT_FALSE(s.cpu_floored);
}

TEST(CapacitySplit, UsageRuleFollowsEachSideWithinMinShare) {
  CapacityConfig c;
  c.split = CapacitySplitRule::Usage;
  c.min_share = 0.2;
  c.floor_cores = 0;
  auto s = split_budget(offer(10, std::nullopt), {3, 1}, true, c);
  EXPECT_NEAR(s.batch_share, 0.25, 1e-9);
  EXPECT_NEAR(s.batch_cores, 2.5, 1e-9);
  s = split_budget(offer(10, std::nullopt), {10, 0}, true, c);
  EXPECT_NEAR(s.batch_share, 0.2, 1e-9);  // batch keeps its minimum
  s = split_budget(offer(10, std::nullopt), {0, 0}, true, c);
  EXPECT_NEAR(s.batch_share, c.batch_share, 1e-9);
}

TEST(CapacityPublish, HysteresisShrinksAtOnceAndGrowsWhenStable) {
  CapacityConfig c;
  c.deadband = 0.2;
  c.grow_stable_ns = 30 * kS;
  c.grow_interval_ns = 60 * kS;
  PublishState st;
  auto step = [&](uint64_t t, int64_t cpu) {
    PublishInput in;
    in.now_ns = t;
    in.target = {cpu, -1};
    in.most = {100000, -1};
    return publish_step(in, c, st);
  };
  auto d = step(1 * kS, 4000);
  EXPECT_EQ(d.cpu, PublishAction::First);
  EXPECT_TRUE(d.patch);
  d = step(2 * kS, 3500);  // -12.5%: within the deadband
  EXPECT_EQ(d.cpu, PublishAction::Hold);
  EXPECT_FALSE(d.patch);
  EXPECT_EQ(d.value.cpu_milli, 4000);
  d = step(3 * kS, 3000);  // -25%: at once
  EXPECT_EQ(d.cpu, PublishAction::Shrink);
  EXPECT_EQ(d.value.cpu_milli, 3000);
  d = step(4 * kS, 4000);  // +33%
  EXPECT_EQ(d.cpu, PublishAction::WaitStable);
  d = step(20 * kS, 3800);
  EXPECT_EQ(d.cpu, PublishAction::WaitStable);
  d = step(34 * kS, 4200);
  EXPECT_EQ(d.cpu, PublishAction::Grow);
  EXPECT_EQ(d.value.cpu_milli, 3800);  // the lowest seen meanwhile
  d = step(35 * kS, 3200);             // -15.8%
  EXPECT_EQ(d.cpu, PublishAction::Hold);
  d = step(36 * kS, 2000);
  EXPECT_EQ(d.cpu, PublishAction::Shrink);
  for (uint64_t t = 37; t <= 80; t++) d = step(t * kS, 3000);
  EXPECT_EQ(d.cpu, PublishAction::WaitInterval);  // stable since 37 s, but the last grow was at 34 s
  d = step(95 * kS, 3000);
  EXPECT_EQ(d.cpu, PublishAction::Grow);
}

TEST(CapacityPublish, ValueAboveTheWholeBudgetShrinksAtOnce) {
  CapacityConfig c;
  PublishState st;
  PublishInput in;
  in.target = {3000, -1};
  in.most = {3000, -1};
  ASSERT_TRUE(publish_step(in, c, st).patch);
  in.target = {2800, -1};  // within the deadband, but above the budget
  in.most = {2800, -1};
  auto d = publish_step(in, c, st);
  EXPECT_EQ(d.cpu, PublishAction::Shrink);
  EXPECT_EQ(d.value.cpu_milli, 2800);
}

TEST(CapacityPublish, ReassertsWhatTheNodeLostAndHoldsWhenStaleOrUnknown) {
  CapacityConfig c;
  PublishState st;
  PublishInput in;
  in.target = {2000, int64_t{2} << 30};
  in.most = {8000, int64_t{8} << 30};
  ASSERT_TRUE(publish_step(in, c, st).patch);
  in.on_node = BatchQuantity{0, int64_t{2} << 30};  // the kubelet zeroed the CPU
  auto d = publish_step(in, c, st);
  EXPECT_TRUE(d.patch);
  EXPECT_EQ(d.cpu, PublishAction::Reassert);
  EXPECT_EQ(d.memory, PublishAction::Hold);
  EXPECT_EQ(d.value, (BatchQuantity{2000, int64_t{2} << 30}));
  in.on_node.reset();
  in.stale = true;
  in.target = {500, 0};
  d = publish_step(in, c, st);
  EXPECT_FALSE(d.patch);
  EXPECT_EQ(d.cpu, PublishAction::Stale);
  EXPECT_EQ(d.value.cpu_milli, 2000);
  in.stale = false;
  in.target = {2000, -1};  // the memory budget is gone
  d = publish_step(in, c, st);
  EXPECT_FALSE(d.patch);
  EXPECT_EQ(d.memory, PublishAction::Unknown);
  EXPECT_EQ(d.value.memory_bytes, int64_t{2} << 30);
}

TEST(CapacityPublish, ExplanationNamesEveryTerm) {
  CapacityConfig c;
  YarnOffer o = offer(3, 2 * kGiB);
  o.cpu_terms = BudgetTerms{8, 3.5, 1, 0.5, 3};
  o.memory_terms = BudgetTerms{double(16 * kGiB), double(12 * kGiB), double(2 * kGiB), 0, double(2 * kGiB)};
  CapacityPlanner p(c, true);
  auto plan = p.plan(o, {}, 0);
  EXPECT_EQ(plan.explanation,
            "batch-cpu 1500m: capacity 8.00 - online 3.50 - reserve 1.00 - margin 0.50 = budget 3.00 cores, batch "
            "50% = 1.50 (yarn 1.50); batch-memory 1024Mi: capacity 16384 - online 12288 - reserve 2048 - margin 0 = "
            "budget 2048 MiB, batch 50% = 1024 (yarn 1024)");
}

// A synthetic day of online load over 10,000 one-second ticks: noise of
// +-15% around a level, a high-priority pod that lands with no usage and
// ramps up later, surges, and a stretch where the metric goes stale. The
// budget follows the CPU controller's ceiling (node - online - reserve) and
// the memory one. Every tick YARN's offer plus what the node holds for
// batch stay within the budget.
TEST(CapacityReplay, NeverOverTheBudgetAndFewPatchesUnderNoise) {
  CapacityConfig c;  // defaults: share 0.5, deadband 0.2, grow 30 s stable / 60 s apart
  CapacityPlanner planner(c, true);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> noise(-0.15, 0.15);
  const double node = 16, reserve = 1;
  const double node_mem = 64.0 * kGiB, mem_reserve = 2.0 * kGiB;
  int over = 0, patches = 0, patches_noise = 0, surge_ticks = -1;
  uint64_t last_offer_ns = 0;
  int64_t published_before_surge = 0;
  for (int t = 0; t < 10000; t++) {
    const uint64_t now = static_cast<uint64_t>(t) * kS;
    double online = 6.0;
    if (t >= 3000 && t < 3600) online = 6.0;  // a high-priority pod scheduled, no usage yet: nothing moves
    if (t >= 3600 && t < 5000) online = 6.0 + 4.0 * std::min(1.0, (t - 3600) / 60.0);  // it ramps up
    if (t >= 5000 && t < 5005) online = 13.0;                                          // a surge
    online *= 1.0 + noise(rng);
    const double budget = std::max(0.5, node - online - reserve);
    const double mem_online = (0.4 + 0.1 * (t >= 3600)) * node_mem * (1.0 + noise(rng) / 3);
    const auto mem_budget = static_cast<uint64_t>(std::max(0.0, node_mem - mem_online - mem_reserve));
    // 7000-7030: the control loop stops deciding (a stale metric): the offer is not renewed.
    if (t < 7000 || t >= 7030) last_offer_ns = now;
    YarnOffer o = offer(budget, mem_budget, last_offer_ns);
    auto plan = planner.plan(o, {}, now);
    const double held_cores = static_cast<double>(plan.publish.value.cpu_milli) / 1000.0;
    const double held_mem = static_cast<double>(plan.publish.value.memory_bytes);
    if (plan.yarn.budget_cores + held_cores > o.budget_cores + 1e-9) over++;
    if (static_cast<double>(*plan.yarn.memory_budget_bytes) + held_mem > static_cast<double>(mem_budget)) over++;
    if (plan.publish.patch) {
      patches++;
      if (t >= 600 && t < 3600) patches_noise++;
    }
    if (t == 4999) published_before_surge = plan.publish.value.cpu_milli;
    if (t >= 5000 && surge_ticks < 0 && plan.publish.value.cpu_milli < published_before_surge * 0.8)
      surge_ticks = t - 5000;
    if (t >= 7011 && t < 7030) {  // stale_after is 10 s
      EXPECT_EQ(plan.publish.cpu, PublishAction::Stale) << t;
      EXPECT_FALSE(plan.publish.patch) << t;
    }
  }
  std::printf(
      "replay: %d ticks over the budget, %d patches in 10000 s, %d in the 50 min of noise alone, "
      "surge published after %d s\n",
      over, patches, patches_noise, surge_ticks);
  EXPECT_EQ(over, 0);
  EXPECT_LE(patches_noise, 50);  // at most one per 60 s
  ASSERT_GE(surge_ticks, 0);
  EXPECT_LE(surge_ticks, 10);
}

TEST(KubeNodeStatus, QuantitiesInTheApiServersCanonicalForm) {
  EXPECT_EQ(whole_quantity("1500"), 1500);
  EXPECT_EQ(whole_quantity("1k"), 1000);  // "1000" comes back so
  EXPECT_EQ(whole_quantity("1.5k"), 1500);
  EXPECT_EQ(whole_quantity("6Gi"), int64_t{6} << 30);
  EXPECT_EQ(whole_quantity("3072Mi"), int64_t{3} << 30);
  EXPECT_EQ(whole_quantity("2000m"), 2);
  EXPECT_EQ(whole_quantity("0"), 0);
  EXPECT_EQ(whole_quantity("1500m"), -1);  // not whole
  EXPECT_EQ(whole_quantity("0.5"), -1);
  EXPECT_EQ(whole_quantity("-1"), -1);
  EXPECT_EQ(whole_quantity("1e3"), -1);
  EXPECT_EQ(whole_quantity("12Ei"), -1);  // over int64
  EXPECT_EQ(whole_quantity(""), -1);
  EXPECT_EQ(whole_quantity("k"), -1);
}

TEST(KubeNodeStatus, ParsesAndPatchesTheBatchResources) {
  const std::string node = R"({"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","annotations":{"a":"b"}},
    "status":{"capacity":{"cpu":"8","kubernetes.io/batch-cpu":"1500"},
              "allocatable":{"cpu":"8","kubernetes.io/batch-cpu":"1500","kubernetes.io/batch-memory":"1073741824"}}})";
  auto v = parse_node_batch(node);
  ASSERT_TRUE(v) << v.error().str();
  EXPECT_EQ(v->shown.cpu_milli, 1500);
  EXPECT_EQ(v->shown.memory_bytes, -1);  // missing from capacity
  EXPECT_TRUE(v->has_capacity && v->has_allocatable && v->has_annotations);
  auto ops = nlohmann::json::parse(batch_patch(*v, {2000, 1 << 30}, "why"));
  ASSERT_EQ(ops.size(), 5u);
  EXPECT_EQ(ops[0]["path"], "/status/capacity/kubernetes.io~1batch-cpu");
  EXPECT_EQ(ops[0]["value"], "2000");
  EXPECT_EQ(ops[1]["path"], "/status/capacity/kubernetes.io~1batch-memory");
  EXPECT_EQ(ops[4]["path"], "/metadata/annotations/khagent.io~1batch-explanation");
  // A node without the maps gets them whole; memory < 0 is left alone.
  auto bare = parse_node_batch(R"({"kind":"Node","metadata":{"name":"n1"}})");
  ASSERT_TRUE(bare);
  ops = nlohmann::json::parse(batch_patch(*bare, {2000, -1}, "why"));
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0]["path"], "/status/capacity");
  EXPECT_EQ(ops[0]["value"], nlohmann::json({{"kubernetes.io/batch-cpu", "2000"}}));
  EXPECT_EQ(ops[2]["value"], nlohmann::json({{"khagent.io/batch-explanation", "why"}}));
  EXPECT_FALSE(parse_node_batch(R"({"kind":"Pod","metadata":{}})"));
  EXPECT_FALSE(parse_node_batch(R"({"kind":{"name":"bare"}})"));  // found by the fuzzer: threw
  EXPECT_FALSE(parse_node_batch(R"({"kind":"Node","metadata":[]})"));
  EXPECT_FALSE(parse_node_batch("[1]"));
  EXPECT_FALSE(parse_node_batch("not json"));
  // A value we did not write ("1.5k", "1500m") counts as not shown.
  auto odd = parse_node_batch(
      R"({"kind":"Node","metadata":{},"status":{"capacity":{"kubernetes.io/batch-cpu":"1500m"},
          "allocatable":{"kubernetes.io/batch-cpu":"1500m"}}})");
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->shown.cpu_milli, -1);
}

}  // namespace
}  // namespace khagent

namespace khagent {
namespace {

TEST(CapacityConfigCheck, RefusesImpossibleValuesNamingTheKey) {
  auto bad = [](auto change) {
    Config c = default_config();
    change(c.capacity);
    auto r = validate_config(c);
    return r ? std::string() : r.error().message;
  };
  EXPECT_EQ(bad([](CapacityConfig&) {}), "");
  EXPECT_NE(bad([](CapacityConfig& k) { k.batch_share = 1.5; }).find("capacity.batch_share"), std::string::npos);
  EXPECT_NE(bad([](CapacityConfig& k) { k.api_server = "http://x:80"; }).find("capacity.api_server"),
            std::string::npos);
  EXPECT_NE(bad([](CapacityConfig& k) { k.deadband = 0; }).find("capacity.deadband"), std::string::npos);
  EXPECT_NE(bad([](CapacityConfig& k) { k.min_share = 0.7; }).find("capacity.min_share"), std::string::npos);
  EXPECT_NE(bad([](CapacityConfig& k) {
              k.enabled = true;
              k.stale_after_ns = 1;
            }).find("capacity.stale_after"),
            std::string::npos);
}

}  // namespace
}  // namespace khagent

#include "khagent/export/status_report.h"

namespace khagent {
namespace {

TEST(CapacityStatusReport, RoundTripsAndShowsWhatTheNodeHas) {
  StatusCapacity c;
  c.time = 1000;
  c.node = "n1";
  c.cpu_milli = 1500;
  c.memory_bytes = int64_t{1} << 30;
  c.on_node_cpu_milli = 0;
  c.on_node_memory_bytes = int64_t{1} << 30;
  c.explanation = "batch-cpu 1500m: budget 3.00 cores";
  c.patches_ok = 3;
  c.reasserts = 1;
  c.last_error = "PATCH node n1 status: HTTP 403";
  auto p = parse_capacity_report("/x", capacity_report_text(c), 1010);
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(p.age_s, 10);
  EXPECT_EQ(p.cpu_milli, 1500);
  EXPECT_EQ(p.on_node_cpu_milli, 0);
  StatusReport r;
  r.capacity = p;
  const std::string text = format_status(r);
  EXPECT_NE(text.find("node n1"), std::string::npos) << text;
  EXPECT_NE(text.find("batch-cpu 1500m, batch-memory 1024Mi"), std::string::npos) << text;
  EXPECT_NE(text.find("the node shows batch-cpu 0m"), std::string::npos) << text;
  EXPECT_NE(text.find("3 ok, 0 failed, 1 re-asserted; last error: PATCH node n1 status: HTTP 403"), std::string::npos)
      << text;
  EXPECT_NE(status_json(r).find("\"batch_cpu_milli\":1500"), std::string::npos);
  EXPECT_NE(parse_capacity_report("/x", "{}", 0).error, "");
}

}  // namespace
}  // namespace khagent
