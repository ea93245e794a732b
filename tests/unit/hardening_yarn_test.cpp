// YARN hardening: numbers from the RM and NM are range-checked before they
// are used, saved or posted; the saved original is checked when loaded; the
// node id is escaped in the paths; repeated errors are logged once a minute
// per cause.
#include <httplib.h>

#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "khagent/actuate/yarn_resize.h"
#include "khagent/app/yarn_downscaler.h"
#include "khagent/collect/yarn_rest.h"
#include "khagent/policy/yarn.h"
#include "khagent/util/http_client.h"
#include "test_util.h"
#include "yarn_emulator.h"

using namespace khagent;
using json = nlohmann::json;

namespace {

constexpr uint64_t kS = 1'000'000'000ULL;
constexpr uint64_t kT0 = 1000 * kS;
const std::string kThis = "worker1.example.com:45454";

// Everything spdlog writes while it lives, in a string.
class LogCapture {
 public:
  LogCapture() : prev_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("capture", sink);
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(prev_); }
  std::string text() {
    spdlog::default_logger()->flush();
    return out_.str();
  }
  size_t count(const std::string& what) {
    std::string t = text();
    size_t n = 0;
    for (size_t p = t.find(what); p != std::string::npos; p = t.find(what, p + 1)) n++;
    return n;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> prev_;
};

// A fake RM or NM: answers by path (the raw request target without the
// query) from a table, and records every request's raw target and body.
class FakeYarnServer {
 public:
  struct Answer {
    int status = 200;
    std::string body;
  };
  struct Seen {
    std::string method, target, body;
  };

  FakeYarnServer() {
    auto h = [this](const httplib::Request& q, httplib::Response& r) {
      std::string path = q.target.substr(0, q.target.find('?'));
      Answer a{404, R"({"RemoteException":{"exception":"NotFoundException","message":"no such path"}})"};
      {
        std::lock_guard lk(mu_);
        seen_.push_back({q.method, q.target, q.body});
        auto it = answers_.find(q.method + " " + path);
        if (it != answers_.end()) a = it->second;
      }
      r.status = a.status;
      r.set_content(a.body, "application/json");
    };
    svr_.Get(".*", h);
    svr_.Post(".*", h);
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeYarnServer() {
    svr_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void answer(const std::string& method_path, Answer a) {
    std::lock_guard lk(mu_);
    answers_[method_path] = std::move(a);
  }
  std::vector<Seen> seen() const {
    std::lock_guard lk(mu_);
    return seen_;
  }
  size_t posts() const {
    size_t n = 0;
    for (const auto& s : seen()) n += s.method == "POST";
    return n;
  }

 private:
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::map<std::string, Answer> answers_;
  std::vector<Seen> seen_;
};

std::string node_doc(const std::string& id, int64_t vcores, int64_t mb) {
  return json{{"node",
               {{"id", id},
                {"nodeHostName", "worker1.example.com"},
                {"nodeHTTPAddress", "127.0.0.1:1"},
                {"state", "RUNNING"},
                {"numContainers", 0},
                {"usedMemoryMB", 0},
                {"usedVirtualCores", 0},
                {"totalResource", {{"memory", mb}, {"vCores", vcores}}}}}}
      .dump();
}

// A fake RM with node kThis of 8 vcores/16 GB and a fake NM whose own
// figures are `nm_info` (raw JSON text), no containers, no apps.
struct FakeCluster {
  FakeYarnServer rm, nm;
  explicit FakeCluster(const std::string& nm_info) {
    rm.answer("GET /ws/v1/cluster/nodes/" + kThis, {200, node_doc(kThis, 8, 16384)});
    rm.answer("GET /ws/v1/cluster/apps", {200, R"({"apps":null})"});
    rm.answer("POST /ws/v1/cluster/nodes/" + kThis + "/resource",
              {200, R"({"resourceInfo":{"memory":4096,"vCores":2}})"});
    nm.answer("GET /ws/v1/node/info", {200, nm_info});
    nm.answer("GET /ws/v1/node/containers", {200, R"({"containers":null})"});
  }
  YarnConfig config() const {
    YarnConfig c;
    c.enabled = true;
    c.rm_urls = {rm.url()};
    c.nm_url = nm.url();
    c.node_id = kThis;
    c.request_timeout_ms = 1500;
    c.connect_timeout_ms = 500;
    c.retries = 0;
    c.retry_backoff_ms = 10;
    c.refresh_interval_ns = 1 * kS;
    c.min_vcores = 1;
    c.memory_follows_cpu = true;
    return c;
  }
};

YarnOffer offer_at(uint64_t now_ns, double budget) {
  YarnOffer o;
  o.now_ns = now_ns;
  o.budget_cores = budget;
  return o;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

// ---- numbers ---------------------------------------------------------------------

TEST(HardeningYarnNumbers, ParsersRefuseNumbersOutOfRange) {
  for (
      const char* info : {
          R"({"nodeInfo":{"totalVCoresAllocatedContainers":9223372036854775807,"totalPmemAllocatedContainersMB":16384}})",
          R"({"nodeInfo":{"totalVCoresAllocatedContainers":8,"totalPmemAllocatedContainersMB":1e300}})",
          R"({"nodeInfo":{"totalVCoresAllocatedContainers":-1,"totalPmemAllocatedContainersMB":16384}})",
          R"({"nodeInfo":{"totalVCoresAllocatedContainers":18446744073709551615,"totalPmemAllocatedContainersMB":1}})",
          R"({"nodeInfo":{"totalVCoresAllocatedContainers":1000001,"totalPmemAllocatedContainersMB":1}})",
      }) {
    auto r = parse_nm_node_info(info);
    ASSERT_FALSE(r.ok()) << info;
    EXPECT_EQ(r.error().err, ERANGE) << info;
    EXPECT_NE(r.error().message.find("out of range"), std::string::npos) << r.error().message;
  }
  auto frac = parse_nm_node_info(
      R"({"nodeInfo":{"totalVCoresAllocatedContainers":8.0,"totalPmemAllocatedContainersMB":16384.9}})");
  ASSERT_TRUE(frac.ok()) << frac.error().message;
  EXPECT_EQ(frac.value(), (YarnResource{8, 16384}));

  auto node = parse_yarn_node(node_doc(kThis, 2'000'000, 1));
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.error().err, ERANGE);

  // Older RMs: used + available; available may be negative (over-committed).
  auto old = parse_yarn_node(R"({"node":{"id":"h:1","usedVirtualCores":6,"availableVirtualCores":-2,)"
                             R"("usedMemoryMB":8192,"availMemoryMB":1024}})");
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_EQ(old->total, (YarnResource{4, 9216}));
  auto neg = parse_yarn_node(R"({"node":{"id":"h:1","usedVirtualCores":1,"availableVirtualCores":-5}})");
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.error().err, ERANGE);

  auto answer = parse_resource_info(R"({"resourceInfo":{"memory":1e300,"vCores":9223372036854775807}})");
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.error().err, ERANGE);

