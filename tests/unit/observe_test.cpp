#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "khagent/export/observe.h"
#include "khagent/util/strings.h"

using namespace khagent;

namespace {

Signals sample_signals() {
  Signals s;
  s.ts_ns = 1700000000000000000ULL;
  s.interval_ns = 1000000000ULL;
  s.throttle_source = ThrottleSource::CpuStat;
  CgroupSignals on;
  on.id = 11;
  on.path = "/kubepods.slice/pod-a";
  on.total.cpu_ns = 5;
  on.total.wait_ns = 300;
  on.total.waits = 3;
  on.total.preemptions = 2;
  on.total.cause_ns = {10, 20, 250, 15, 5};
  on.interval.wait_ns = 100;
  on.interval.waits = 1;
  on.wait_p50_us = 1.5;
  on.wait_p99_us = 9.5;
  on.throttle_total = {4, 4000};
  on.reclaim_total.ns[KH_RECLAIM_MEMCG] = 7000;
  on.reclaim_total.count[KH_RECLAIM_MEMCG] = 2;
  on.top_aggressors.push_back({12, "/hadoop-yarn/container_1", 250, 80});
  CgroupSignals off;
  off.id = 12;
  off.path = "/hadoop-yarn/container_1";
  s.cgroups = {on, off};
  s.stall_total.available = true;
  s.stall_total.stolen_ns = 9'000'000;
  s.stall_total.stalls = 4;
  s.stall_interval_ns = 3'000'000;
  s.stall_interval_count = 2;
  return s;
}

}  // namespace

TEST(Observe, JsonHasTheDocumentedFields) {
  auto j = nlohmann::json::parse(observe_json(sample_signals(), {}));
  EXPECT_EQ(j["ts_ns"], 1700000000000000000ULL);
  EXPECT_EQ(j["interval_ns"], 1000000000ULL);
  EXPECT_EQ(j["throttle_source"], "cpu.stat");
  EXPECT_EQ(j["cpu_stalls"]["stolen_ns_total"], 9'000'000);
  EXPECT_EQ(j["cpu_stalls"]["stalls_total"], 4);
  Signals none = sample_signals();
  none.stall_total = {};
  EXPECT_TRUE(nlohmann::json::parse(observe_json(none, {}))["cpu_stalls"].is_null());
  ASSERT_EQ(j["cgroups"].size(), 2u);
  const auto& c = j["cgroups"][0];
  EXPECT_EQ(c["id"], 11);
  EXPECT_EQ(c["path"], "/kubepods.slice/pod-a");
  EXPECT_EQ(c["cpu_ns_total"], 5);
  EXPECT_EQ(c["runq_wait_ns_total"], 300);
  EXPECT_EQ(c["runq_waits_total"], 3);
  EXPECT_DOUBLE_EQ(c["runq_wait_p50_us"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(c["runq_wait_p99_us"].get<double>(), 9.5);
  EXPECT_EQ(c["wait_ns_total"]["throttled"], 10);
  EXPECT_EQ(c["wait_ns_total"]["same_cgroup"], 20);
  EXPECT_EQ(c["wait_ns_total"]["other_cgroup"], 250);
  EXPECT_EQ(c["wait_ns_total"]["unattributed"], 15);
  EXPECT_EQ(c["wait_ns_total"]["stolen"], 5);
  EXPECT_EQ(c["preemptions_total"], 2);
  EXPECT_EQ(c["throttled_ns_total"], 4000);
  EXPECT_EQ(c["reclaim_ns_total"]["memcg"], 7000);
  EXPECT_EQ(c["reclaim_ns_total"]["node"], 0);
  EXPECT_EQ(c["reclaims_total"]["memcg"], 2);
  ASSERT_EQ(c["top_aggressors"].size(), 1u);
  EXPECT_EQ(c["top_aggressors"][0]["id"], 12);
  EXPECT_EQ(c["top_aggressors"][0]["path"], "/hadoop-yarn/container_1");
  EXPECT_EQ(c["top_aggressors"][0]["wait_ns_total"], 250);
}

// The streamed output is byte for byte what a JSON tree dumps (sorted keys,
// its number format), which scripts that grep it rely on.
TEST(Observe, JsonIsWhatATreeWouldDump) {
  Signals sig = sample_signals();
  sig.cgroups[0].path = "/with \"quotes\" and \\ and \x01";
  sig.cgroups[0].wait_p50_us = 100.0;
  sig.cgroups[0].wait_p99_us = 0.1;
  auto s = observe_json(sig, {});
  EXPECT_EQ(nlohmann::json::parse(s).dump(), s);
  EXPECT_EQ(nlohmann::json::parse(observe_json(Signals{}, {})).dump(), observe_json(Signals{}, {}));
}

TEST(Observe, JsonIsOneLine) {
  auto s = observe_json(sample_signals(), {});
  EXPECT_EQ(s.find('\n'), std::string::npos);
}

TEST(Observe, PrefixFilter) {
  EXPECT_TRUE(path_matches("/a/b", "/a"));
  EXPECT_TRUE(path_matches("/a/b", "a/"));
  EXPECT_TRUE(path_matches("/a", "/a"));
  EXPECT_FALSE(path_matches("/ab", "/a"));
  EXPECT_TRUE(path_matches("/x", ""));
  auto j = nlohmann::json::parse(observe_json(sample_signals(), {"/hadoop-yarn", 25}));
  ASSERT_EQ(j["cgroups"].size(), 1u);
  EXPECT_EQ(j["cgroups"][0]["id"], 12);
}

TEST(Observe, TableShowsCgroupsAndAggressor) {
  auto t = observe_table(sample_signals(), {"", 25});
  EXPECT_NE(t.find("CPU stalls 2 (3.0ms in 1.00s)"), std::string::npos) << t;
  EXPECT_NE(t.find("STOLE"), std::string::npos) << t;
  EXPECT_NE(t.find("cpu.stat"), std::string::npos);
  EXPECT_NE(t.find("/kubepods.slice/pod-a"), std::string::npos);
  EXPECT_NE(t.find("/hadoop-yarn/container_1 (250ns)"), std::string::npos);
  auto limited = observe_table(sample_signals(), {"", 1});
  EXPECT_NE(limited.find("1 more"), std::string::npos);
}

TEST(Strings, PathAtOrBelowMatchesWholeComponents) {
  EXPECT_TRUE(path_at_or_below("/a/b", "/a"));
  EXPECT_TRUE(path_at_or_below("/a", "/a"));
  EXPECT_FALSE(path_at_or_below("/ab", "/a"));
  EXPECT_FALSE(path_at_or_below("/a", "/a/b"));
  EXPECT_TRUE(path_at_or_below("/anything", "/"));
}
