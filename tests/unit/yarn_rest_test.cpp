// The YARN REST parsers on the documented Hadoop 3.x shapes, and the REST
// reads and the resource update against the in-process emulator.
#include "khagent/collect/yarn_rest.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "khagent/actuate/yarn_resize.h"
#include "yarn_emulator.h"

using namespace khagent;
using yarntest::EmptyForm;
using yarntest::Faults;
using yarntest::Srv;
using yarntest::YarnEmulator;

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

const char* kNodes = R"({"nodes":{"node":[
  {"id":"worker1.example.com:45454","rack":"/default-rack","state":"RUNNING",
   "nodeHostName":"worker1.example.com","nodeHTTPAddress":"worker1.example.com:8042",
   "lastHealthUpdate":1700000000000,"version":"3.3.6","healthReport":"",
   "numContainers":2,"usedMemoryMB":4096,"availMemoryMB":12288,
   "usedVirtualCores":2,"availableVirtualCores":6,
   "totalResource":{"memory":16384,"vCores":8,"resourceInformations":{}}},
  {"id":"worker2.example.com:45454","rack":"/default-rack","state":"LOST",
   "nodeHostName":"worker2.example.com","nodeHTTPAddress":"",
   "numContainers":0,"usedMemoryMB":0,"availMemoryMB":0,
   "usedVirtualCores":0,"availableVirtualCores":0,
   "totalResource":{"memory":8192,"vCores":4}}]}})";

const char* kContainers = R"({"containers":{"container":[
  {"id":"container_1700000000000_0001_01_000002","state":"RUNNING","exitCode":-1000,
   "diagnostics":"","user":"alice","totalMemoryNeededMB":2048,"totalVCoresNeeded":1,
   "containerLogsLink":"http://worker1:8042/node/containerlogs/container_1700000000000_0001_01_000002/alice",
   "nodeId":"worker1:45454","executionType":"GUARANTEED"},
  {"id":"container_e17_1700000000000_0002_01_000001","state":"LOCALIZING","exitCode":-1000,
   "diagnostics":"","user":"bob","totalMemoryNeededMB":1024,"totalVCoresNeeded":2,
   "containerLogsLink":"","nodeId":"worker1:45454","executionType":"OPPORTUNISTIC"}]}})";

const char* kApps = R"({"apps":{"app":[
  {"id":"application_1700000000000_0001","user":"alice","name":"wordcount","queue":"root.adhoc",
   "state":"RUNNING","finalStatus":"UNDEFINED","priority":0,"startedTime":1700000000000},
  {"id":"application_1700000000000_0002","user":"bob","name":"etl","queue":"root.prod",
   "state":"RUNNING","finalStatus":"UNDEFINED","priority":5,"startedTime":1700000100000}]}})";

const char* kNmInfo = R"({"nodeInfo":{"id":"worker1:45454","nodeHostName":"worker1",
  "totalVCoresAllocatedContainers":8,"totalPmemAllocatedContainersMB":16384,
  "totalVmemAllocatedContainersMB":34406,"nodeHealthy":true,"hadoopVersion":"3.3.6"}})";

HttpClientOptions client_opts(std::vector<std::string> urls, long timeout_ms = 2000) {
  HttpClientOptions o;
  o.base_urls = std::move(urls);
  o.auth = HttpAuth::None;
  o.timeout_ms = timeout_ms;
  o.connect_timeout_ms = 1000;
  o.retries = 0;
  o.retry_backoff_ms = 10;
  return o;
}

long ms_since(Clock::time_point t0) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

// An emulator with this node (worker1.example.com:45454, 8 vcores, 16 GB) and
// one other node, an application with its AM and two containers.
void populate(YarnEmulator& emu) {
  emu.add_this_node("worker1.example.com:45454", "worker1.example.com", {8, 16384});
  yarntest::EmuNode other;
  other.id = "worker2.example.com:45454";
  other.host = "worker2.example.com";
  other.http_address = "worker2.example.com:8042";
  other.total = {4, 8192};
  emu.add_node(other);
  yarntest::EmuApp app;
  app.id = "application_1700000000000_0001";
  app.queue = "root.adhoc";
  app.am_container = "container_1700000000000_0001_01_000001";
  app.am_node = "worker1.example.com:45454";
  emu.add_app(app);
  yarntest::EmuApp done;
  done.id = "application_1700000000000_0000";
  done.state = "FINISHED";
  emu.add_app(done);
  emu.add_container({"container_1700000000000_0001_01_000001", "RUNNING", 1, 1024, "alice", "GUARANTEED"});
  emu.add_container({"container_1700000000000_0001_01_000002", "RUNNING", 2, 4096, "alice", "GUARANTEED"});
}

}  // namespace

// ---- parsers ------------------------------------------------------------------

TEST(YarnParse, NodesDocumentedShape) {
  auto r = parse_yarn_nodes(kNodes);
  ASSERT_TRUE(r.ok()) << r.error().str();
  ASSERT_EQ(r->size(), 2u);
  const auto& n = (*r)[0];
  EXPECT_EQ(n.id, "worker1.example.com:45454");
  EXPECT_EQ(n.host, "worker1.example.com");
  EXPECT_EQ(n.http_address, "worker1.example.com:8042");
  EXPECT_EQ(n.state, "RUNNING");
  EXPECT_EQ(n.total, (YarnResource{8, 16384}));
  EXPECT_EQ(n.used, (YarnResource{2, 4096}));
  EXPECT_EQ(n.containers, 2);
  EXPECT_EQ((*r)[1].state, "LOST");
  EXPECT_EQ((*r)[1].http_address, "");
  EXPECT_EQ((*r)[1].total, (YarnResource{4, 8192}));
}