  auto am = parse_am_container(R"({"appAttempts":{"appAttempt":[{"id":1e300,"containerId":"c"}]}})");
  ASSERT_FALSE(am.ok());
  EXPECT_EQ(am.error().err, ERANGE);
}

TEST(HardeningYarnNumbers, BadListEntriesAreMarkedNotFatal) {
  // Another node's nonsense does not hide this one.
  std::string nodes =
      R"({"nodes":{"node":[)"
      R"({"id":"bad:1","nodeHostName":"bad","state":"RUNNING","totalResource":{"memory":1e300,"vCores":9223372036854775807}},)"
      R"({"id":")" +
      kThis +
      R"(","nodeHostName":"worker1.example.com","state":"RUNNING","totalResource":{"memory":16384,"vCores":8}}]}})";
  auto list = parse_yarn_nodes(nodes);
  ASSERT_TRUE(list.ok()) << list.error().message;
  ASSERT_EQ(list->size(), 2u);
  EXPECT_NE(list->at(0).invalid.find("out of range"), std::string::npos) << list->at(0).invalid;
  EXPECT_EQ(list->at(0).total, (YarnResource{0, 0}));
  EXPECT_EQ(list->at(0).host, "bad");
  EXPECT_EQ(list->at(1).invalid, "");
  EXPECT_EQ(list->at(1).total, (YarnResource{8, 16384}));
  auto m = match_node(list.value(), {"worker1"});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->id, kThis);

  auto cs = parse_nm_containers(
      R"({"containers":{"container":[)"
      R"({"id":"container_1_0001_01_000001","state":"RUNNING","totalVCoresNeeded":-3,"totalMemoryNeededMB":1024},)"
      R"({"id":"container_1_0001_01_000002","state":"RUNNING","totalVCoresNeeded":1,"totalMemoryNeededMB":1024}]}})");
  ASSERT_TRUE(cs.ok()) << cs.error().message;
  ASSERT_EQ(cs->size(), 2u);
  EXPECT_FALSE(cs->at(0).invalid.empty());
  EXPECT_EQ(cs->at(1).invalid, "");
  EXPECT_EQ(cs->at(1).resource, (YarnResource{1, 1024}));

  auto apps = parse_yarn_apps(R"({"apps":{"app":[{"id":"application_1_0001","queue":"q","priority":1e10}]}})");
  ASSERT_TRUE(apps.ok()) << apps.error().message;
  EXPECT_FALSE(apps->at(0).invalid.empty());
}

