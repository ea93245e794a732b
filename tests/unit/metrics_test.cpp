#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "khagent/actuate/actuator.h"
#include "khagent/collect/sample.h"
#include "khagent/export/metrics.h"
#include "khagent/loader/runq_loader.h"
#include "khagent/model/histogram.h"
#include "khagent/policy/controller.h"
#include "khagent/policy/memory.h"
#include "khagent/signals/workload.h"
#include "khagent/version.h"

using namespace khagent;

namespace {

using LabelMap = std::map<std::string, std::string>;

// One sample line of the text exposition: name{labels} value.
struct Line {
  std::string name;
  LabelMap labels;
  double value = 0;
};

std::vector<Line> parse(const std::string& text) {
  std::vector<Line> out;
  std::istringstream in(text);
  std::string s;
  while (std::getline(in, s)) {
    if (s.empty() || s[0] == '#') continue;
    Line l;
    auto brace = s.find('{');
    auto space = s.rfind(' ');
    if (brace != std::string::npos && brace < space) {
      l.name = s.substr(0, brace);
      auto end = s.find('}', brace);
      std::string body = s.substr(brace + 1, end - brace - 1);
      size_t pos = 0;
      while (pos < body.size()) {
        auto eq = body.find('=', pos);
        auto q2 = body.find('"', eq + 2);
        l.labels[body.substr(pos, eq - pos)] = body.substr(eq + 2, q2 - eq - 2);
        pos = q2 + 2;  // past '",'
      }
    } else {
      l.name = s.substr(0, space);
    }
    l.value = std::stod(s.substr(space + 1));
    out.push_back(l);
  }
  return out;
}

bool same_labels(const LabelMap& have, const LabelMap& want) {
  if (have.size() != want.size()) return false;
  for (const auto& [k, v] : want) {
    auto it = have.find(k);
    if (it == have.end()) return false;
    if (k == "le") {  // bounds compare as numbers: "0.002" == "2e-03"
      if (std::stod(it->second) != std::stod(v)) return false;
    } else if (it->second != v) {
      return false;
    }
  }
  return true;
}

std::optional<double> value(const std::string& text, const std::string& name, const LabelMap& labels = {}) {
  for (const auto& l : parse(text))
    if (l.name == name && same_labels(l.labels, labels)) return l.value;
  return std::nullopt;
}

// Number of sample lines of `name` whose labels include `label`=`v`.
size_t count_with(const std::string& text, const std::string& name, const std::string& label, const std::string& v) {
  size_t n = 0;
  for (const auto& l : parse(text)) {
    auto it = l.labels.find(label);
    if (l.name == name && it != l.labels.end() && it->second == v) n++;
  }
  return n;
}

constexpr size_t kOn = static_cast<size_t>(CgroupClass::Online);
constexpr size_t kOff = static_cast<size_t>(CgroupClass::Offline);
constexpr size_t kSys = static_cast<size_t>(CgroupClass::System);

void add_waits(CgroupCounters& c, uint64_t ns, uint64_t n) {
  c.hist[hist_bucket(ns)] += n;
  c.waits += n;
  c.wait_ns += ns * n;
}

PodSignals pod(const std::string& uid, uint64_t wait_ns, CgroupClass cls = CgroupClass::Online) {
  PodSignals p;
  p.uid = uid;
  p.cls = cls;
  if (wait_ns) add_waits(p.interval, wait_ns, 1);
  return p;
}

YarnContainerSignals container(const std::string& name, uint64_t caused_ns) {
  YarnContainerSignals y;
  y.container = name;
  y.path = "/hadoop-yarn/" + name;
  y.online_wait_caused_ns = caused_ns;
  return y;
}

MetricsOptions local() {
  MetricsOptions o;
  o.address = "127.0.0.1";
  o.port = 0;
  return o;
}

httplib::Result get(int port, const std::string& path) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(2);
  cli.set_read_timeout(2);
  return cli.Get(path);
}

}  // namespace