TEST(YarnParse, NodesEmptyForms) {
  for (const char* doc : {R"({"nodes":null})", R"({"nodes":""})", R"({"nodes":{}})", R"({"nodes":{"node":[]}})",
                          R"({"nodes":{"node":null}})"}) {
    auto r = parse_yarn_nodes(doc);
    ASSERT_TRUE(r.ok()) << doc << ": " << r.error().str();
    EXPECT_TRUE(r->empty()) << doc;
  }
}

TEST(YarnParse, NodesSingleObjectInsteadOfList) {
  auto r = parse_yarn_nodes(
      R"({"nodes":{"node":{"id":"h:45454","nodeHostName":"h","state":"RUNNING",
         "totalResource":{"memory":4096,"vCores":2}}}})");
  ASSERT_TRUE(r.ok()) << r.error().str();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].id, "h:45454");
  EXPECT_EQ((*r)[0].total, (YarnResource{2, 4096}));
}

TEST(YarnParse, NodesWithoutTotalResourceAddUsedAndAvailable) {
  auto r = parse_yarn_nodes(
      R"({"nodes":{"node":[{"id":"h:1","nodeHostName":"h","usedMemoryMB":1024,"availMemoryMB":3072,
         "usedVirtualCores":1,"availableVirtualCores":3}]}})");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ((*r)[0].total, (YarnResource{4, 4096}));
  EXPECT_EQ((*r)[0].used, (YarnResource{1, 1024}));
}

TEST(YarnParse, NodesMissingOrMistypedFieldsAreEproto) {
  struct Case {
    const char* doc;
    const char* mentions;
  };
  const Case cases[] = {
      {R"({"nodes":{"node":[{"nodeHostName":"h"}]}})", "\"id\""},
      {R"({"nodes":{"node":[{"id":7}]}})", "\"id\""},
      {R"({"nodes":{"node":[{"id":"h:1","nodeHostName":5}]}})", "nodeHostName"},
      {R"({"nodes":{"node":[{"id":"h:1","numContainers":"two"}]}})", "numContainers"},
      {R"({"nodes":{"node":[{"id":"h:1","totalResource":{"memory":1024}}]}})", "vCores"},
      {R"({"nodes":{"node":[{"id":"h:1","totalResource":"big"}]}})", "totalResource"},
      {R"({"nodes":{"node":[{"id":"h:1","totalResource":{"memory":"x","vCores":1}}]}})", "memory"},
      {R"({"nodes":{"node":5}})", "nodes.node"},
      {R"({"nodes":{"node":[5]}})", "nodes.node"},
      {R"({"nodes":5})", "nodes"},
      {R"({"clusterInfo":{}})", "nodes"},
      {R"([])", "not a JSON object"},
  };
  for (const auto& c : cases) {
    auto r = parse_yarn_nodes(c.doc);
    ASSERT_FALSE(r.ok()) << c.doc;
    EXPECT_EQ(r.error().err, EPROTO) << c.doc;
    EXPECT_NE(r.error().message.find(c.mentions), std::string::npos) << c.doc << " -> " << r.error().message;
  }
}

TEST(YarnParse, MalformedAndTruncatedJsonAreEproto) {
  std::string full = kNodes;
  for (const std::string& doc : {std::string("<html>Standby</html>"), std::string(""), full.substr(0, full.size() / 2),
                                 full.substr(0, full.size() - 1)}) {
    auto r = parse_yarn_nodes(doc);
    ASSERT_FALSE(r.ok()) << doc;
    EXPECT_EQ(r.error().err, EPROTO);
    EXPECT_NE(r.error().message.find("not JSON"), std::string::npos) << r.error().message;
  }
  auto c = parse_nm_containers(std::string(kContainers).substr(0, 100));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().err, EPROTO);
  auto a = parse_yarn_apps("{\"apps\":");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().err, EPROTO);
  auto i = parse_nm_node_info("nodeInfo");
  ASSERT_FALSE(i.ok());
  EXPECT_EQ(i.error().err, EPROTO);
}

TEST(YarnParse, SingleNode) {
  auto r = parse_yarn_node(
      R"({"node":{"id":"worker1:45454","nodeHostName":"worker1","nodeHTTPAddress":"worker1:8042",
         "state":"RUNNING","numContainers":1,"usedMemoryMB":1024,"usedVirtualCores":1,
         "totalResource":{"memory":16384,"vCores":8}}})");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->id, "worker1:45454");
  EXPECT_EQ(r->total, (YarnResource{8, 16384}));
  EXPECT_EQ(r->used, (YarnResource{1, 1024}));
  for (const char* doc : {R"({"nodes":{}})", R"({"node":null})", R"({"node":[]})", R"({"node":{}})"}) {
    auto e = parse_yarn_node(doc);
    ASSERT_FALSE(e.ok()) << doc;
    EXPECT_EQ(e.error().err, EPROTO) << doc;
  }
}

