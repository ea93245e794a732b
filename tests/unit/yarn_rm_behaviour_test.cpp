// What a real ResourceManager does differently from what the downscaler first
// assumed (checked against Hadoop 3.5.0 in tests/yarn), each against the
// emulator that now does the same: other resource types zeroed by a resize,
// one reclaimer, the AM without view access, node states, the POST's answer,
// HTTP errors, and queue names.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "khagent/actuate/yarn_resize.h"
#include "khagent/app/yarn_downscaler.h"
#include "khagent/collect/yarn_rest.h"
#include "khagent/config/config.h"
#include "khagent/policy/yarn.h"
#include "khagent/util/hadoop_error.h"
#include "test_util.h"
#include "yarn_emulator.h"

using namespace khagent;
using yarntest::EmuApp;
using yarntest::EmuContainer;
using yarntest::EmuNode;
using yarntest::Faults;
using yarntest::Srv;
using yarntest::YarnEmulator;

namespace {

using json = nlohmann::json;

constexpr uint64_t kS = 1'000'000'000ULL;
constexpr uint64_t kT0 = 1000 * kS;
const std::string kThis = "worker1.example.com:45454";
const std::string kApp = "application_1700000000000_0001";
const std::string kAm = "container_1700000000000_0001_01_000001";

YarnConfig config_for(const YarnEmulator& emu) {
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
  c.min_vcores = 1;
  c.grow_stable_ns = 2 * kS;
  c.grow_interval_ns = 5 * kS;
  c.reclaim_grace_ns = 3 * kS;
  return c;
}

YarnOffer offer_at(uint64_t now_ns, double budget) {
  YarnOffer o;
  o.now_ns = now_ns;
  o.budget_cores = budget;
  return o;
}

// The node, one application in `queue` with an AM and `workers` containers of
// 1 vcore each, and an offer that knows every container's cgroup.
YarnOffer with_app(YarnEmulator& emu, const TempDir& mount, int workers, const std::string& queue = "root.default") {
  EmuApp app;
  app.id = kApp;
  app.queue = queue;
  app.am_container = kAm;
  emu.add_app(app);
  YarnOffer o;
  for (int i = 1; i <= workers + 1; i++) {
    char id[64];
    std::snprintf(id, sizeof id, "container_1700000000000_0001_01_%06d", i);
    emu.add_container({id, "RUNNING", 1, 1024, "alice", "GUARANTEED"});
    std::filesystem::create_directories(mount.path / "yarn" / id);
    o.containers[id] = {"/yarn/" + std::string(id), 0};
  }
  return o;
}

// A killer that records instead of killing (the containers have no processes).
struct KillLog {
  std::vector<std::string> killed;
  YarnDownscaler::KillFn fn() {
    return [this](const std::string&, const std::string& rel) -> Result<CgroupKillResult> {
      killed.push_back(rel.substr(rel.rfind('/') + 1));
      CgroupKillResult r;
      r.empty = true;
      return r;
    };
  }
};

}  // namespace

// ---- 1. other resource types ---------------------------------------------------

TEST(YarnRmBehaviour, NodeReportsCarryOtherResourceTypes) {
  auto n = parse_yarn_node(R"({"node":{"id":"h:1","state":"RUNNING","totalResource":{"memory":4096,"vCores":8,
      "resourceInformations":{"resourceInformation":[{"name":"memory-mb","value":4096,"units":"Mi"},
      {"name":"vcores","value":8},{"name":"yarn.io/gpu","value":4},{"name":"yarn.io/fpga","value":0}]}}}})");
  ASSERT_TRUE(n.ok()) << n.error().str();
  EXPECT_EQ(n->total, (YarnResource{8, 4096}));
  EXPECT_EQ(n->other_resources, (std::map<std::string, int64_t>{{"yarn.io/fpga", 0}, {"yarn.io/gpu", 4}}));
  auto bad = parse_yarn_node(R"({"node":{"id":"h:1","totalResource":{"memory":1,"vCores":1,
      "resourceInformations":{"resourceInformation":[{"name":"yarn.io/gpu","value":-1}]}}}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().err, ERANGE);
}