TEST(HardeningYarnNumbers, PolicyDoesNotPostInsaneResources) {
  YarnConfig cfg;
  cfg.memory_follows_cpu = true;
  YarnCapacityState st;
  YarnCapacityInput in;
  in.now_ns = kT0;
  in.budget_cores = 2;
  in.configured = {INT64_MAX, INT64_MAX};
  auto d = yarn_capacity_step(in, cfg, st);
  EXPECT_FALSE(d.post) << d.reason;
  EXPECT_EQ(d.action, YarnCapacityAction::Unknown);

  in.configured = {8, 16384};
  in.known = true;
  in.advertised = {INT64_MIN, 16384};
  d = yarn_capacity_step(in, cfg, st);
  EXPECT_FALSE(d.post) << d.reason;

  // Sums saturate instead of wrapping.
  ReclaimInput ri;
  ri.now_ns = kT0;
  ri.capacity = {8, 16384};
  for (int i = 0; i < 3; ++i) {
    YarnContainerInfo c;
    c.id = "container_1_0001_01_00000" + std::to_string(i);
    c.resource = {INT64_MAX, INT64_MAX};
    ri.containers.push_back(c);
  }
  ReclaimState rs;
  auto rd = reclaim_step(ri, cfg, rs);
  EXPECT_EQ(rd.used, (YarnResource{INT64_MAX, INT64_MAX}));
}

TEST(HardeningYarnNumbers, HostileNodeManagerFiguresAreNeitherPostedNorSaved) {
  FakeCluster fc(R"({"nodeInfo":{"totalVCoresAllocatedContainers":9223372036854775807,)"
                 R"("totalPmemAllocatedContainersMB":1e300}})");
  TempDir dir;
  const auto max_file = dir.path / "state.json.yarn";
  LogCapture log;
  {
    YarnDownscaler ds(fc.config(), false, dir.path.string(), {"worker1"}, max_file.string());
    for (int i = 0; i < 3; ++i) ds.round(offer_at(kT0 + i * 2 * kS, 2));
    YarnStatus st = ds.status();
    EXPECT_FALSE(st.configured_known);
    EXPECT_NE(st.last_error.find("out of range"), std::string::npos) << st.last_error;
    ds.stop(true);
  }
  EXPECT_EQ(fc.rm.posts(), 0u);
  EXPECT_FALSE(std::filesystem::exists(max_file)) << read_file(max_file);
  // Logged, once (rate-limited per cause).
  EXPECT_EQ(log.count("NodeManager resources"), 1u) << log.text();
}

TEST(HardeningYarnNumbers, ASavedOriginalOutOfRangeIsIgnoredOnLoad) {
  FakeCluster fc(R"({"nodeInfo":{"totalVCoresAllocatedContainers":8,"totalPmemAllocatedContainersMB":16384}})");
  TempDir dir;
  const auto max_file = dir.path / "state.json.yarn";
  // What an older agent saved from a hostile NodeManager.
  std::ofstream(max_file) << R"({"node_id":")" << kThis
                          << R"(","vcores":9223372036854775807,"memory_mb":9223372036854775807})" << "\n";
  YarnDownscaler ds(fc.config(), false, dir.path.string(), {"worker1"}, max_file.string());
  ds.round(offer_at(kT0, 2));
  YarnStatus st = ds.status();
  ASSERT_TRUE(st.configured_known) << st.last_error;
  EXPECT_EQ(st.configured, (YarnResource{8, 16384}));
  auto saved = json::parse(read_file(max_file), nullptr, false);
  ASSERT_TRUE(saved.is_object());
  EXPECT_EQ(saved["vcores"], 8);
  EXPECT_EQ(saved["memory_mb"], 16384);
  // What went to the RM is within the node.
  for (const auto& s : fc.rm.seen()) {
    if (s.method != "POST") continue;
    auto b = json::parse(s.body);
    EXPECT_GE(b["resource"]["vCores"].get<int64_t>(), 0) << s.body;
    EXPECT_LE(b["resource"]["vCores"].get<int64_t>(), 8) << s.body;
    EXPECT_LE(b["resource"]["memory"].get<int64_t>(), 16384) << s.body;
    EXPECT_GE(b["resource"]["memory"].get<int64_t>(), 0) << s.body;
  }
  EXPECT_EQ(fc.rm.posts(), 1u);  // the shrink to 2 vcores
}