TEST(YarnParse, NmContainers) {
  auto r = parse_nm_containers(kContainers);
  ASSERT_TRUE(r.ok()) << r.error().str();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].id, "container_1700000000000_0001_01_000002");
  EXPECT_EQ((*r)[0].state, "RUNNING");
  EXPECT_EQ((*r)[0].user, "alice");
  EXPECT_EQ((*r)[0].resource, (YarnResource{1, 2048}));
  EXPECT_EQ((*r)[0].execution_type, "GUARANTEED");
  EXPECT_EQ((*r)[1].state, "LOCALIZING");
  EXPECT_EQ((*r)[1].resource, (YarnResource{2, 1024}));
  EXPECT_EQ((*r)[1].execution_type, "OPPORTUNISTIC");

  for (const char* doc : {R"({"containers":null})", R"({"containers":""})", R"({"containers":{}})"}) {
    auto e = parse_nm_containers(doc);
    ASSERT_TRUE(e.ok()) << doc;
    EXPECT_TRUE(e->empty());
  }
  auto one =
      parse_nm_containers(R"({"containers":{"container":{"id":"container_1_0001_01_000001","state":"RUNNING"}}})");
  ASSERT_TRUE(one.ok()) << one.error().str();
  EXPECT_EQ(one->size(), 1u);

  auto nostate = parse_nm_containers(R"({"containers":{"container":[{"id":"container_1_0001_01_000001"}]}})");
  ASSERT_FALSE(nostate.ok());
  EXPECT_EQ(nostate.error().err, EPROTO);
  EXPECT_NE(nostate.error().message.find("state"), std::string::npos) << nostate.error().message;
  EXPECT_NE(nostate.error().message.find("container_1_0001_01_000001"), std::string::npos) << nostate.error().message;

  auto badmem = parse_nm_containers(
      R"({"containers":{"container":[{"id":"c","state":"RUNNING","totalMemoryNeededMB":"lots"}]}})");
  ASSERT_FALSE(badmem.ok());
  EXPECT_NE(badmem.error().message.find("totalMemoryNeededMB"), std::string::npos) << badmem.error().message;
}

TEST(YarnParse, NmNodeInfo) {
  auto r = parse_nm_node_info(kNmInfo);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(*r, (YarnResource{8, 16384}));
  auto missing = parse_nm_node_info(R"({"nodeInfo":{"totalPmemAllocatedContainersMB":16384}})");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().err, EPROTO);
  EXPECT_NE(missing.error().message.find("totalVCoresAllocatedContainers"), std::string::npos)
      << missing.error().message;
  auto notobj = parse_nm_node_info(R"({"nodeInfo":"x"})");
  ASSERT_FALSE(notobj.ok());
  EXPECT_EQ(notobj.error().err, EPROTO);
}

TEST(YarnParse, Apps) {
  auto r = parse_yarn_apps(kApps);
  ASSERT_TRUE(r.ok()) << r.error().str();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].id, "application_1700000000000_0001");
  EXPECT_EQ((*r)[0].queue, "root.adhoc");
  EXPECT_EQ((*r)[0].priority, 0);
  EXPECT_EQ((*r)[0].started_ms, 1700000000000u);
  EXPECT_EQ((*r)[1].queue, "root.prod");
  EXPECT_EQ((*r)[1].priority, 5);
  EXPECT_EQ((*r)[1].started_ms, 1700000100000u);
  for (const char* doc : {R"({"apps":null})", R"({"apps":""})", R"({"apps":{}})"}) {
    auto e = parse_yarn_apps(doc);
    ASSERT_TRUE(e.ok()) << doc;
    EXPECT_TRUE(e->empty());
  }
  auto bad = parse_yarn_apps(R"({"apps":{"app":[{"id":"application_1_1","queue":3}]}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().err, EPROTO);
  EXPECT_NE(bad.error().message.find("queue"), std::string::npos) << bad.error().message;
  auto noid = parse_yarn_apps(R"({"apps":{"app":[{"queue":"a"}]}})");
  ASSERT_FALSE(noid.ok());
  EXPECT_EQ(noid.error().err, EPROTO);
}

TEST(YarnParse, AmContainerIsTheLatestAttempts) {
  auto r = parse_am_container(
      R"({"appAttempts":{"appAttempt":[
        {"id":1,"startTime":1700000000000,"containerId":"container_1700000000000_0001_01_000001",
         "nodeId":"h:45454","nodeHttpAddress":"h:8042","logsLink":"x"},
        {"id":2,"startTime":1700000050000,"containerId":"container_1700000000000_0001_02_000001",
         "nodeId":"h:45454","nodeHttpAddress":"h:8042","logsLink":"y"}]}})");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(*r, "container_1700000000000_0001_02_000001");
  auto single = parse_am_container(
      R"({"appAttempts":{"appAttempt":{"id":1,"containerId":"container_1700000000000_0001_01_000001"}}})");
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(*single, "container_1700000000000_0001_01_000001");
  auto hidden = parse_am_container(R"({"appAttempts":{"appAttempt":[{"id":1,"nodeId":"h:45454"}]}})");
  ASSERT_TRUE(hidden.ok());
  EXPECT_EQ(*hidden, "");
  auto none = parse_am_container(R"({"appAttempts":null})");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
  auto noid = parse_am_container(R"({"appAttempts":{"appAttempt":[{"containerId":"c"}]}})");
  ASSERT_FALSE(noid.ok());
  EXPECT_EQ(noid.error().err, EPROTO);
}