TEST(YarnRmBehaviour, TheBodyCarriesTheWholeVector) {
  json b = json::parse(node_resource_body({2, 2048}, {{"yarn.io/gpu", 4}}, -1));
  EXPECT_EQ(b["resource"]["memory"], 2048);
  EXPECT_EQ(b["resource"]["vCores"], 2);
  const json& infos = b["resource"]["resourceInformations"]["resourceInformation"];
  ASSERT_EQ(infos.size(), 3u) << b.dump();
  EXPECT_EQ(infos[0], (json{{"name", "memory-mb"}, {"value", 2048}, {"units", "Mi"}}));
  EXPECT_EQ(infos[1], (json{{"name", "vcores"}, {"value", 2}}));
  EXPECT_EQ(infos[2], (json{{"name", "yarn.io/gpu"}, {"value", 4}}));
  EXPECT_EQ(b["overCommitTimeout"], -1);
  // Without other types, the body an RM without resource types expects.
  json plain = json::parse(node_resource_body({2, 2048}, {}, -1));
  EXPECT_FALSE(plain["resource"].contains("resourceInformations"));
}

TEST(YarnRmBehaviour, AGpuNodeIsNotResizedNorRestored) {
  YarnEmulator emu;
  emu.add_this_node(kThis, "worker1.example.com", {8, 16384});
  EmuNode n = *emu.node(kThis);
  n.others = {{"yarn.io/gpu", 4}};
  emu.add_node(n);
  TempDir mount;
  YarnDownscaler ds(config_for(emu), false, mount.path.string(), {"worker1"});
  ds.round(offer_at(kT0, 2));
  ds.round(offer_at(kT0 + 2 * kS, 2));
  EXPECT_TRUE(emu.rm_posts().empty());
  YarnStatus st = ds.status();
  EXPECT_EQ(st.last_action, "refused");
  EXPECT_NE(st.last_error.find("yarn.io/gpu=4"), std::string::npos) << st.last_error;
  ds.stop(true);
  EXPECT_TRUE(emu.rm_posts().empty());
  EXPECT_EQ(emu.node(kThis)->others.at("yarn.io/gpu"), 4);
}

TEST(YarnRmBehaviour, WhenAllowedTheVectorIsPostedAndTheRmStillZeroesIt) {
  YarnEmulator emu;
  emu.add_this_node(kThis, "worker1.example.com", {8, 16384});
  EmuNode n = *emu.node(kThis);
  n.others = {{"yarn.io/gpu", 4}};
  emu.add_node(n);
  TempDir mount;
  YarnConfig cfg = config_for(emu);
  cfg.resize_with_other_resources = true;
  YarnDownscaler ds(cfg, false, mount.path.string(), {"worker1"});
  ds.round(offer_at(kT0, 2));
  auto posts = emu.rm_posts();
  ASSERT_EQ(posts.size(), 1u);
  json b = json::parse(posts[0].body);
  EXPECT_EQ(b["resource"]["resourceInformations"]["resourceInformation"][2]["value"], 4) << posts[0].body;
  EXPECT_EQ(emu.node(kThis)->others.at("yarn.io/gpu"), 0);  // as Hadoop 3.5.0 does
  ds.stop(true);
  posts = emu.rm_posts();
  ASSERT_EQ(posts.size(), 2u);
  json back = json::parse(posts[1].body);
  EXPECT_EQ(back["resource"]["vCores"], 8);
  EXPECT_EQ(back["resource"]["resourceInformations"]["resourceInformation"][2]["value"], 4) << posts[1].body;
}

// ---- 2. one reclaimer ----------------------------------------------------------

TEST(YarnRmBehaviour, KhagentReclaimsAndTellsTheRmNever) {
  YarnEmulator emu;
  emu.add_this_node(kThis, "worker1.example.com", {8, 16384});
  TempDir mount;
  YarnOffer base = with_app(emu, mount, 5);  // 6 vcores used
  KillLog kills;
  YarnDownscaler ds(config_for(emu), false, mount.path.string(), {"worker1"});
  ds.set_killer(kills.fn());
  YarnOffer o = base;
  o.now_ns = kT0;
  o.budget_cores = 4;
  ds.round(o);
  ASSERT_EQ(emu.rm_posts().size(), 1u);
  EXPECT_EQ(emu.node(kThis)->last_over_commit_timeout, -1);
  EXPECT_TRUE(kills.killed.empty());
  o.now_ns = kT0 + 4 * kS;  // past the 3 s grace
  ds.round(o);
  EXPECT_EQ(kills.killed, (std::vector<std::string>{"container_1700000000000_0001_01_000006",
                                                    "container_1700000000000_0001_01_000005"}));
}

