// The YARN downscaler against the in-process RM/NM emulator: node discovery,
// capacity posts (shrink at once, grow after a stable window, deadband),
// reclaim, dry-run, RM outages, the worker thread never blocking offer(), and
// the restore on stop. round() is driven synchronously with explicit now_ns.
#include "khagent/app/yarn_downscaler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "yarn_emulator.h"

using namespace khagent;
using yarntest::EmuApp;
using yarntest::EmuContainer;
using yarntest::EmuNode;
using yarntest::Faults;
using yarntest::RecordedRequest;
using yarntest::Srv;
using yarntest::YarnEmulator;

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr uint64_t kS = 1'000'000'000ULL;
constexpr uint64_t kT0 = 1000 * kS;  // the first round's now_ns
const std::string kThis = "worker1.example.com:45454";
const std::string kOther = "worker2.example.com:45454";
const std::string kResourcePath = "/ws/v1/cluster/nodes/" + kThis + "/resource";

long ms_since(Clock::time_point t0) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

// Two nodes (this one with 8 vcores / 16 GB, and another), both served by the
// emulated NodeManager so that nothing but 127.0.0.1 is ever contacted.
void setup_nodes(YarnEmulator& emu) {
  emu.add_this_node(kThis, "worker1.example.com", {8, 16384});
  EmuNode other;
  other.id = kOther;
  other.host = "worker2.example.com";
  other.total = {4, 8192};
  emu.add_node(other);  // http_address "" = the emulated NM's
}

YarnConfig test_config(const YarnEmulator& emu) {
  YarnConfig c;
  c.enabled = true;
  c.rm_urls = emu.rm_urls();
  c.auth = HttpAuth::Simple;
  c.user = "khagent";
  c.request_timeout_ms = 1500;
  c.connect_timeout_ms = 500;
  c.retries = 0;
  c.retry_backoff_ms = 10;
  c.refresh_interval_ns = 1 * kS;
  c.rounding = VcoreRounding::Down;
  c.deadband_vcores = 1;
  c.min_vcores = 1;
  c.grow_stable_ns = 2 * kS;
  c.grow_interval_ns = 5 * kS;
  c.over_commit_timeout_ms = 60000;
  c.reclaim = true;
  c.reclaim_grace_ns = 3 * kS;
  return c;
}

YarnOffer offer_at(uint64_t now_ns, double budget) {
  YarnOffer o;
  o.now_ns = now_ns;
  o.budget_cores = budget;
  return o;
}

// The vcores/memory of a recorded update-resource POST (-1 when absent).
struct Posted {
  int64_t vcores = -1, memory_mb = -1, timeout = -2;
};
Posted posted(const RecordedRequest& r) {
  Posted p;
  json b = json::parse(r.body, nullptr, false);
  if (!b.is_object() || !b.contains("resource") || !b["resource"].is_object()) return p;
  p.vcores = b["resource"].value("vCores", int64_t{-1});
  p.memory_mb = b["resource"].value("memory", int64_t{-1});
  p.timeout = b.value("overCommitTimeout", int64_t{-2});
  return p;
}

}  // namespace