TEST(YarnParse, AppOfContainer) {
  EXPECT_EQ(app_of_container("container_1700000000000_0001_01_000002"), "application_1700000000000_0001");
  EXPECT_EQ(app_of_container("container_e17_1700000000000_0042_01_000001"), "application_1700000000000_0042");
  EXPECT_EQ(app_of_container("container_e1_1_2_3_4"), "application_1_2");
  for (const char* bad :
       {"", "container_", "container_1700000000000_0001_01", "container_1700000000000_0001_01_000002_9",
        "container_e_1700000000000_0001_01_000002", "container_ex7_1700000000000_0001_01_000002",
        "container_eX_1700000000000_0001_01_000002", "container_1700000000000_00x1_01_000002",
        "application_1700000000000_0001", "Container_1700000000000_0001_01_000002", "container__0001_01_000002",
        "xcontainer_1700000000000_0001_01_000002"}) {
    EXPECT_EQ(app_of_container(bad), "") << bad;
  }
}

TEST(YarnParse, NmContainerActive) {
  for (const char* s : {"NEW", "LOCALIZING", "SCHEDULED", "RUNNING", "PAUSED", "REINITIALIZING", "RELAUNCHING"}) {
    EXPECT_TRUE(nm_container_active(s)) << s;
  }
  for (const char* s : {"", "DONE", "EXITED_WITH_SUCCESS", "EXITED_WITH_FAILURE", "KILLING",
                        "CONTAINER_CLEANEDUP_AFTER_KILL", "CONTAINER_RESOURCES_CLEANINGUP", "LOCALIZATION_FAILED"}) {
    EXPECT_FALSE(nm_container_active(s)) << s;
  }
}

TEST(YarnParse, MatchNode) {
  auto mk = [](std::string id, std::string host) {
    YarnNodeReport n;
    n.id = std::move(id);
    n.host = std::move(host);
    return n;
  };
  std::vector<YarnNodeReport> nodes = {mk("worker1.example.com:45454", "worker1.example.com"),
                                       mk("worker2.example.com:45454", "worker2.example.com"), mk("db1:45454", "db1")};
  auto exact = match_node(nodes, {"worker2.example.com"});
  ASSERT_TRUE(exact.ok()) << exact.error().str();
  EXPECT_EQ(exact->id, "worker2.example.com:45454");

  auto short_name = match_node(nodes, {"worker1"});  // a short name matches an FQDN's first label
  ASSERT_TRUE(short_name.ok()) << short_name.error().str();
  EXPECT_EQ(short_name->id, "worker1.example.com:45454");

  auto fqdn = match_node(nodes, {"db1.example.com"});  // and the other way round
  ASSERT_TRUE(fqdn.ok()) << fqdn.error().str();
  EXPECT_EQ(fqdn->id, "db1:45454");

  auto cased = match_node(nodes, {"WORKER2.Example.COM"});
  ASSERT_TRUE(cased.ok()) << cased.error().str();
  EXPECT_EQ(cased->id, "worker2.example.com:45454");

  auto several_names = match_node(nodes, {"", "nothere", "worker1.example.com"});
  ASSERT_TRUE(several_names.ok());
  EXPECT_EQ(several_names->id, "worker1.example.com:45454");

  auto none = match_node(nodes, {"worker3", "worker3.example.com"});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().err, ENOENT);
  EXPECT_NE(none.error().message.find("worker3"), std::string::npos) << none.error().message;
  EXPECT_NE(none.error().message.find("yarn.node_id"), std::string::npos) << none.error().message;

  auto empty = match_node({}, {"worker1"});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().err, ENOENT);

  // "worker" is not "worker1": no prefix matching beyond a whole label.
  auto prefix = match_node(nodes, {"worker"});
  ASSERT_FALSE(prefix.ok());
  EXPECT_EQ(prefix.error().err, ENOENT);

  // Two NodeManagers on one host.
  nodes.push_back(mk("worker1.example.com:45455", "worker1.example.com"));
  auto two = match_node(nodes, {"worker1.example.com"});
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.error().err, EEXIST);
  EXPECT_NE(two.error().message.find("worker1.example.com:45454"), std::string::npos) << two.error().message;
  EXPECT_NE(two.error().message.find("worker1.example.com:45455"), std::string::npos) << two.error().message;

  // Without nodeHostName, the host of the id is used.
  auto by_id = match_node({mk("lonely.example.com:45454", "")}, {"lonely"});
  ASSERT_TRUE(by_id.ok()) << by_id.error().str();
  EXPECT_EQ(by_id->id, "lonely.example.com:45454");
}

// ---- REST reads against the emulator ----------------------------------------------