TEST(YarnRmBehaviour, WithReclaimerRmTheRmGetsTheTimeoutAndKhagentKillsNothing) {
  YarnEmulator emu;
  emu.add_this_node(kThis, "worker1.example.com", {8, 16384});
  TempDir mount;
  YarnOffer base = with_app(emu, mount, 5);
  KillLog kills;
  YarnConfig cfg = config_for(emu);
  cfg.reclaimer = Reclaimer::Rm;
  cfg.over_commit_timeout_ms = 120000;
  cfg.emergency = true;
  YarnDownscaler ds(cfg, false, mount.path.string(), {"worker1"});
  ds.set_killer(kills.fn());
  YarnOffer o = base;
  o.budget_cores = 4;
  o.emergency = true;
  o.containers.begin()->second.caused_total_ns = 1;
  for (uint64_t t : {kT0, kT0 + 4 * kS, kT0 + 10 * kS}) {
    o.now_ns = t;
    ds.round(o);
  }
  EXPECT_EQ(emu.node(kThis)->last_over_commit_timeout, 120000);
  EXPECT_TRUE(kills.killed.empty());
  EXPECT_EQ(ds.status().victims, 2u);  // still reported
  EXPECT_EQ(ds.status().kills_ok, 0u);
}

// ---- 3. the AM without view access ---------------------------------------------

TEST(YarnRmBehaviour, FirstContainerOfAnAttempt) {
  EXPECT_TRUE(first_container_of_attempt("container_1700000000000_0001_01_000001", 1));
  EXPECT_TRUE(first_container_of_attempt("container_e17_1700000000000_0001_02_000001", 2));
  EXPECT_FALSE(first_container_of_attempt("container_1700000000000_0001_02_000001", 1));
  EXPECT_FALSE(first_container_of_attempt("container_1700000000000_0001_01_000002", 1));
  EXPECT_FALSE(first_container_of_attempt("container_1700000000000_0001_01_000001", 0));
  EXPECT_FALSE(first_container_of_attempt("nonsense", 1));
  auto a = parse_am_attempt(R"({"appAttempts":{"appAttempt":[{"id":1,"containerId":""},{"id":2,"containerId":""}]}})");
  ASSERT_TRUE(a.ok()) << a.error().str();
  EXPECT_EQ(a->attempt, 2);
  EXPECT_EQ(a->container, "");
}

TEST(YarnRmBehaviour, WithoutViewAccessTheAmIsTheAttemptsFirstContainer) {
  YarnEmulator emu;
  emu.add_this_node(kThis, "worker1.example.com", {8, 16384});
  emu.set_view_access(false);
  TempDir mount;
  YarnOffer base = with_app(emu, mount, 1);  // AM + 1: 2 vcores
  KillLog kills;
  YarnDownscaler ds(config_for(emu), false, mount.path.string(), {"worker1"});
  ds.set_killer(kills.fn());
  YarnOffer o = base;
  o.budget_cores = 1;  // one must go: the worker, not the AM
  o.now_ns = kT0;
  ds.round(o);
  o.now_ns = kT0 + 4 * kS;
  ds.round(o);
  EXPECT_EQ(kills.killed, (std::vector<std::string>{"container_1700000000000_0001_01_000002"}));
  // The RM was asked, and showed no container.
  EXPECT_FALSE(emu.requests(Srv::RM0, "GET", "/ws/v1/cluster/apps/" + kApp + "/appattempts").empty());
}

// ---- 4. node states ------------------------------------------------------------

TEST(YarnRmBehaviour, ADecommissioningNodeIsNotPostedAgainAndAgain) {
  YarnEmulator emu;
  emu.add_this_node(kThis, "worker1.example.com", {8, 16384});
  emu.set_node_state(kThis, "DECOMMISSIONING");
  TempDir mount;
  YarnDownscaler ds(config_for(emu), false, mount.path.string(), {"worker1"});
  for (int i = 0; i < 5; i++) ds.round(offer_at(kT0 + static_cast<uint64_t>(i) * 2 * kS, 4));
  EXPECT_TRUE(emu.rm_posts().empty());
  EXPECT_EQ(ds.status().last_action, "hold_node_state");
  EXPECT_NE(ds.status().last_error.find("DECOMMISSIONING"), std::string::npos) << ds.status().last_error;
  ds.stop(true);
  EXPECT_TRUE(emu.rm_posts().empty());
}

TEST(YarnRmBehaviour, ALostNodeIsNotPostedAndItsPostIs500) {
  YarnEmulator emu;
  emu.add_this_node(kThis, "worker1.example.com", {8, 16384});
  TempDir mount;
  YarnConfig cfg = config_for(emu);
  cfg.node_id = kThis;  // configured: not looked up again
  cfg.nm_url = emu.nm_url();
  YarnDownscaler ds(cfg, false, mount.path.string(), {});
  emu.set_node_state(kThis, "LOST");
  ds.round(offer_at(kT0, 4));
  EXPECT_TRUE(emu.rm_posts().empty());
  EXPECT_NE(ds.status().last_error.find("LOST"), std::string::npos) << ds.status().last_error;
  HttpClientOptions o;
  o.base_urls = {emu.rm_url()};
  o.retries = 0;
  HttpClient rm(o);
  auto r = post_node_resource(rm, kThis, {2, 2048}, {}, -1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EIO);
  EXPECT_NE(r.error().message.find("HTTP 500"), std::string::npos) << r.error().message;
}