TEST(YarnDownscaler, FindsTheNodeByHostName) {
  YarnEmulator emu;
  setup_nodes(emu);
  TempDir mount;
  YarnDownscaler ds(test_config(emu), false, mount.path.string(), {"localhost", "worker1"});
  ds.round(offer_at(kT0, 8));  // the whole node: nothing to post
  YarnStatus st = ds.status();
  EXPECT_EQ(st.last_error, "");
  EXPECT_EQ(st.node_id, kThis);
  EXPECT_EQ(st.rm, emu.rm_url());
  EXPECT_TRUE(st.configured_known);
  EXPECT_EQ(st.configured, (YarnResource{8, 16384}));
  EXPECT_TRUE(st.advertised_known);
  EXPECT_EQ(st.advertised, (YarnResource{8, 16384}));
  EXPECT_EQ(st.target, (YarnResource{8, 16384}));
  EXPECT_EQ(st.last_action, "hold");
  EXPECT_EQ(emu.requests(Srv::RM0, "GET", "/ws/v1/cluster/nodes").size(), 1u);
  EXPECT_TRUE(emu.rm_posts().empty());
  // The NodeManager found through the node's nodeHTTPAddress.
  EXPECT_FALSE(emu.requests(Srv::NM, "GET", "/ws/v1/node/info").empty());
  EXPECT_FALSE(emu.requests(Srv::NM, "GET", "/ws/v1/node/containers").empty());
  // Simple auth on every request.
  for (const auto& r : emu.requests()) EXPECT_EQ(r.param("user.name"), "khagent") << r.path;
  EXPECT_GT(st.rm_requests, 0u);
  EXPECT_GT(st.nm_requests, 0u);
}

TEST(YarnDownscaler, NoMatchingNodeIsAnErrorAndNothingIsPosted) {
  YarnEmulator emu;
  setup_nodes(emu);
  TempDir mount;
  YarnDownscaler ds(test_config(emu), false, mount.path.string(), {"worker3", "worker3.example.com"});
  ds.round(offer_at(kT0, 2));
  YarnStatus st = ds.status();
  EXPECT_EQ(st.node_id, "");
  EXPECT_NE(st.last_error.find("yarn.node_id"), std::string::npos) << st.last_error;
  EXPECT_TRUE(emu.rm_posts().empty());
  EXPECT_TRUE(emu.requests(Srv::NM).empty());
}

TEST(YarnDownscaler, ConfiguredNodeIdTakesPrecedence) {
  YarnEmulator emu;
  setup_nodes(emu);
  emu.set_nm_info(kOther, "worker2.example.com", {4, 8192});
  TempDir mount;
  YarnConfig cfg = test_config(emu);
  cfg.node_id = kOther;
  // The host names would pick worker1; yarn.node_id says worker2.
  YarnDownscaler ds(cfg, false, mount.path.string(), {"worker1.example.com"});
  ds.round(offer_at(kT0, 2));
  YarnStatus st = ds.status();
  EXPECT_EQ(st.last_error, "");
  EXPECT_EQ(st.node_id, kOther);
  EXPECT_TRUE(emu.requests(Srv::RM0, "GET", "/ws/v1/cluster/nodes").empty());  // no list needed
  EXPECT_FALSE(emu.requests(Srv::RM0, "GET", "/ws/v1/cluster/nodes/" + kOther).empty());
  auto posts = emu.rm_posts();
  ASSERT_EQ(posts.size(), 1u);
  EXPECT_EQ(posts[0].path, "/ws/v1/cluster/nodes/" + kOther + "/resource");
  EXPECT_EQ(emu.node(kOther)->total, (YarnResource{2, 8192}));
  EXPECT_EQ(emu.node(kThis)->total, (YarnResource{8, 16384}));  // untouched
}