TEST(YarnRest, ReadsEverythingFromTheEmulator) {
  YarnEmulator emu;
  populate(emu);
  HttpClient rm(client_opts({emu.rm_url()}));
  HttpClient nm(client_opts({emu.nm_url()}));
  YarnRest rest(rm, nm);

  auto nodes = rest.nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.error().str();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].id, "worker1.example.com:45454");
  EXPECT_EQ((*nodes)[0].http_address, emu.nm_address());
  EXPECT_EQ((*nodes)[0].total, (YarnResource{8, 16384}));
  EXPECT_EQ((*nodes)[1].total, (YarnResource{4, 8192}));

  auto node = rest.node("worker2.example.com:45454");
  ASSERT_TRUE(node.ok()) << node.error().str();
  EXPECT_EQ(node->host, "worker2.example.com");
  EXPECT_EQ(emu.requests(Srv::RM0, "GET", "/ws/v1/cluster/nodes/worker2.example.com:45454").size(), 1u);

  auto apps = rest.running_apps();
  ASSERT_TRUE(apps.ok()) << apps.error().str();
  ASSERT_EQ(apps->size(), 1u);  // the FINISHED one is filtered by states=RUNNING
  EXPECT_EQ((*apps)[0].id, "application_1700000000000_0001");
  EXPECT_EQ((*apps)[0].queue, "root.adhoc");
  auto app_reqs = emu.requests(Srv::RM0, "GET", "/ws/v1/cluster/apps");
  ASSERT_EQ(app_reqs.size(), 1u);
  EXPECT_EQ(app_reqs[0].param("states"), "RUNNING");

  auto am = rest.am_attempt("application_1700000000000_0001");
  ASSERT_TRUE(am.ok()) << am.error().str();
  EXPECT_EQ(am->container, "container_1700000000000_0001_01_000001");
  EXPECT_EQ(am->attempt, 1);

  auto cs = rest.containers();
  ASSERT_TRUE(cs.ok()) << cs.error().str();
  ASSERT_EQ(cs->size(), 2u);
  EXPECT_EQ((*cs)[1].id, "container_1700000000000_0001_01_000002");
  EXPECT_EQ((*cs)[1].resource, (YarnResource{2, 4096}));
  EXPECT_EQ(emu.requests(Srv::NM, "GET", "/ws/v1/node/containers").size(), 1u);

  auto conf = rest.nm_configured();
  ASSERT_TRUE(conf.ok()) << conf.error().str();
  EXPECT_EQ(*conf, (YarnResource{8, 16384}));

  // No NM request went to the RM and vice versa.
  for (const auto& r : emu.requests(Srv::RM0)) EXPECT_EQ(r.path.rfind("/ws/v1/cluster", 0), 0u) << r.path;
  for (const auto& r : emu.requests(Srv::NM)) EXPECT_EQ(r.path.rfind("/ws/v1/node", 0), 0u) << r.path;
}

TEST(YarnRest, EmptyAndSingleFormsFromTheEmulator) {
  YarnEmulator emu;
  HttpClient rm(client_opts({emu.rm_url()}));
  HttpClient nm(client_opts({emu.nm_url()}));
  YarnRest rest(rm, nm);
  for (EmptyForm f : {EmptyForm::Null, EmptyForm::EmptyString, EmptyForm::EmptyObject, EmptyForm::EmptyList}) {
    emu.set_empty_form(f);
    auto nodes = rest.nodes();
    ASSERT_TRUE(nodes.ok()) << static_cast<int>(f) << ": " << nodes.error().str();
    EXPECT_TRUE(nodes->empty());
    auto apps = rest.running_apps();
    ASSERT_TRUE(apps.ok()) << apps.error().str();
    EXPECT_TRUE(apps->empty());
    auto cs = rest.containers();
    ASSERT_TRUE(cs.ok()) << cs.error().str();
    EXPECT_TRUE(cs->empty());
  }
  emu.set_single_as_object(true);
  emu.add_this_node("solo:45454", "solo", {4, 4096});
  emu.add_container({"container_1700000000000_0009_01_000002", "RUNNING", 1, 512, "alice", "GUARANTEED"});
  auto nodes = rest.nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.error().str();
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].id, "solo:45454");
  auto cs = rest.containers();
  ASSERT_TRUE(cs.ok()) << cs.error().str();
  ASSERT_EQ(cs->size(), 1u);
}

TEST(YarnRest, UnknownNodeAndAppAreEnoent) {
  YarnEmulator emu;
  populate(emu);
  HttpClient rm(client_opts({emu.rm_url()}));
  HttpClient nm(client_opts({emu.nm_url()}));
  YarnRest rest(rm, nm);
  auto node = rest.node("nosuch:45454");
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.error().err, ENOENT);
  EXPECT_NE(node.error().message.find("404"), std::string::npos) << node.error().message;
  auto am = rest.am_attempt("application_1700000000000_0999");
  ASSERT_FALSE(am.ok());
  EXPECT_EQ(am.error().err, ENOENT);
}

TEST(YarnRest, UnauthorizedAndForbiddenAreEacces) {
  YarnEmulator emu;
  populate(emu);
  HttpClient rm(client_opts({emu.rm_url()}));
  HttpClient nm(client_opts({emu.nm_url()}));
  YarnRest rest(rm, nm);
  for (int status : {401, 403}) {
    Faults f;
    f.force_status = status;
    emu.set_faults(Srv::RM0, f);
    emu.set_faults(Srv::NM, f);
    auto nodes = rest.nodes();
    ASSERT_FALSE(nodes.ok()) << status;
    EXPECT_EQ(nodes.error().err, EACCES) << status;
    EXPECT_NE(nodes.error().message.find(std::to_string(status)), std::string::npos) << nodes.error().message;
    auto cs = rest.containers();
    ASSERT_FALSE(cs.ok()) << status;
    EXPECT_EQ(cs.error().err, EACCES) << status;
  }
}