// ---- 5. the update is queued ---------------------------------------------------

TEST(YarnRmBehaviour, AnUpdateNotYetVisibleIsNotPostedAgain) {
  YarnEmulator emu;
  emu.add_this_node(kThis, "worker1.example.com", {8, 16384});
  emu.set_update_lag(1);  // one read after the POST still shows 8 vcores
  TempDir mount;
  YarnDownscaler ds(config_for(emu), false, mount.path.string(), {"worker1"});
  for (int i = 0; i < 4; i++) ds.round(offer_at(kT0 + static_cast<uint64_t>(i) * kS + 1, 4));
  ASSERT_EQ(emu.rm_posts().size(), 1u);
  EXPECT_EQ(ds.status().advertised, (YarnResource{4, 16384}));
  EXPECT_EQ(emu.node(kThis)->total, (YarnResource{4, 16384}));
}

// ---- 6. permissions and errors -------------------------------------------------

TEST(YarnRmBehaviour, HadoopErrorsAreClassifiedByWhatTheBodySays) {
  auto html401 = hadoop_http_error(
      401, "<html>\n<head>\n<title>Error 401 Authentication required</title>\n</head><body>...</body></html>");
  EXPECT_EQ(html401.err, EACCES);
  EXPECT_EQ(html401.message, "HTTP 401: Error 401 Authentication required (HTML page)");
  // Jetty's JSON page (what the real RM sent khagent's client).
  auto json401 = hadoop_http_error(401, R"({ "servlet":"org.glassfish.jersey.servlet.ServletContainer-1",
      "message":"Authentication required", "url":"/ws/v1/cluster/nodes", "status":"401" })");
  EXPECT_EQ(json401.err, EACCES);
  EXPECT_EQ(json401.message, "HTTP 401: Authentication required (web server)");
  auto json404 = hadoop_http_error(404, R"({"servlet":"x","message":"Not Found","url":"/ws/v1/x","status":"404"})");
  EXPECT_EQ(json404.err, EOPNOTSUPP);
  auto unknown = hadoop_http_error(
      404, R"({"RemoteException":{"exception":"NotFoundException","message":"nodeId, h:1, is not found"}})");
  EXPECT_EQ(unknown.err, ENOENT);
  EXPECT_EQ(unknown.message, "HTTP 404: NotFoundException: nodeId, h:1, is not found");
  auto no_endpoint = hadoop_http_error(404, "<html><head><title>Error 404 Not Found</title></head></html>");
  EXPECT_EQ(no_endpoint.err, EOPNOTSUPP);
  EXPECT_NE(no_endpoint.message.find("no such REST endpoint"), std::string::npos) << no_endpoint.message;
  EXPECT_EQ(hadoop_http_error(404, "").err, EOPNOTSUPP);
  EXPECT_EQ(hadoop_http_error(403, "{}").err, EACCES);
  EXPECT_EQ(hadoop_http_error(500, R"({"RemoteException":{"exception":"YarnRuntimeException"}})").err, EIO);
}

TEST(YarnRmBehaviour, AMissingUserIsA401PageAndAMissingEndpointIsNotAnUnknownNode) {
  YarnEmulator emu;
  emu.add_this_node(kThis, "worker1.example.com", {8, 16384});
  Faults f;
  f.require_user = true;
  emu.set_faults(Srv::RM0, f);
  HttpClientOptions o;
  o.base_urls = {emu.rm_url()};
  o.retries = 0;
  HttpClient rm(o);  // no user
  auto denied = post_node_resource(rm, kThis, {2, 2048}, {}, -1);
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.error().err, EACCES);
  EXPECT_NE(denied.error().message.find("Authentication required"), std::string::npos) << denied.error().message;
  // Hadoop 2.x: no update-resource endpoint; its 404 is not "unknown node".
  Faults h2;
  h2.hadoop2 = true;
  emu.set_faults(Srv::RM0, h2);
  auto old = post_node_resource(rm, kThis, {2, 2048}, {}, -1);
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.error().err, EOPNOTSUPP) << old.error().message;
  EXPECT_EQ(hadoop_http_error(404, R"({"RemoteException":{"exception":"NotFoundException",
      "message":"null for uri: http://rm:8088/ws/v1/cluster/nodes/h:1/resource"}})")
                .err,
            EOPNOTSUPP);
  // A Hadoop 3 server without the path: an HTML 404 page.
  HttpClientOptions no;
  no.base_urls = {emu.nm_url()};
  no.retries = 0;
  HttpClient nm(no);
  YarnRest wrong(nm, nm);
  auto missing = wrong.node(kThis);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().err, EOPNOTSUPP) << missing.error().message;
  // The RM's own NotFoundException: an unknown node.
  emu.set_faults(Srv::RM0, {});
  YarnRest rest(rm, rm);
  auto gone = rest.node("nosuch:1");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().err, ENOENT);
}