TEST(HardeningYarnNumbers, ContainersLargerThanTheNodeAreSkipped) {
  yarntest::YarnEmulator emu;
  emu.add_this_node(kThis, "worker1.example.com", {8, 16384});
  yarntest::EmuContainer huge;
  huge.id = "container_1700000000000_0001_01_000001";
  huge.vcores = 100;  // more than the node has
  emu.add_container(huge);
  yarntest::EmuContainer small;
  small.id = "container_1700000000000_0001_01_000002";
  emu.add_container(small);
  YarnConfig cfg;
  cfg.enabled = true;
  cfg.rm_urls = emu.rm_urls();
  cfg.retries = 0;
  cfg.refresh_interval_ns = kS;
  cfg.reclaim = true;
  cfg.reclaim_grace_ns = 0;
  TempDir mount;
  LogCapture log;
  YarnDownscaler ds(cfg, false, mount.path.string(), {"worker1"});
  ds.round(offer_at(kT0, 8));
  YarnStatus st = ds.status();
  EXPECT_EQ(st.victims, 0u);
  EXPECT_EQ(st.kills_ok + st.kills_failed, 0u);
  EXPECT_EQ(st.containers, 1u);
  EXPECT_NE(log.text().find("more than the node"), std::string::npos) << log.text();
}

// ---- the node id in paths ----------------------------------------------------------

TEST(HardeningYarnEscape, PathSegmentsAreEscaped) {
  EXPECT_EQ(url_path_segment("worker1.example.com:45454"), "worker1.example.com:45454");
  EXPECT_EQ(url_path_segment("vm:1/../../../../evil?x="), "vm:1%2F..%2F..%2F..%2F..%2Fevil%3Fx%3D");
  EXPECT_EQ(url_path_segment(".."), "%2E%2E");
  EXPECT_EQ(url_path_segment("."), "%2E");
  EXPECT_EQ(url_path_segment("a b#%\r\n"), "a%20b%23%25%0D%0A");
}

TEST(HardeningYarnEscape, TheNodeIdCannotLeaveItsPath) {
  FakeYarnServer rm;
  HttpClientOptions o;
  o.base_urls = {rm.url()};
  o.retries = 0;
  HttpClient rm_client(o), nm_client(o);
  YarnRest rest(rm_client, nm_client);
  const std::string evil = "vm:1/../../../../evil?x=";
  (void)rest.node(evil);
  (void)post_node_resource(rm_client, evil, {2, 2048}, {}, 0);
  (void)rest.node("..");
  (void)post_node_resource(rm_client, "..", {2, 2048}, {}, 0);
  auto seen = rm.seen();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].target, "/ws/v1/cluster/nodes/vm:1%2F..%2F..%2F..%2F..%2Fevil%3Fx%3D");
  EXPECT_EQ(seen[1].target, "/ws/v1/cluster/nodes/vm:1%2F..%2F..%2F..%2F..%2Fevil%3Fx%3D/resource");
  EXPECT_EQ(seen[2].target, "/ws/v1/cluster/nodes/%2E%2E");
  EXPECT_EQ(seen[3].target, "/ws/v1/cluster/nodes/%2E%2E/resource");
  for (const auto& s : seen) EXPECT_EQ(s.target.rfind("/ws/v1/cluster/nodes/", 0), 0u) << s.target;
}

// ---- log rate limit ----------------------------------------------------------------

TEST(HardeningYarnLog, ARepeatedFailureIsLoggedOncePerCause) {
  FakeCluster fc(R"({"nodeInfo":{"totalVCoresAllocatedContainers":8,"totalPmemAllocatedContainersMB":16384}})");
  fc.rm.answer("GET /ws/v1/cluster/apps", {500, "boom"});
  LogCapture log;
  YarnDownscaler ds(fc.config(), false, "/nonexistent", {"worker1"});
  // A refresh every round (the interval is 1 s of offer time), each failing on apps only.
  for (int i = 0; i < 8; ++i) ds.round(offer_at(kT0 + static_cast<uint64_t>(i) * 2 * kS, 8));
  EXPECT_EQ(log.count("running applications"), 1u) << log.text();
  // Another cause is news at once, and is limited on its own.
  fc.nm.answer("GET /ws/v1/node/containers", {500, "down"});
  for (int i = 8; i < 12; ++i) ds.round(offer_at(kT0 + static_cast<uint64_t>(i) * 2 * kS, 8));
  EXPECT_EQ(log.count("NodeManager containers"), 1u) << log.text();
  EXPECT_EQ(log.count("running applications"), 1u) << log.text();
}