TEST(YarnRest, SimpleAuthSendsTheUserName) {
  YarnEmulator emu;
  populate(emu);
  Faults f;
  f.require_user = true;
  emu.set_faults(Srv::RM0, f);

  HttpClient anon_rm(client_opts({emu.rm_url()}));
  HttpClient nm(client_opts({emu.nm_url()}));
  YarnRest anon(anon_rm, nm);
  auto denied = anon.nodes();
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.error().err, EACCES);

  auto o = client_opts({emu.rm_url()});
  o.auth = HttpAuth::Simple;
  o.user = "yarn-admin";
  HttpClient rm(o);
  YarnRest rest(rm, nm);
  auto nodes = rest.nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.error().str();
  auto apps = rest.running_apps();  // a query already present: user.name is appended
  ASSERT_TRUE(apps.ok()) << apps.error().str();
  auto reqs = emu.requests(Srv::RM0, "GET", "/ws/v1/cluster/apps");
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].param("user.name"), "yarn-admin");
  EXPECT_EQ(reqs[0].param("states"), "RUNNING");
}

TEST(YarnRest, ServerErrorFailsOverToTheSecondRm) {
  YarnEmulator emu(/*ha=*/true);  // RM1 active
  populate(emu);
  Faults f;
  f.force_status = 500;
  emu.set_faults(Srv::RM0, f);
  HttpClient rm(client_opts(emu.rm_urls()));
  HttpClient nm(client_opts({emu.nm_url()}));
  YarnRest rest(rm, nm);
  auto nodes = rest.nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.error().str();
  EXPECT_EQ(nodes->size(), 2u);
  auto at0 = emu.requests(Srv::RM0, "GET", "/ws/v1/cluster/nodes");
  auto at1 = emu.requests(Srv::RM1, "GET", "/ws/v1/cluster/nodes");
  ASSERT_EQ(at0.size(), 1u);
  EXPECT_EQ(at0[0].status, 500);
  ASSERT_EQ(at1.size(), 1u);
  EXPECT_EQ(at1[0].status, 200);
  EXPECT_EQ(rm.current(), emu.rm_url(1));
  EXPECT_GE(rm.stats().failovers.load(), 1u);

  // Both failing: EIO naming both.
  emu.set_faults(Srv::RM1, f);
  auto failed = rest.nodes();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().err, EIO);
  EXPECT_NE(failed.error().message.find(emu.rm_url(0)), std::string::npos) << failed.error().message;
  EXPECT_NE(failed.error().message.find(emu.rm_url(1)), std::string::npos) << failed.error().message;
}

TEST(YarnRest, StandbyRedirectIsFollowedToTheActive) {
  YarnEmulator emu(/*ha=*/true);  // RM0 standby, RM1 active
  populate(emu);
  HttpClient rm(client_opts(emu.rm_urls()));
  HttpClient nm(client_opts({emu.nm_url()}));
  YarnRest rest(rm, nm);
  auto apps = rest.running_apps();
  ASSERT_TRUE(apps.ok()) << apps.error().str();
  EXPECT_EQ(apps->size(), 1u);
  auto at0 = emu.requests(Srv::RM0);
  ASSERT_EQ(at0.size(), 1u);
  EXPECT_EQ(at0[0].status, 307);
  auto at1 = emu.requests(Srv::RM1, "GET", "/ws/v1/cluster/apps");
  ASSERT_EQ(at1.size(), 1u);
  EXPECT_EQ(at1[0].param("states"), "RUNNING");
  EXPECT_EQ(rm.current(), emu.rm_url(1));

  // A failover of the RMs: RM1 now redirects back to RM0.
  emu.set_active_rm(0);
  emu.clear_requests();
  auto nodes = rest.nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.error().str();
  ASSERT_EQ(emu.requests(Srv::RM1).size(), 1u);
  EXPECT_EQ(emu.requests(Srv::RM1)[0].status, 307);
  ASSERT_EQ(emu.requests(Srv::RM0).size(), 1u);
  EXPECT_EQ(emu.requests(Srv::RM0)[0].status, 200);
  EXPECT_EQ(rm.current(), emu.rm_url(0));
}

TEST(YarnRest, ConnectionRefusedThenBack) {
  YarnEmulator emu;
  populate(emu);
  HttpClient rm(client_opts({emu.rm_url()}));
  HttpClient nm(client_opts({emu.nm_url()}));
  YarnRest rest(rm, nm);
  emu.set_refuse(Srv::RM0, true);
  emu.set_refuse(Srv::NM, true);
  auto t0 = Clock::now();
  auto nodes = rest.nodes();
  ASSERT_FALSE(nodes.ok());
  EXPECT_EQ(nodes.error().err, ECONNREFUSED) << nodes.error().str();
  auto cs = rest.containers();
  ASSERT_FALSE(cs.ok());
  EXPECT_EQ(cs.error().err, ECONNREFUSED) << cs.error().str();
  EXPECT_LT(ms_since(t0), 1000);
  EXPECT_TRUE(emu.requests().empty());

  emu.set_refuse(Srv::RM0, false);
  auto again = rest.nodes();
  ASSERT_TRUE(again.ok()) << again.error().str();
  EXPECT_EQ(again->size(), 2u);
}

TEST(YarnRest, SlowServerTimesOut) {
  YarnEmulator emu;
  populate(emu);
  Faults f;
  f.delay_ms = 1500;
  emu.set_faults(Srv::RM0, f);
  HttpClient rm(client_opts({emu.rm_url()}, /*timeout_ms=*/300));
  HttpClient nm(client_opts({emu.nm_url()}));
  YarnRest rest(rm, nm);
  auto t0 = Clock::now();
  auto nodes = rest.nodes();
  long took = ms_since(t0);
  ASSERT_FALSE(nodes.ok());
  EXPECT_EQ(nodes.error().err, ETIMEDOUT) << nodes.error().str();
  EXPECT_GE(took, 250);
  EXPECT_LT(took, 1200);
}