TEST(YarnDownscaler, FirstRoundPostsTheTargetFromTheBudget) {
  YarnEmulator emu;
  setup_nodes(emu);
  TempDir mount;
  YarnConfig cfg = test_config(emu);
  cfg.memory_follows_cpu = true;
  YarnDownscaler ds(cfg, false, mount.path.string(), {"worker1"});
  ds.round(offer_at(kT0, 3.7));  // rounded down: 3 vcores, memory 16384 * 3 / 8
  YarnStatus st = ds.status();
  EXPECT_EQ(st.last_error, "");
  EXPECT_EQ(st.target, (YarnResource{3, 6144}));
  EXPECT_EQ(st.last_action, "shrink");
  EXPECT_EQ(st.updates_ok, 1u);
  EXPECT_EQ(st.updates_failed, 0u);
  EXPECT_EQ(st.advertised, (YarnResource{3, 6144}));

  auto posts = emu.rm_posts();
  ASSERT_EQ(posts.size(), 1u);
  const auto& p = posts[0];
  EXPECT_EQ(p.path, kResourcePath);
  EXPECT_EQ(p.content_type, "application/json");
  EXPECT_EQ(p.param("user.name"), "khagent");
  EXPECT_EQ(p.status, 200);
  json body = json::parse(p.body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << p.body;
  EXPECT_EQ(body.size(), 2u) << p.body;
  ASSERT_TRUE(body["resource"].is_object()) << p.body;
  EXPECT_EQ(body["resource"].size(), 2u) << p.body;
  ASSERT_TRUE(body["resource"]["memory"].is_number_integer()) << p.body;
  ASSERT_TRUE(body["resource"]["vCores"].is_number_integer()) << p.body;
  ASSERT_TRUE(body["overCommitTimeout"].is_number_integer()) << p.body;
  EXPECT_EQ(body["resource"]["memory"].get<int64_t>(), 6144);
  EXPECT_EQ(body["resource"]["vCores"].get<int64_t>(), 3);
  // khagent reclaims (yarn.reclaimer: khagent): the RM is told never to.
  EXPECT_EQ(body["overCommitTimeout"].get<int64_t>(), -1);
  EXPECT_EQ(emu.node(kThis)->total, (YarnResource{3, 6144}));
  EXPECT_EQ(emu.node(kThis)->last_over_commit_timeout, -1);

  // The same budget again, after a refresh: the RM has it, nothing more.
  ds.round(offer_at(kT0 + 2 * kS, 3.7));
  EXPECT_EQ(emu.rm_posts().size(), 1u);
  EXPECT_EQ(ds.status().last_action, "hold");
}

TEST(YarnDownscaler, ShrinkAtOnceGrowAfterTheStableWindowAndInterval) {
  YarnEmulator emu;
  setup_nodes(emu);
  TempDir mount;
  YarnDownscaler ds(test_config(emu), false, mount.path.string(), {"worker1"});
  auto vcores_posted = [&] {
    std::vector<int64_t> v;
    for (const auto& p : emu.rm_posts()) v.push_back(posted(p).vcores);
    return v;
  };

  ds.round(offer_at(kT0, 8));
  EXPECT_EQ(ds.status().last_action, "hold");
  EXPECT_TRUE(vcores_posted().empty());

  ds.round(offer_at(kT0 + kS / 10, 4));  // shrink: posted in the same round
  EXPECT_EQ(ds.status().last_action, "shrink");
  EXPECT_EQ(vcores_posted(), (std::vector<int64_t>{4}));
  EXPECT_EQ(emu.node(kThis)->total.vcores, 4);

  ds.round(offer_at(kT0 + 2 * kS / 10, 8));  // the budget is back up: wait
  EXPECT_EQ(ds.status().last_action, "wait_stable");
  ds.round(offer_at(kT0 + 1 * kS, 7));  // still inside the window; the lowest target is 7
  EXPECT_EQ(ds.status().last_action, "wait_stable");
  EXPECT_EQ(vcores_posted(), (std::vector<int64_t>{4}));

  ds.round(offer_at(kT0 + 23 * kS / 10, 8));  // above for 2.1 s >= 2 s: grow, by the lowest target
  EXPECT_EQ(ds.status().last_action, "grow");
  EXPECT_EQ(vcores_posted(), (std::vector<int64_t>{4, 7}));
  EXPECT_EQ(emu.node(kThis)->total.vcores, 7);

  ds.round(offer_at(kT0 + 24 * kS / 10, 8));  // a new window opens
  EXPECT_EQ(ds.status().last_action, "wait_stable");
  ds.round(offer_at(kT0 + 45 * kS / 10, 8));  // stable for 2.1 s, but the last grow was 2.2 s ago
  EXPECT_EQ(ds.status().last_action, "wait_interval");
  EXPECT_EQ(vcores_posted(), (std::vector<int64_t>{4, 7}));

  ds.round(offer_at(kT0 + 74 * kS / 10, 8));  // 5.1 s after the last grow
  EXPECT_EQ(ds.status().last_action, "grow");
  EXPECT_EQ(vcores_posted(), (std::vector<int64_t>{4, 7, 8}));
  EXPECT_EQ(emu.node(kThis)->total.vcores, 8);

  YarnStatus st = ds.status();
  EXPECT_EQ(st.updates_ok, 3u);
  EXPECT_EQ(st.last_error, "");
  for (const auto& p : emu.rm_posts()) EXPECT_EQ(posted(p).memory_mb, 16384);
}

TEST(YarnDownscaler, DeadbandIsNotPosted) {
  YarnEmulator emu;
  setup_nodes(emu);
  TempDir mount;
  YarnConfig cfg = test_config(emu);
  cfg.deadband_vcores = 2;
  YarnDownscaler ds(cfg, false, mount.path.string(), {"worker1"});
  ds.round(offer_at(kT0, 7.5));  // 7 vs 8 advertised: inside the band of 2
  EXPECT_EQ(ds.status().last_action, "deadband");
  EXPECT_EQ(ds.status().target.vcores, 7);
  ds.round(offer_at(kT0 + 2 * kS, 12));  // above the node: clamped to 8 = advertised
  EXPECT_EQ(ds.status().last_action, "hold");
  EXPECT_TRUE(emu.rm_posts().empty());
  ds.round(offer_at(kT0 + 4 * kS, 6));  // 2 below: out of the band
  EXPECT_EQ(ds.status().last_action, "shrink");
  ASSERT_EQ(emu.rm_posts().size(), 1u);
  EXPECT_EQ(posted(emu.rm_posts()[0]).vcores, 6);
}

namespace {

// Two applications: root.adhoc (AM 1 vcore, one 2-vcore container) and
// root.prod (AM 1 vcore, two 2-vcore containers): 8 vcores in use.
const std::string kAdhocAm = "container_1700000000000_0001_01_000001";
const std::string kAdhoc2 = "container_1700000000000_0001_01_000002";
const std::string kProdAm = "container_e17_1700000000000_0002_01_000001";
const std::string kProd2 = "container_e17_1700000000000_0002_01_000002";
const std::string kProd3 = "container_e17_1700000000000_0002_01_000003";

void setup_workload(YarnEmulator& emu) {
  EmuApp adhoc;
  adhoc.id = "application_1700000000000_0001";
  adhoc.queue = "root.adhoc";
  adhoc.am_container = kAdhocAm;
  adhoc.am_node = kThis;
  emu.add_app(adhoc);
  EmuApp prod;
  prod.id = "application_1700000000000_0002";
  prod.queue = "root.prod";
  prod.am_container = kProdAm;
  prod.am_node = kThis;
  emu.add_app(prod);
  emu.add_container({kAdhocAm, "RUNNING", 1, 1024, "alice", "GUARANTEED"});
  emu.add_container({kAdhoc2, "RUNNING", 2, 1024, "alice", "GUARANTEED"});
  emu.add_container({kProdAm, "RUNNING", 1, 1024, "bob", "GUARANTEED"});
  emu.add_container({kProd2, "RUNNING", 2, 1024, "bob", "GUARANTEED"});
  emu.add_container({kProd3, "RUNNING", 2, 1024, "bob", "GUARANTEED"});
  emu.add_container({"container_1700000000000_0001_01_000009", "EXITED_WITH_SUCCESS", 4, 1024, "alice",
                     "GUARANTEED"});  // done: holds nothing
}

// What BPF saw: the cgroups of `ids` (none of which exists under the mount).
YarnOffer offer_with(uint64_t now_ns, double budget, const std::vector<std::string>& ids) {
  YarnOffer o = offer_at(now_ns, budget);
  for (const auto& id : ids) o.containers[id] = {"/hadoop-yarn/" + id, 0};
  return o;
}

}  // namespace

TEST(YarnDownscaler, ReclaimMarksVictimsAndKillsAfterTheGrace) {
  YarnEmulator emu;
  setup_nodes(emu);
  setup_workload(emu);
  TempDir mount;  // no container cgroups under it: a kill fails with ENOENT, harmlessly
  YarnConfig cfg = test_config(emu);
  cfg.queue_priority = {{"root.prod", 10}};
  YarnDownscaler ds(cfg, false, mount.path.string(), {"worker1"});
  const std::vector<std::string> all = {kAdhocAm, kAdhoc2, kProdAm, kProd2, kProd3};

  ds.round(offer_with(kT0, 3, all));
  YarnStatus st = ds.status();
  EXPECT_EQ(st.last_error, "");
  EXPECT_EQ(st.containers, 5u);
  EXPECT_EQ(emu.node(kThis)->total.vcores, 3);
  // 8 vcores on 3: adhoc (priority 0) goes first, its AM last within it, then
  // the youngest prod container: 8-2-1-2 = 3.
  EXPECT_EQ(st.victims, 3u);
  EXPECT_EQ(st.kills_ok + st.kills_failed + st.kills_dry_run, 0u);

  ds.round(offer_with(kT0 + 2 * kS, 3, all));  // inside the grace
  st = ds.status();
  EXPECT_EQ(st.victims, 3u);
  EXPECT_EQ(st.kills_ok + st.kills_failed + st.kills_dry_run, 0u);

  ds.round(offer_with(kT0 + 3 * kS, 3, all));  // grace over: kills attempted (and fail: no cgroup)
  st = ds.status();
  EXPECT_EQ(st.kills_failed, 3u);
  EXPECT_EQ(st.kills_ok, 0u);
  EXPECT_EQ(st.kills_dry_run, 0u);

  ds.round(offer_with(kT0 + 4 * kS, 3, all));  // a failed kill is not retried every round
  EXPECT_EQ(ds.status().kills_failed, 3u);

  // The containers end by themselves: no victims any more.
  emu.clear_containers();
  ds.round(offer_with(kT0 + 5 * kS, 3, {}));
  st = ds.status();
  EXPECT_EQ(st.containers, 0u);
  EXPECT_EQ(st.victims, 0u);
  EXPECT_EQ(st.kills_failed, 3u);
}

TEST(YarnDownscaler, DryRunPostsNothingAndOnlyCountsKills) {
  YarnEmulator emu;
  setup_nodes(emu);
  setup_workload(emu);
  TempDir mount;
  YarnConfig cfg = test_config(emu);
  cfg.queue_priority = {{"root.prod", 10}};
  YarnDownscaler ds(cfg, /*dry_run=*/true, mount.path.string(), {"worker1"});
  // Only the expected victims' cgroups are offered: a kill of any other
  // container would count as failed ("no cgroup of it was seen").
  const std::vector<std::string> victims = {kAdhoc2, kAdhocAm, kProd3};

  ds.round(offer_with(kT0, 3, victims));
  YarnStatus st = ds.status();
  EXPECT_EQ(st.last_error, "");
  EXPECT_TRUE(st.dry_run);
  EXPECT_EQ(st.updates_dry_run, 1u);
  EXPECT_EQ(st.updates_ok, 0u);
  EXPECT_EQ(st.advertised, (YarnResource{3, 16384}));  // as if the RM had taken it
  EXPECT_EQ(st.victims, 3u);

  ds.round(offer_with(kT0 + 3 * kS, 3, victims));
  st = ds.status();
  EXPECT_GE(st.updates_dry_run, 1u);
  EXPECT_EQ(st.victims, 3u);
  EXPECT_EQ(st.kills_dry_run, 3u);
  EXPECT_EQ(st.kills_failed, 0u);
  EXPECT_EQ(st.kills_ok, 0u);

  ds.stop(/*restore=*/true);  // dry-run: no restore either
  EXPECT_TRUE(emu.rm_posts().empty());
  EXPECT_EQ(emu.node(kThis)->total, (YarnResource{8, 16384}));
  EXPECT_EQ(emu.node(kThis)->updates, 0);
  EXPECT_FALSE(emu.requests(Srv::RM0, "GET").empty());  // reads still happen
}

TEST(YarnDownscaler, RmOutageIsReportedAndRecovered) {
  YarnEmulator emu;
  setup_nodes(emu);
  TempDir mount;
  YarnDownscaler ds(test_config(emu), false, mount.path.string(), {"worker1"});

  emu.set_refuse(Srv::RM0, true);
  ds.round(offer_at(kT0, 3));
  YarnStatus st = ds.status();
  EXPECT_NE(st.last_error, "");
  EXPECT_NE(st.last_error.find("refused"), std::string::npos) << st.last_error;
  EXPECT_EQ(st.node_id, "");
  EXPECT_GE(st.rm_failures, 1u);

  emu.set_refuse(Srv::RM0, false);
  ds.round(offer_at(kT0 + kS, 3));
  st = ds.status();
  EXPECT_EQ(st.last_error, "");
  EXPECT_EQ(st.node_id, kThis);
  EXPECT_EQ(st.updates_ok, 1u);
  EXPECT_EQ(emu.node(kThis)->total.vcores, 3);

  // Down again when the inventory is due: the error shows; back: it clears.
  emu.set_refuse(Srv::RM0, true);
  ds.round(offer_at(kT0 + 3 * kS, 3));
  st = ds.status();
  EXPECT_NE(st.last_error, "");
  emu.set_refuse(Srv::RM0, false);
  ds.round(offer_at(kT0 + 5 * kS, 6));  // grown budget, but growth waits; the read succeeds
  st = ds.status();
  EXPECT_EQ(st.last_error, "");
  EXPECT_EQ(st.last_action, "wait_stable");
}

TEST(YarnDownscaler, FailedPostIsCountedAndRetried) {
  YarnEmulator emu;
  setup_nodes(emu);
  TempDir mount;
  Faults f;
  f.post_status = 403;  // reads allowed, node updates not (the RM's admin ACL)
  emu.set_faults(Srv::RM0, f);
  YarnDownscaler ds(test_config(emu), false, mount.path.string(), {"worker1"});
  ds.round(offer_at(kT0, 3));
  YarnStatus st = ds.status();
  EXPECT_EQ(st.updates_failed, 1u);
  EXPECT_EQ(st.updates_ok, 0u);
  EXPECT_EQ(st.advertised.vcores, 8);
  EXPECT_EQ(emu.node(kThis)->total.vcores, 8);
  // Not again within the refresh interval (a missing permission must not
  // become a POST per tick), then once more.
  ds.round(offer_at(kT0 + kS / 10, 3));
  ds.round(offer_at(kT0 + kS / 2, 3));
  EXPECT_EQ(emu.rm_posts().size(), 1u);
  ds.round(offer_at(kT0 + kS + kS / 10, 3));
  EXPECT_EQ(emu.rm_posts().size(), 2u);
  EXPECT_EQ(ds.status().updates_failed, 2u);
  emu.set_faults(Srv::RM0, Faults{});
  ds.round(offer_at(kT0 + 2 * kS + 2 * kS / 10, 3));
  EXPECT_EQ(ds.status().updates_ok, 1u);
  EXPECT_EQ(emu.node(kThis)->total.vcores, 3);
  EXPECT_EQ(ds.status().last_error, "");
}

// The POST's error stays in last_error while POSTs fail, even across
// rounds whose reads succeed.
TEST(YarnDownscaler, FailedPostShowsInLastError) {
  YarnEmulator emu;
  setup_nodes(emu);
  TempDir mount;
  Faults f;
  f.post_status = 403;
  emu.set_faults(Srv::RM0, f);
  YarnDownscaler ds(test_config(emu), false, mount.path.string(), {"worker1"});
  ds.round(offer_at(kT0, 3));
  EXPECT_NE(ds.status().last_error.find("403"), std::string::npos) << ds.status().last_error;
  ds.round(offer_at(kT0 + kS / 10, 3));
  EXPECT_NE(ds.status().last_error.find("403"), std::string::npos) << ds.status().last_error;
  ds.round(offer_at(kT0 + 3 * kS, 3));  // reads again, posts again, fails again
  EXPECT_NE(ds.status().last_error.find("403"), std::string::npos) << ds.status().last_error;
}

TEST(YarnDownscaler, HaStandbyRedirectReachesTheActiveRm) {
  YarnEmulator emu(/*ha=*/true);  // RM0 standby, RM1 active
  setup_nodes(emu);
  TempDir mount;
  YarnDownscaler ds(test_config(emu), false, mount.path.string(), {"worker1"});
  ds.round(offer_at(kT0, 3));
  YarnStatus st = ds.status();
  EXPECT_EQ(st.last_error, "");
  EXPECT_EQ(st.rm, emu.rm_url(1));
  EXPECT_EQ(emu.node(kThis)->total.vcores, 3);
  auto posts = emu.rm_posts();
  ASSERT_EQ(posts.size(), 1u);
  EXPECT_EQ(posts[0].server, Srv::RM1);
  EXPECT_EQ(posts[0].status, 200);
  EXPECT_GE(st.rm_failovers, 1u);
}

TEST(YarnDownscaler, OfferNeverBlocksOnASlowRm) {
  YarnEmulator emu;
  setup_nodes(emu);
  Faults slow;
  slow.delay_ms = 2000;
  emu.set_faults(Srv::RM0, slow);
  TempDir mount;
  YarnConfig cfg = test_config(emu);
  cfg.request_timeout_ms = 5000;
  YarnDownscaler ds(cfg, false, mount.path.string(), {"worker1"});
  ds.start();
  long worst = 0;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    ds.offer(offer_at(kT0 + static_cast<uint64_t>(i) * kS / 10, 3 + i));
    worst = std::max(worst, ms_since(t0));
    auto s0 = Clock::now();
    (void)ds.status();
    worst = std::max(worst, ms_since(s0));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_LT(worst, 500) << "offer()/status() waited for the worker";
  // The worker is inside a request that the RM answers only after 2 s.
  EXPECT_GE(emu.arrivals(Srv::RM0), 1);
  EXPECT_TRUE(emu.requests(Srv::RM0).empty());
  auto t0 = Clock::now();
  ds.stop(false);  // aborts the request in flight
  long took = ms_since(t0);
  EXPECT_LT(took, 1500) << "stop() waited for the slow RM";
  EXPECT_TRUE(emu.rm_posts().empty());
}

TEST(YarnDownscaler, StopRestoresTheConfiguredResources) {
  YarnEmulator emu;
  setup_nodes(emu);
  TempDir mount;
  YarnDownscaler ds(test_config(emu), false, mount.path.string(), {"worker1"});
  ds.round(offer_at(kT0, 3));
  ASSERT_EQ(emu.node(kThis)->total, (YarnResource{3, 16384}));
  ds.stop(/*restore=*/true);
  auto posts = emu.rm_posts();
  ASSERT_EQ(posts.size(), 2u);
  Posted p = posted(posts[1]);
  EXPECT_EQ(p.vcores, 8);
  EXPECT_EQ(p.memory_mb, 16384);
  EXPECT_EQ(p.timeout, -1);
  EXPECT_EQ(posts[1].path, kResourcePath);
  EXPECT_EQ(emu.node(kThis)->total, (YarnResource{8, 16384}));
  ds.stop(true);  // idempotent
  EXPECT_EQ(emu.rm_posts().size(), 2u);
}

TEST(YarnDownscaler, StopWithoutRestoreOrWithNothingToRestorePostsNothing) {
  YarnEmulator emu;
  setup_nodes(emu);
  TempDir mount;
  {
    YarnDownscaler ds(test_config(emu), false, mount.path.string(), {"worker1"});
    ds.round(offer_at(kT0, 3));
    ds.stop(false);
  }
  EXPECT_EQ(emu.rm_posts().size(), 1u);
  EXPECT_EQ(emu.node(kThis)->total.vcores, 3);
  {
    emu.set_node_total(kThis, {8, 16384});  // back to full size on both sides
    emu.set_nm_info(kThis, "worker1.example.com", {8, 16384});
    YarnDownscaler ds(test_config(emu), false, mount.path.string(), {"worker1"});
    ds.round(offer_at(kT0, 8));  // at the configured size already
    ds.stop(true);
  }
  {
    YarnDownscaler ds(test_config(emu), false, mount.path.string(), {"nosuchhost"});
    ds.round(offer_at(kT0, 3));  // the node is never found
    ds.stop(true);
  }
  EXPECT_EQ(emu.rm_posts().size(), 1u);
}

// After a shrink through the RM the NodeManager itself reports the shrunk
// size (the emulator does what the NM's heartbeat does). The maximum must not
// follow it down: the node grows back to its real size, and a restarted
// downscaler finds that size in its file.
TEST(YarnDownscaler, TheMaximumDoesNotRatchetDownAndSurvivesARestart) {
  YarnEmulator emu;
  setup_nodes(emu);
  TempDir mount;
  const std::string max_file = (mount.path / "state.json.yarn").string();
  YarnConfig cfg = test_config(emu);
  {
    YarnDownscaler ds(cfg, false, mount.path.string(), {"worker1"}, max_file);
    ds.round(offer_at(kT0, 3));
    ASSERT_EQ(emu.node(kThis)->total.vcores, 3);
    ds.round(offer_at(kT0 + 2 * kS, 3));  // a re-read: the NM now says 3 vcores
    EXPECT_EQ(ds.status().configured.vcores, 8);
    // The budget comes back for longer than grow_stable: grow to the real size.
    for (uint64_t t = 3; t <= 10; t++) ds.round(offer_at(kT0 + t * kS, 20));
    EXPECT_EQ(emu.node(kThis)->total.vcores, 8);
    ds.round(offer_at(kT0 + 11 * kS, 2));  // shrink again, then "crash"
    ASSERT_EQ(emu.node(kThis)->total.vcores, 2);
  }
  YarnDownscaler again(cfg, false, mount.path.string(), {"worker1"}, max_file);
  again.round(offer_at(kT0 + 20 * kS, 2));
  EXPECT_EQ(again.status().configured.vcores, 8) << "the restart took the shrunk NM figures as the maximum";
  again.stop(/*restore=*/true);
  EXPECT_EQ(emu.node(kThis)->total.vcores, 8);
}

// A NodeManager that restarts comes back with a new id (an ephemeral port);
// the old one turns LOST. The downscaler finds the new one.
TEST(YarnDownscaler, ALostNodeIsFoundAgainUnderItsNewId) {
  YarnEmulator emu;
  setup_nodes(emu);
  TempDir mount;
  YarnDownscaler ds(test_config(emu), false, mount.path.string(), {"worker1"});
  ds.round(offer_at(kT0, 3));
  ASSERT_EQ(ds.status().node_id, kThis);
  EmuNode lost;
  lost.id = kThis;
  lost.host = "worker1.example.com";
  lost.state = "LOST";
  emu.add_node(lost);
  const std::string fresh = "worker1.example.com:45999";
  emu.add_this_node(fresh, "worker1.example.com", {8, 16384});
  ds.round(offer_at(kT0 + 2 * kS, 3));  // sees LOST, forgets the id
  ds.round(offer_at(kT0 + 3 * kS, 3));  // finds the new one, posts to it
  EXPECT_EQ(ds.status().node_id, fresh);
  EXPECT_EQ(emu.node(fresh)->total.vcores, 3);
}