// ---- 7. queue names ------------------------------------------------------------

TEST(YarnRmBehaviour, QueuePriorityMatchesLeafOrFullPath) {
  std::map<std::string, int> p = {{"low", -5}, {"root.prod", 10}, {"a.batch", 3}, {"root.b.batch", 7}};
  EXPECT_EQ(queue_priority_for("root.prod", p), 10);  // exact
  EXPECT_EQ(queue_priority_for("prod", p), 10);       // leaf against a full-path key
  EXPECT_EQ(queue_priority_for("root.low", p), -5);   // full path against a leaf key
  EXPECT_EQ(queue_priority_for("root.x.low", p), -5);
  EXPECT_EQ(queue_priority_for("root.a.batch", p), 3);  // longest dotted suffix
  EXPECT_EQ(queue_priority_for("root.b.batch", p), 7);  // exact
  EXPECT_EQ(queue_priority_for("batch", p), 3);         // ambiguous leaf: the lowest
  EXPECT_EQ(queue_priority_for("root.slow", p), 0);     // not a dotted suffix
  EXPECT_EQ(queue_priority_for("", p), 0);
  EXPECT_EQ(queue_priority_for("root.prod", {}), 0);
}

TEST(YarnRmBehaviour, ReclaimOrderUsesLeafKeysForFullPathQueues) {
  YarnEmulator emu;
  emu.add_this_node(kThis, "worker1.example.com", {8, 16384});
  TempDir mount;
  YarnOffer o = with_app(emu, mount, 1, "root.high");  // AM + 1
  EmuApp low;
  low.id = "application_1700000000000_0002";
  low.queue = "root.low";
  low.am_container = "container_1700000000000_0002_01_000001";
  emu.add_app(low);
  for (const char* id : {"container_1700000000000_0002_01_000001", "container_1700000000000_0002_01_000002"}) {
    emu.add_container({id, "RUNNING", 1, 1024, "alice", "GUARANTEED"});
    o.containers[id] = {std::string("/yarn/") + id, 0};
  }
  KillLog kills;
  YarnConfig cfg = config_for(emu);
  cfg.queue_priority = {{"high", 10}, {"root.low", -1}};
  YarnDownscaler ds(cfg, false, mount.path.string(), {"worker1"});
  ds.set_killer(kills.fn());
  o.budget_cores = 2;  // 4 used: two go, both of root.low (its AM last)
  o.now_ns = kT0;
  ds.round(o);
  o.now_ns = kT0 + 4 * kS;
  ds.round(o);
  EXPECT_EQ(kills.killed, (std::vector<std::string>{"container_1700000000000_0002_01_000002",
                                                    "container_1700000000000_0002_01_000001"}));
}

// ---- configuration -------------------------------------------------------------

TEST(YarnRmBehaviour, ReclaimerConfiguration) {
  auto load = [](const std::string& text) { return load_config_text(text, "test.yaml", NodeIdentity{}); };
  auto d = load("yarn: {}\n");
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->yarn.reclaimer, Reclaimer::Khagent);
  EXPECT_FALSE(d->yarn.resize_with_other_resources);
  EXPECT_EQ(yarn_posted_over_commit_timeout(d->yarn), -1);
  auto rm = load("yarn: {reclaimer: rm, over_commit_timeout: 2m, resize_with_other_resources: true}\n");
  ASSERT_TRUE(rm.ok()) << rm.error().message;
  EXPECT_EQ(yarn_posted_over_commit_timeout(rm->yarn), 120000);
  EXPECT_TRUE(rm->yarn.resize_with_other_resources);
  auto never = load("yarn: {reclaimer: rm, over_commit_timeout: never}\n");
  ASSERT_FALSE(never.ok());
  EXPECT_NE(never.error().message.find("yarn.over_commit_timeout"), std::string::npos) << never.error().message;
  auto unknown = load("yarn: {reclaimer: both}\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("reclaimer"), std::string::npos) << unknown.error().message;
}