TEST(MetricsHistogram, EachKernelBucketGoesToTheSmallestBoundAboveIt) {
  const auto& bounds = runq_wait_bounds();
  ASSERT_FALSE(bounds.empty());
  for (uint32_t b = 0; b < KH_HIST_BUCKETS; b++) {
    WaitHistogram h{};
    h[b] = 1;
    auto fixed = runq_wait_buckets(h);
    ASSERT_EQ(fixed.size(), bounds.size() + 1);
    size_t i = 0;
    while (i < fixed.size() && fixed[i] == 0) i++;
    ASSERT_LT(i, fixed.size());
    double high = static_cast<double>(hist_bucket_high(b)) / 1e9;
    if (i < bounds.size()) {
      EXPECT_GE(bounds[i], high) << "kernel bucket " << b;
    }
    if (i > 0) {
      EXPECT_LT(bounds[i - 1], high) << "kernel bucket " << b;
    }
  }
}

TEST(MetricsHistogram, ClassHistogramIsCumulativeWithSumAndCount) {
  Metrics m(local());
  NodeSignals node;
  auto& on = node.classes[kOn].interval;
  add_waits(on, 1'500, 3);           // kernel bucket [1.28, 1.536) us -> le 2us
  add_waits(on, 1'900'000, 1);       // [1.835, 2.097) ms -> le 5ms (never below the true value)
  add_waits(on, 3'000'000, 2);       // [2.62, 3.15) ms -> le 5ms
  add_waits(on, 20'000'000'000, 1);  // 20 s -> +Inf
  m.update(node, Sample{});
  auto t = m.render();
  const std::string h = "khagent_runq_wait_seconds_bucket";
  EXPECT_EQ(value(t, h, {{"class", "online"}, {"le", "2e-06"}}), 3);
  EXPECT_EQ(value(t, h, {{"class", "online"}, {"le", "0.001"}}), 3);
  EXPECT_EQ(value(t, h, {{"class", "online"}, {"le", "0.002"}}), 3);
  EXPECT_EQ(value(t, h, {{"class", "online"}, {"le", "0.005"}}), 6);
  EXPECT_EQ(value(t, h, {{"class", "online"}, {"le", "10"}}), 6);
  EXPECT_EQ(value(t, h, {{"class", "online"}, {"le", "+Inf"}}), 7);
  EXPECT_EQ(value(t, "khagent_runq_wait_seconds_count", {{"class", "online"}}), 7);
  auto sum = value(t, "khagent_runq_wait_seconds_sum", {{"class", "online"}});
  ASSERT_TRUE(sum);
  EXPECT_NEAR(*sum, (3 * 1'500 + 1'900'000 + 2 * 3'000'000 + 20'000'000'000.0) / 1e9, 1e-9);
  // Every class has its series, empty or not.
  EXPECT_EQ(value(t, "khagent_runq_wait_seconds_count", {{"class", "offline"}}), 0);
  EXPECT_EQ(value(t, "khagent_runq_wait_seconds_count", {{"class", "system"}}), 0);

  // A second interval adds to the first.
  NodeSignals next;
  add_waits(next.classes[kOn].interval, 1'500, 1);
  m.update(next, Sample{});
  t = m.render();
  EXPECT_EQ(value(t, h, {{"class", "online"}, {"le", "2e-06"}}), 4);
  EXPECT_EQ(value(t, "khagent_runq_wait_seconds_count", {{"class", "online"}}), 8);
}

TEST(MetricsPods, SeriesAreCappedTheRestIsOtherAndGonePodsAreRemoved) {
  auto o = local();
  o.max_pod_series = 2;
  Metrics m(o);
  const std::string count = "khagent_pod_runq_wait_seconds_count";
  const std::string sum = "khagent_pod_runq_wait_seconds_sum";

  NodeSignals n1;
  n1.pods = {pod("a", 100'000), pod("b", 300'000), pod("c", 200'000), pod("d", 50'000),
             pod("e", 70'000, CgroupClass::Offline)};
  m.update(n1, Sample{});
  auto t = m.render();
  EXPECT_EQ(value(t, count, {{"pod_uid", "b"}, {"class", "online"}}), 1);
  EXPECT_EQ(value(t, count, {{"pod_uid", "c"}, {"class", "online"}}), 1);
  EXPECT_FALSE(value(t, count, {{"pod_uid", "a"}, {"class", "online"}}));
  EXPECT_FALSE(value(t, count, {{"pod_uid", "d"}, {"class", "online"}}));
  EXPECT_EQ(value(t, count, {{"pod_uid", "other"}, {"class", "online"}}), 2);  // a + d
  EXPECT_NEAR(*value(t, sum, {{"pod_uid", "other"}, {"class", "online"}}), 150e-6, 1e-12);
  EXPECT_EQ(value(t, count, {{"pod_uid", "other"}, {"class", "offline"}}), 1);  // e
  EXPECT_FALSE(value(t, count, {{"pod_uid", "other"}, {"class", "system"}}));   // nothing to sum

  // b is gone: its series goes, and the freed slot goes to the heaviest pod
  // without one (a). c keeps its series although it waited for nothing (no
  // newcomer needs its slot): series do not flap.
  NodeSignals n2;
  n2.pods = {pod("a", 500'000), pod("c", 0), pod("d", 0)};
  m.update(n2, Sample{});
  t = m.render();
  EXPECT_EQ(count_with(t, "khagent_pod_runq_wait_seconds_bucket", "pod_uid", "b"), 0u);
  EXPECT_FALSE(value(t, count, {{"pod_uid", "b"}, {"class", "online"}}));
  EXPECT_EQ(value(t, count, {{"pod_uid", "a"}, {"class", "online"}}), 1);
  EXPECT_EQ(value(t, count, {{"pod_uid", "c"}, {"class", "online"}}), 1);
  EXPECT_FALSE(value(t, count, {{"pod_uid", "d"}, {"class", "online"}}));
  EXPECT_EQ(value(t, count, {{"pod_uid", "other"}, {"class", "online"}}), 2);

  // d is in the top 2 now: it takes the slot of c, the lightest holder outside the top.
  NodeSignals n3;
  n3.pods = {pod("a", 500'000), pod("c", 10'000), pod("d", 900'000)};
  m.update(n3, Sample{});
  t = m.render();
  EXPECT_FALSE(value(t, count, {{"pod_uid", "c"}, {"class", "online"}}));
  EXPECT_EQ(value(t, count, {{"pod_uid", "d"}, {"class", "online"}}), 1);
  EXPECT_EQ(value(t, count, {{"pod_uid", "a"}, {"class", "online"}}), 2);
  EXPECT_EQ(value(t, count, {{"pod_uid", "other"}, {"class", "online"}}), 3);  // + c

  // Never more than max_pod_series pods of their own, plus "other" per class.
  std::map<std::string, int> uids;
  for (const auto& l : parse(t))
    if (l.name == count) uids[l.labels.at("pod_uid")]++;
  uids.erase("other");
  EXPECT_EQ(uids.size(), 2u);
}

TEST(MetricsPods, ReclassifiedPodChangesItsClassLabel) {
  Metrics m(local());
  NodeSignals n;
  n.pods = {pod("a", 100'000)};
  m.update(n, Sample{});
  n.pods = {pod("a", 100'000, CgroupClass::Offline)};
  m.update(n, Sample{});
  auto t = m.render();
  EXPECT_FALSE(value(t, "khagent_pod_runq_wait_seconds_count", {{"pod_uid", "a"}, {"class", "online"}}));
  EXPECT_EQ(value(t, "khagent_pod_runq_wait_seconds_count", {{"pod_uid", "a"}, {"class", "offline"}}), 1);
}

TEST(MetricsCounters, IncrementByEachIntervalsDelta) {
  Metrics m(local());
  NodeSignals n;
  auto& on = n.classes[kOn];
  on.interval.cpu_ns = 1'000'000'000;
  on.interval.cause_ns = {100'000'000, 0, 200'000'000, 50'000'000};
  on.wait_by_aggressor_class_ns[kOff] = 400'000'000;
  on.wait_by_aggressor_class_ns[kSys] = 10'000'000;
  n.classes[kOff].interval.cpu_ns = 2'000'000'000;
  m.update(n, Sample{});
  on.interval.cpu_ns = 500'000'000;
  m.update(n, Sample{});
  auto t = m.render();
  EXPECT_DOUBLE_EQ(*value(t, "khagent_cpu_usage_seconds_total", {{"class", "online"}}), 1.5);
  EXPECT_DOUBLE_EQ(*value(t, "khagent_cpu_usage_seconds_total", {{"class", "offline"}}), 4.0);
  EXPECT_DOUBLE_EQ(*value(t, "khagent_cpu_usage_seconds_total", {{"class", "system"}}), 0.0);
  const std::string cause = "khagent_runq_wait_by_cause_seconds_total";
  EXPECT_DOUBLE_EQ(*value(t, cause, {{"class", "online"}, {"cause", "throttled"}}), 0.2);
  EXPECT_DOUBLE_EQ(*value(t, cause, {{"class", "online"}, {"cause", "same_cgroup"}}), 0.0);
  EXPECT_DOUBLE_EQ(*value(t, cause, {{"class", "online"}, {"cause", "other_cgroup"}}), 0.4);
  EXPECT_DOUBLE_EQ(*value(t, cause, {{"class", "online"}, {"cause", "unattributed"}}), 0.1);
  const std::string inter = "khagent_interference_seconds_total";
  EXPECT_DOUBLE_EQ(*value(t, inter, {{"victim_class", "online"}, {"aggressor_class", "offline"}}), 0.8);
  EXPECT_DOUBLE_EQ(*value(t, inter, {{"victim_class", "online"}, {"aggressor_class", "system"}}), 0.02);
  EXPECT_DOUBLE_EQ(*value(t, inter, {{"victim_class", "offline"}, {"aggressor_class", "online"}}), 0.0);
}

// The roll-up classes throttled time (Rollup.ThrottledTimeIsClassed); the
// counters add up what each tick's signals give.
TEST(MetricsCounters, ThrottledTimeByClass) {
  Metrics m(local());
  NodeSignals n;
  n.throttled_ns[static_cast<size_t>(CgroupClass::Online)] = 100'000'000;
  n.throttled_ns[static_cast<size_t>(CgroupClass::Offline)] = 275'000'000;
  n.throttled_ns[static_cast<size_t>(CgroupClass::System)] = 300'000'000;
  m.update(n, Sample{});
  n.throttled_ns[static_cast<size_t>(CgroupClass::System)] = 0;
  m.update(n, Sample{});
  auto t = m.render();
  EXPECT_DOUBLE_EQ(*value(t, "khagent_throttled_seconds_total", {{"class", "online"}}), 0.2);
  EXPECT_DOUBLE_EQ(*value(t, "khagent_throttled_seconds_total", {{"class", "offline"}}), 0.55);
  EXPECT_DOUBLE_EQ(*value(t, "khagent_throttled_seconds_total", {{"class", "system"}}), 0.3);
}

TEST(MetricsCounters, KernelCumulativeCountersAdvanceByDifference) {
  Metrics m(local());
  Sample s;
  s.bpf_counters[KH_CNT_SWITCHES] = 10;
  s.bpf_counters[KH_CNT_EVENTS_DROPPED] = 1;
  m.update(NodeSignals{}, s);
  s.bpf_counters[KH_CNT_SWITCHES] = 25;
  m.update(NodeSignals{}, s);
  auto t = m.render();
  EXPECT_EQ(value(t, "khagent_bpf_events_total", {{"counter", "switches"}}), 25);
  EXPECT_EQ(value(t, "khagent_bpf_events_total", {{"counter", "events_dropped"}}), 1);
  EXPECT_EQ(value(t, "khagent_bpf_events_total", {{"counter", "pairs_full"}}), 0);
  // Programs reloaded: the kernel starts over from 0; the counter keeps growing.
  s.bpf_counters[KH_CNT_SWITCHES] = 5;
  m.update(NodeSignals{}, s);
  EXPECT_EQ(value(m.render(), "khagent_bpf_events_total", {{"counter", "switches"}}), 30);

  // The stall detectors: seconds and stalls since load, advanced by difference.
  s.stall_total.available = true;
  s.stall_total.stolen_ns = 2'000'000;
  s.stall_total.stalls = 3;
  m.update(NodeSignals{}, s);
  s.stall_total.stolen_ns = 5'000'000;
  s.stall_total.stalls = 4;
  s.stall_total.cpus_failed = 1;
  m.update(NodeSignals{}, s);
  t = m.render();
  EXPECT_DOUBLE_EQ(*value(t, "khagent_cpu_stall_seconds_total", {}), 0.005);
  EXPECT_EQ(value(t, "khagent_cpu_stalls_total", {}), 4);
  EXPECT_EQ(value(t, "khagent_cpu_stall_detector_failed_cpus", {}), 1);

  m.update_bpf_cost({{"handle_switch", 2'000'000'000, 100}, {"handle_wakeup", 0, 0}});
  m.update_bpf_cost({{"handle_switch", 3'000'000'000, 150}, {"handle_wakeup", 1'000, 2}});
  t = m.render();
  EXPECT_DOUBLE_EQ(*value(t, "khagent_bpf_prog_run_seconds_total", {{"prog", "handle_switch"}}), 3.0);
  EXPECT_EQ(value(t, "khagent_bpf_prog_runs_total", {{"prog", "handle_switch"}}), 150);
  EXPECT_DOUBLE_EQ(*value(t, "khagent_bpf_prog_run_seconds_total", {{"prog", "handle_wakeup"}}), 1e-6);
  EXPECT_EQ(value(t, "khagent_bpf_prog_runs_total", {{"prog", "handle_wakeup"}}), 2);
}

TEST(MetricsCounters, TopAggressorsAreCappedAndFollowContainers) {
  auto o = local();
  o.top_aggressors = 1;
  Metrics m(o);
  const std::string f = "khagent_aggressor_interference_seconds_total";
  NodeSignals n;
  n.yarn = {container("container_1", 500'000'000), container("container_2", 100'000'000), container("container_3", 0)};
  m.update(n, Sample{});
  auto t = m.render();
  EXPECT_DOUBLE_EQ(*value(t, f, {{"aggressor", "container_1"}}), 0.5);
  EXPECT_DOUBLE_EQ(*value(t, f, {{"aggressor", "other"}}), 0.1);
  EXPECT_FALSE(value(t, f, {{"aggressor", "container_2"}}));
  EXPECT_FALSE(value(t, f, {{"aggressor", "container_3"}}));

  n.yarn = {container("container_2", 200'000'000)};
  m.update(n, Sample{});
  t = m.render();
  EXPECT_FALSE(value(t, f, {{"aggressor", "container_1"}}));
  EXPECT_DOUBLE_EQ(*value(t, f, {{"aggressor", "container_2"}}), 0.2);
  EXPECT_DOUBLE_EQ(*value(t, f, {{"aggressor", "other"}}), 0.1);
}

TEST(MetricsPolicy, DecisionsActionsAndReaction) {
  Metrics m(local());
  Decision d;
  d.budget_cores = 3.5;
  d.ceiling_cores = 6;
  d.floor_cores = 0.5;
  d.action = BudgetAction::Decrease;
  m.record_decision(d);
  d.action = BudgetAction::Hold;
  m.record_decision(d);
  m.record_decision(d);

  ActionRecord w;
  w.file = CgroupFile::CpuMax;
  w.outcome = ActionOutcome::Written;
  ActionRecord u;
  u.file = CgroupFile::CpuIdle;
  u.outcome = ActionOutcome::Unchanged;
  m.record_actions({w, w, u});
  m.record_reaction(0.003);
  m.record_reaction(0.5);

  auto t = m.render();
  EXPECT_DOUBLE_EQ(*value(t, "khagent_offline_cpu_budget_cores"), 3.5);
  EXPECT_DOUBLE_EQ(*value(t, "khagent_offline_cpu_ceiling_cores"), 6);
  EXPECT_DOUBLE_EQ(*value(t, "khagent_offline_cpu_floor_cores"), 0.5);
  EXPECT_EQ(value(t, "khagent_budget_decisions_total", {{"action", "decrease"}}), 1);
  EXPECT_EQ(value(t, "khagent_budget_decisions_total", {{"action", "hold"}}), 2);
  EXPECT_EQ(value(t, "khagent_budget_decisions_total", {{"action", "increase"}}), 0);
  EXPECT_EQ(value(t, "khagent_actions_total", {{"file", "cpu.max"}, {"outcome", "written"}}), 2);
  EXPECT_EQ(value(t, "khagent_actions_total", {{"file", "cpu.idle"}, {"outcome", "unchanged"}}), 1);
  EXPECT_EQ(value(t, "khagent_reaction_seconds_count"), 2);
  EXPECT_EQ(value(t, "khagent_reaction_seconds_bucket", {{"le", "0.001"}}), 0);
  EXPECT_EQ(value(t, "khagent_reaction_seconds_bucket", {{"le", "0.005"}}), 1);
  EXPECT_EQ(value(t, "khagent_reaction_seconds_bucket", {{"le", "1"}}), 2);
  EXPECT_DOUBLE_EQ(*value(t, "khagent_reaction_seconds_sum"), 0.503);
}

TEST(MetricsPolicy, LadderStepsWithTheWaitsBehindOfflineBeforeAndAfter) {
  Metrics m(local());
  m.record_levers({{"idle", true}, {"cpuset", true}, {"quota", false}});
  m.record_ladder_step("cpuset", "escalate", 0.040, 0, false);
  auto t = m.render();
  EXPECT_EQ(value(t, "khagent_lever_active", {{"lever", "cpuset"}}), 1);
  EXPECT_EQ(value(t, "khagent_lever_active", {{"lever", "quota"}}), 0);
  EXPECT_EQ(value(t, "khagent_ladder_steps_total", {{"lever", "cpuset"}, {"action", "escalate"}}), 1);
  EXPECT_DOUBLE_EQ(*value(t, "khagent_lever_effect_offline_wait_ratio", {{"lever", "cpuset"}, {"window", "before"}}),
                   0.040);
  // No verdict yet: no "after".
  EXPECT_FALSE(value(t, "khagent_lever_effect_offline_wait_ratio", {{"lever", "cpuset"}, {"window", "after"}}));

  m.record_ladder_step("cpuset", "kept", 0.040, 0.0001, true);
  t = m.render();
  EXPECT_EQ(value(t, "khagent_ladder_steps_total", {{"lever", "cpuset"}, {"action", "kept"}}), 1);
  EXPECT_EQ(value(t, "khagent_ladder_steps_total", {{"lever", "cpuset"}, {"action", "escalate"}}), 1);
  EXPECT_DOUBLE_EQ(*value(t, "khagent_lever_effect_offline_wait_ratio", {{"lever", "cpuset"}, {"window", "after"}}),
                   0.0001);
}

TEST(MetricsInfo, BuildAndThrottleSource) {
  Metrics m(local());
  auto t = m.render();
  EXPECT_EQ(value(t, "khagent_build_info", {{"version", KHAGENT_VERSION}}), 1);
  EXPECT_EQ(t.find("khagent_throttle_source_info{"), std::string::npos);
  m.set_throttle_source("fentry");
  m.set_throttle_source("cpu.stat");
  t = m.render();
  EXPECT_EQ(value(t, "khagent_throttle_source_info", {{"source", "cpu.stat"}}), 1);
  EXPECT_FALSE(value(t, "khagent_throttle_source_info", {{"source", "fentry"}}));
  EXPECT_NE(t.find("# TYPE khagent_runq_wait_seconds histogram"), std::string::npos);
  EXPECT_NE(t.find("# TYPE khagent_budget_decisions_total counter"), std::string::npos);
}

TEST(MetricsConcurrency, UpdatesAndScrapesInterleave) {
  auto o = local();
  o.max_pod_series = 3;
  Metrics m(o);
  std::thread scraper([&] {
    for (int i = 0; i < 200; i++) (void)m.render();
  });
  for (int i = 0; i < 200; i++) {
    NodeSignals n;
    n.pods = {pod("p" + std::to_string(i % 7), 1'000 + static_cast<uint64_t>(i)), pod("q", 5'000)};
    m.update(n, Sample{});
  }
  scraper.join();
  EXPECT_TRUE(value(m.render(), "khagent_pod_runq_wait_seconds_count", {{"pod_uid", "q"}, {"class", "online"}}));
}

TEST(MetricsHttp, ServesMetricsHealthAndReadiness) {
  Metrics m(local());
  ASSERT_TRUE(m.start().ok());
  ASSERT_GT(m.port(), 0);

  auto r = get(m.port(), "/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(r->body.find("khagent_build_info{version=\"" KHAGENT_VERSION "\"} 1"), std::string::npos);

  r = get(m.port(), "/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("bpf"), std::string::npos);
  m.set_bpf_attached(true);
  r = get(m.port(), "/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok");

  r = get(m.port(), "/readyz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  m.set_ready();
  r = get(m.port(), "/readyz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);

  r = get(m.port(), "/nope");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

TEST(MetricsHttp, HealthFailsWhenTicksStop) {
  auto o = local();
  o.stall_seconds = 0.05;
  Metrics m(o);
  ASSERT_TRUE(m.start().ok());
  m.set_bpf_attached(true);
  m.update(NodeSignals{}, Sample{});
  auto r = get(m.port(), "/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  r = get(m.port(), "/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("no tick"), std::string::npos);
}

TEST(MetricsHttp, PortInUseIsAnErrorNamingIt) {
  Metrics first(local());
  ASSERT_TRUE(first.start().ok());
  auto o = local();
  o.port = first.port();
  Metrics second(o);  // a second agent on the same port must not share it
  auto res = second.start();
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.error().str().find("127.0.0.1:" + std::to_string(first.port())), std::string::npos)
      << res.error().str();

  // Same with a listener that is not httplib.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  o.port = ntohs(a.sin_port);
  Metrics third(o);
  res = third.start();
  close(fd);
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.error().str().find("127.0.0.1:" + std::to_string(o.port)), std::string::npos) << res.error().str();
}

TEST(MetricsHttp, StopReturnsPromptly) {
  Metrics m(local());
  ASSERT_TRUE(m.start().ok());
  httplib::Client cli("127.0.0.1", m.port());
  cli.set_keep_alive(true);  // an idle connection must not hold stop() up
  auto r = cli.Get("/metrics");
  ASSERT_TRUE(r);
  auto t0 = std::chrono::steady_clock::now();
  m.stop();
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::milliseconds(1000));
  EXPECT_FALSE(get(m.port(), "/metrics"));  // nobody listens any more
  m.stop();                                 // idempotent

  // And it can serve again.
  ASSERT_TRUE(m.start().ok());
  auto again = get(m.port(), "/healthz");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 503);
}

TEST(MetricsMemory, BudgetGaugesAndOnlineStallCounters) {
  Metrics m(local());
  EXPECT_EQ(m.render().find("khagent_offline_memory_budget_bytes"), std::string::npos) << "only with the lever";
  MemoryInput in{3ull << 30, 2ull << 30, 1ull << 30, 1, 0, {}};
  MemoryDecision d;
  d.budget = 900ull << 20;
  d.ceiling = 1000ull << 20;
  d.reserve = 256ull << 20;
  d.eviction = 100ull << 20;
  m.record_memory(in, d);
  MemoryStall s;
  s.some_us = 250'000;
  s.full_us = 50'000;
  m.record_memory_stall(s);
  m.record_memory_stall(s);
  m.record_psi_triggers(2);
  m.record_psi_triggers(1);
  MemoryEvents ev;
  ev.online_oom_kills = 1;
  ev.offline_refaults = 300;
  m.record_memory_events(ev);
  m.record_memory_events(ev);
  auto t = m.render();
  EXPECT_EQ(value(t, "khagent_offline_memory_budget_bytes", {}), 900.0 * (1 << 20));
  EXPECT_EQ(value(t, "khagent_offline_memory_ceiling_bytes", {}), 1000.0 * (1 << 20));
  EXPECT_EQ(value(t, "khagent_node_memory_capacity_bytes", {}), 3.0 * (1 << 30));
  EXPECT_EQ(value(t, "khagent_node_memory_working_set_bytes", {}), 2.0 * (1 << 30));
  EXPECT_EQ(value(t, "khagent_offline_memory_working_set_bytes", {}), 1.0 * (1 << 30));
  EXPECT_EQ(value(t, "khagent_node_memory_reserve_bytes", {}), 256.0 * (1 << 20));
  EXPECT_EQ(value(t, "khagent_node_memory_eviction_threshold_bytes", {}), 100.0 * (1 << 20));
  EXPECT_DOUBLE_EQ(*value(t, "khagent_online_memory_stall_seconds_total", {{"kind", "some"}}), 0.5);
  EXPECT_DOUBLE_EQ(*value(t, "khagent_online_memory_stall_seconds_total", {{"kind", "full"}}), 0.1);
  EXPECT_EQ(value(t, "khagent_online_memory_psi_triggers_total", {}), 3.0);
  EXPECT_EQ(value(t, "khagent_memory_oom_kills_total", {{"class", "online"}}), 2.0);
  EXPECT_EQ(value(t, "khagent_memory_oom_kills_total", {{"class", "offline"}}), 0.0);
  EXPECT_EQ(value(t, "khagent_memory_refaults_total", {{"class", "offline"}}), 600.0);
}

#include "khagent/policy/capacity.h"

namespace khagent {
namespace {

TEST(MetricsCapacity, TermsSplitPublishedAndPatches) {
  Metrics m(local());
  EXPECT_EQ(m.render().find("khagent_capacity_cpu_cores"), std::string::npos) << "only with capacity publishing";
  CapacityConfig cfg;
  CapacityPlanner planner(cfg, true);
  YarnOffer o;
  o.budget_cores = 3;
  o.memory_budget_bytes = uint64_t{2} << 30;
  o.cpu_terms = BudgetTerms{8, 3.5, 1, 0.5, 3};
  m.update_capacity(planner.plan(o, {}, 0));
  CapacityStatus st;
  st.on_node = BatchQuantity{1500, int64_t{1} << 30};
  st.patches_ok = 2;
  st.patches_failed = 1;
  st.reasserts = 1;
  st.stale = true;
  m.update_capacity(st);
  auto t = m.render();
  EXPECT_EQ(value(t, "khagent_capacity_cpu_cores", {{"term", "capacity"}}), 8.0);
  EXPECT_EQ(value(t, "khagent_capacity_cpu_cores", {{"term", "margin"}}), 0.5);
  EXPECT_EQ(value(t, "khagent_capacity_cpu_cores", {{"term", "budget"}}), 3.0);
  EXPECT_EQ(value(t, "khagent_capacity_cpu_cores", {{"term", "batch"}}), 1.5);
  EXPECT_EQ(value(t, "khagent_capacity_cpu_cores", {{"term", "yarn"}}), 1.5);
  EXPECT_EQ(value(t, "khagent_capacity_cpu_cores", {{"term", "published"}}), 1.5);
  EXPECT_EQ(value(t, "khagent_capacity_cpu_cores", {{"term", "on_node"}}), 1.5);
  EXPECT_EQ(value(t, "khagent_capacity_memory_bytes", {{"term", "published"}}), double(1 << 30));
  EXPECT_EQ(value(t, "khagent_capacity_patches_total", {{"outcome", "ok"}}), 2.0);
  EXPECT_EQ(value(t, "khagent_capacity_patches_total", {{"outcome", "failed"}}), 1.0);
  EXPECT_EQ(value(t, "khagent_capacity_reasserts_total", {}), 1.0);
  EXPECT_EQ(value(t, "khagent_capacity_stale", {}), 1.0);
}

}  // namespace
}  // namespace khagent