TEST(YarnRest, MalformedAndTruncatedAnswersAreEproto) {
  YarnEmulator emu;
  populate(emu);
  HttpClient rm(client_opts({emu.rm_url()}));
  HttpClient nm(client_opts({emu.nm_url()}));
  YarnRest rest(rm, nm);
  Faults f;
  f.malformed_json = true;
  emu.set_faults(Srv::RM0, f);
  emu.set_faults(Srv::NM, f);
  auto nodes = rest.nodes();
  ASSERT_FALSE(nodes.ok());
  EXPECT_EQ(nodes.error().err, EPROTO);
  auto conf = rest.nm_configured();
  ASSERT_FALSE(conf.ok());
  EXPECT_EQ(conf.error().err, EPROTO);
  f.malformed_json = false;
  f.truncated_json = true;
  emu.set_faults(Srv::RM0, f);
  emu.set_faults(Srv::NM, f);
  auto apps = rest.running_apps();
  ASSERT_FALSE(apps.ok());
  EXPECT_EQ(apps.error().err, EPROTO);
  auto cs = rest.containers();
  ASSERT_FALSE(cs.ok());
  EXPECT_EQ(cs.error().err, EPROTO);
}

// ---- the resource update ---------------------------------------------------------------

TEST(YarnResize, BodyAndAnswerParsing) {
  json body = json::parse(node_resource_body({3, 6144}, {}, -1));
  ASSERT_TRUE(body.is_object());
  EXPECT_EQ(body.size(), 2u);
  ASSERT_TRUE(body["resource"].is_object());
  EXPECT_EQ(body["resource"].size(), 2u);
  EXPECT_TRUE(body["resource"]["memory"].is_number_integer());
  EXPECT_EQ(body["resource"]["memory"].get<int64_t>(), 6144);
  EXPECT_EQ(body["resource"]["vCores"].get<int64_t>(), 3);
  EXPECT_TRUE(body["overCommitTimeout"].is_number_integer());
  EXPECT_EQ(body["overCommitTimeout"].get<int64_t>(), -1);

  auto ok = parse_resource_info(R"({"resourceInfo":{"memory":6144,"vCores":3,"resourceInformations":{}}})");
  ASSERT_TRUE(ok.ok()) << ok.error().str();
  EXPECT_EQ(*ok, (YarnResource{3, 6144}));
  for (const char* bad : {"", "{", "[]", R"({"resource":{"memory":1,"vCores":1}})", R"({"resourceInfo":5})",
                          R"({"resourceInfo":{"memory":1}})", R"({"resourceInfo":{"memory":"1","vCores":1}})"}) {
    auto r = parse_resource_info(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().err, EPROTO) << bad;
  }
}

TEST(YarnResize, PostsTheDocumentedRequest) {
  YarnEmulator emu;
  populate(emu);
  Faults f;
  f.require_user = true;
  emu.set_faults(Srv::RM0, f);
  auto o = client_opts({emu.rm_url()});
  o.auth = HttpAuth::Simple;
  o.user = "khagent";
  HttpClient rm(o);

  auto r = post_node_resource(rm, "worker1.example.com:45454", {3, 6144}, {}, 180000);
  ASSERT_TRUE(r.ok()) << r.error().str();
  // The RM queues the update and answers with the total from before it.
  EXPECT_EQ(*r, (YarnResource{8, 16384}));

  auto posts = emu.rm_posts();
  ASSERT_EQ(posts.size(), 1u);
  const auto& p = posts[0];
  EXPECT_EQ(p.method, "POST");
  EXPECT_EQ(p.path, "/ws/v1/cluster/nodes/worker1.example.com:45454/resource");
  EXPECT_EQ(p.content_type, "application/json");
  EXPECT_EQ(p.param("user.name"), "khagent");
  EXPECT_EQ(p.status, 200);
  json body = json::parse(p.body, nullptr, false);
  ASSERT_FALSE(body.is_discarded()) << p.body;
  ASSERT_TRUE(body.is_object()) << p.body;
  std::vector<std::string> keys;
  for (auto it = body.begin(); it != body.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"overCommitTimeout", "resource"})) << p.body;
  ASSERT_TRUE(body["resource"].is_object()) << p.body;
  std::vector<std::string> rkeys;
  for (auto it = body["resource"].begin(); it != body["resource"].end(); ++it) rkeys.push_back(it.key());
  EXPECT_EQ(rkeys, (std::vector<std::string>{"memory", "vCores"})) << p.body;
  ASSERT_TRUE(body["resource"]["memory"].is_number_integer()) << p.body;
  ASSERT_TRUE(body["resource"]["vCores"].is_number_integer()) << p.body;
  ASSERT_TRUE(body["overCommitTimeout"].is_number_integer()) << p.body;
  EXPECT_EQ(body["resource"]["memory"].get<int64_t>(), 6144);
  EXPECT_EQ(body["resource"]["vCores"].get<int64_t>(), 3);
  EXPECT_EQ(body["overCommitTimeout"].get<int64_t>(), 180000);

  auto node = emu.node("worker1.example.com:45454");
  ASSERT_TRUE(node.has_value());
  EXPECT_EQ(node->total, (YarnResource{3, 6144}));
  EXPECT_EQ(node->updates, 1);
  EXPECT_EQ(node->last_over_commit_timeout, 180000);
  // The other node is untouched.
  EXPECT_EQ(emu.node("worker2.example.com:45454")->total, (YarnResource{4, 8192}));

  // Never preempt: -1 reaches the RM as such; the RM's read shows the new total.
  auto back = post_node_resource(rm, "worker1.example.com:45454", {8, 16384}, {}, -1);
  ASSERT_TRUE(back.ok()) << back.error().str();
  EXPECT_EQ(emu.node("worker1.example.com:45454")->last_over_commit_timeout, -1);
  HttpClient nm(client_opts({emu.nm_url()}));
  YarnRest rest(rm, nm);
  auto read = rest.node("worker1.example.com:45454");
  ASSERT_TRUE(read.ok()) << read.error().str();
  EXPECT_EQ(read->total, (YarnResource{8, 16384}));
}

TEST(YarnResize, ErrorsCarryTheStatusAndTheRemoteException) {
  YarnEmulator emu;
  populate(emu);
  HttpClient rm(client_opts({emu.rm_url()}));

  auto unknown = post_node_resource(rm, "nosuch:45454", {2, 2048}, {}, 0);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().err, ENOENT);
  EXPECT_NE(unknown.error().message.find("NotFoundException"), std::string::npos) << unknown.error().message;
  EXPECT_NE(unknown.error().message.find("nodeId, nosuch:45454, is not found"), std::string::npos)
      << unknown.error().message;

  // The emulator rejects a negative resource as the RM would a bad body.
  auto bad = post_node_resource(rm, "worker1.example.com:45454", {-1, 2048}, {}, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().err, EINVAL);
  EXPECT_NE(bad.error().message.find("BadRequestException"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("negative resource"), std::string::npos) << bad.error().message;
  EXPECT_EQ(emu.node("worker1.example.com:45454")->total, (YarnResource{8, 16384}));

  for (int status : {401, 403}) {
    Faults f;
    f.force_status = status;
    emu.set_faults(Srv::RM0, f);
    auto denied = post_node_resource(rm, "worker1.example.com:45454", {2, 2048}, {}, 0);
    ASSERT_FALSE(denied.ok());
    EXPECT_EQ(denied.error().err, EACCES);
    EXPECT_NE(denied.error().message.find("forced HTTP " + std::to_string(status)), std::string::npos)
        << denied.error().message;
  }
  Faults f;
  f.force_status = 400;
  emu.set_faults(Srv::RM0, f);
  auto forced = post_node_resource(rm, "worker1.example.com:45454", {2, 2048}, {}, 0);
  ASSERT_FALSE(forced.ok());
  EXPECT_EQ(forced.error().err, EINVAL);

  f = Faults{};
  f.truncated_json = true;
  emu.set_faults(Srv::RM0, f);
  auto cut = post_node_resource(rm, "worker1.example.com:45454", {2, 2048}, {}, 0);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().err, EPROTO);
  EXPECT_NE(cut.error().message.find("/ws/v1/cluster/nodes/worker1.example.com:45454/resource"), std::string::npos)
      << cut.error().message;

  emu.set_refuse(Srv::RM0, true);
  auto refused = post_node_resource(rm, "worker1.example.com:45454", {2, 2048}, {}, 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().err, ECONNREFUSED);
}

TEST(YarnResize, EmulatorRejectsMalformedBodies) {
  YarnEmulator emu;
  populate(emu);
  HttpClient rm(client_opts({emu.rm_url()}));
  const std::string path = "/ws/v1/cluster/nodes/worker1.example.com:45454/resource";
  for (const char* body : {"", "{", "[]", R"({"memory":1024,"vCores":1})", R"({"resource":{"memory":1024}})",
                           R"({"resource":{"memory":"1024","vCores":1}})",
                           R"({"resource":{"memory":1024,"vCores":1},"overCommitTimeout":"never"})"}) {
    HttpRequest req;
    req.method = "POST";
    req.path = path;
    req.body = body;
    auto r = rm.send(req);
    ASSERT_TRUE(r.ok()) << r.error().str();
    EXPECT_EQ(r->status, 400) << body;
  }
  HttpRequest xml;
  xml.method = "POST";
  xml.path = path;
  xml.content_type = "text/plain";
  xml.body = node_resource_body({1, 1024}, {}, 0);
  auto r = rm.send(xml);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->status, 415);
  EXPECT_EQ(emu.node("worker1.example.com:45454")->updates, 0);
}

TEST(YarnParse, AttemptOfContainer) {
  EXPECT_EQ(attempt_of_container("container_1700000000000_0001_01_000002"), 1);
  EXPECT_EQ(attempt_of_container("container_e17_1700000000000_0001_03_000001"), 3);
  EXPECT_EQ(attempt_of_container("container_ex7_1700000000000_0001_03_000001"), 0);
  EXPECT_EQ(attempt_of_container("application_1700000000000_0001"), 0);
}

TEST(YarnParse, MatchNodeSkipsNodesThatLeft) {
  YarnNodeReport old_nm, new_nm;
  old_nm.id = "worker1:40001";
  old_nm.host = "worker1";
  old_nm.state = "LOST";
  new_nm.id = "worker1:40002";
  new_nm.host = "worker1";
  new_nm.state = "RUNNING";
  auto m = match_node({old_nm, new_nm}, {"worker1"});
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->id, "worker1:40002");
}
