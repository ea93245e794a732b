// The capacity publisher against a real kube-apiserver with etcd
// (scripts/kube-mini.sh: built from Go modules, cached): the values and
// their explanation on the node, the admission policy that keeps an agent
// to its own node, the re-assert after the value is zeroed, the PATCH rate
// under a noisy online series and the time a surge takes to show, and the
// example batch manifests as the API server takes them.
//
// Never skipped: without the server the tests fail and say why.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "khagent/actuate/kube_node_status.h"
#include "khagent/app/batch_publisher.h"
#include "khagent/policy/capacity.h"
#include "khagent/util/clock.h"
#include "khagent/util/http_client.h"

namespace khagent {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kS = 1'000'000'000;

// ---- the server ---------------------------------------------------------------

struct Server {
  std::string dir;
  std::map<std::string, std::string> env;  // DIR/env
  std::string problem;                     // why there is no server ("" there is)
};

Server* g_server = nullptr;

int run(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

class KubeEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    g_server = new Server;
    char tmpl[] = "/tmp/khagent-kube-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      g_server->problem = "mkdtemp failed";
      return;
    }
    g_server->dir = tmpl;
    const std::string log = g_server->dir + "/start.log";
    if (run(std::string(KHAGENT_KUBE_MINI) + " start " + g_server->dir + " >" + log + " 2>&1") != 0) {
      std::ifstream in(log);
      std::stringstream ss;
      ss << in.rdbuf();
      g_server->problem = "scripts/kube-mini.sh start failed (scripts/setup.sh builds the API server):\n" + ss.str();
      return;
    }
    std::ifstream in(g_server->dir + "/env");
    std::string line;
    while (std::getline(in, line)) {
      auto eq = line.find('=');
      if (eq != std::string::npos) g_server->env[line.substr(0, eq)] = line.substr(eq + 1);
    }
    if (g_server->env["KUBE_URL"].empty()) g_server->problem = "no KUBE_URL in " + g_server->dir + "/env";
  }
  void TearDown() override {
    if (!g_server->dir.empty()) {
      (void)run(std::string(KHAGENT_KUBE_MINI) + " stop " + g_server->dir + " >/dev/null 2>&1");
      std::error_code ec;
      fs::remove_all(g_server->dir, ec);
    }
    delete g_server;
  }
};

#define REQUIRE_SERVER() ASSERT_EQ(g_server->problem, "") << "no API server"

HttpClient admin_client() {
  HttpClientOptions o;
  o.base_urls = {g_server->env["KUBE_URL"]};
  o.ca_file = g_server->env["KUBE_CA"];
  o.client_cert_file = g_server->env["KUBE_ADMIN_CERT"];
  o.client_key_file = g_server->env["KUBE_ADMIN_KEY"];
  o.timeout_ms = 15000;
  o.retries = 0;
  o.statuses_are_answers = true;
  return HttpClient(o);
}

struct Answer {
  long status = 0;
  json body;
};

Answer call(const std::string& method, const std::string& path, const json& body = nullptr,
            const std::string& type = "application/json") {
  HttpClient c = admin_client();
  HttpRequest r;
  r.method = method;
  r.path = path;
  if (!body.is_null()) r.body = body.dump();
  r.content_type = type;
  auto a = c.send(r);
  if (!a) return {0, json{{"error", a.error().str()}}};
  return {a->status, json::parse(a->body, nullptr, false)};
}

// Creates `obj` at `path` (409, already there, is fine).
void create(const std::string& path, const json& obj) {
  auto a = call("POST", path, obj);
  ASSERT_TRUE(a.status == 201 || a.status == 409) << path << ": HTTP " << a.status << " " << a.body.dump();
}

// A YAML scalar as JSON: quoted ones stay strings; plain true/false and
// integers become booleans and numbers.
json yaml_to_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& v : n) a.push_back(yaml_to_json(v));
      return a;
    }
    case YAML::NodeType::Scalar: {
      const std::string s = n.Scalar();
      if (n.Tag() == "!") return s;
      if (s == "true") return true;
      if (s == "false") return false;
      char* end = nullptr;
      long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end != nullptr && *end == '\0') return v;
      return s;
    }
    default: return nullptr;
  }
}

std::vector<json> manifest(const std::string& rel) {
  std::vector<json> out;
  for (const auto& d : YAML::LoadAllFromFile(std::string(KHAGENT_SOURCE_DIR) + "/manifests/" + rel))
    if (d.IsMap()) out.push_back(yaml_to_json(d));
  return out;
}

// Where an object of `kind` is created.
std::string collection(const json& o) {
  const std::string kind = o["kind"];
  const std::string ns = o["metadata"].value("namespace", "");
  if (kind == "Namespace") return "/api/v1/namespaces";
  if (kind == "ServiceAccount") return "/api/v1/namespaces/" + ns + "/serviceaccounts";
  if (kind == "Pod") return "/api/v1/namespaces/" + ns + "/pods";
  if (kind == "ClusterRole") return "/apis/rbac.authorization.k8s.io/v1/clusterroles";
  if (kind == "ClusterRoleBinding") return "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
  if (kind == "ValidatingAdmissionPolicy") return "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
  if (kind == "ValidatingAdmissionPolicyBinding")
    return "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";
  if (kind == "PriorityClass") return "/apis/scheduling.k8s.io/v1/priorityclasses";
  if (kind == "Deployment") return "/apis/apps/v1/namespaces/" + ns + "/deployments";
  return "";
}

void apply(const std::string& rel) {
  for (const auto& o : manifest(rel)) {
    const std::string where = collection(o);
    ASSERT_NE(where, "") << rel << ": no collection for " << o["kind"];
    create(where, o);
  }
}

// ---- the cluster the tests share ---------------------------------------------

// node-a and node-b, the agent's RBAC and admission policy as the manifests
// say, a pod of the agent on node-a and a token bound to it (in a file, as
// the kubelet mounts one).
struct Cluster {
  std::string token_file;
  bool ready = false;
  double policy_s = -1;  // how long the policy binding took to take effect
};

// A dry-run PATCH of `node`'s status with the bearer token: its HTTP status.
long try_patch(const std::string& token, const std::string& node) {
  HttpClientOptions o;
  o.base_urls = {g_server->env["KUBE_URL"]};
  o.ca_file = g_server->env["KUBE_CA"];
  o.retries = 0;
  o.statuses_are_answers = true;
  HttpClient c(o);
  HttpRequest r;
  r.method = "PATCH";
  r.path = "/api/v1/nodes/" + node + "/status?dryRun=All";
  r.body = R"([{"op":"add","path":"/metadata/annotations","value":{"khagent.io/probe":"1"}}])";
  r.content_type = "application/json-patch+json";
  r.headers.push_back("Authorization: Bearer " + token);
  auto a = c.send(r);
  return a ? a->status : 0;
}

Cluster& cluster() {
  static Cluster c;
  if (c.ready) return c;
  for (const char* n : {"node-a", "node-b"})
    create("/api/v1/nodes", {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", n}}}});
  apply("namespace.yaml");
  apply("rbac.yaml");
  const uint64_t bound = mono_ns();
  apply("node-status-policy.yaml");
  create("/api/v1/namespaces/khagent/pods",
         {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", "khagent-node-a"}, {"namespace", "khagent"}}},
          {"spec",
           {{"nodeName", "node-a"},
            {"serviceAccountName", "khagent"},
            {"containers", {{{"name", "khagent"}, {"image", "example.org/khagent:0.1.0"}}}}}}});
  auto pod = call("GET", "/api/v1/namespaces/khagent/pods/khagent-node-a");
  auto tok = call("POST", "/api/v1/namespaces/khagent/serviceaccounts/khagent/token",
                  {{"apiVersion", "authentication.k8s.io/v1"},
                   {"kind", "TokenRequest"},
                   {"spec",
                    {{"expirationSeconds", 3600},
                     {"boundObjectRef",
                      {{"apiVersion", "v1"},
                       {"kind", "Pod"},
                       {"name", "khagent-node-a"},
                       {"uid", pod.body["metadata"]["uid"]}}}}}});
  EXPECT_EQ(tok.status, 201) << tok.body.dump();
  c.token_file = g_server->dir + "/khagent-node-a.token";
  std::ofstream(c.token_file) << tok.body["status"].value("token", "");
  c.ready = tok.status == 201;
  // The binding takes effect asynchronously (about a second).
  const std::string token = tok.body["status"].value("token", "");
  while (c.ready && mono_ns() - bound < 30 * kS) {
    if (try_patch(token, "node-b") == 403) {
      c.policy_s = static_cast<double>(mono_ns() - bound) / 1e9;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::printf("the admission policy took effect %.2f s after it was bound\n", c.policy_s);
  EXPECT_GE(c.policy_s, 0) << "the policy never denied node-b";
  return c;
}

CapacityConfig publisher_config() {
  CapacityConfig k;
  k.enabled = true;
  k.api_server = g_server->env["KUBE_URL"];
  k.ca_file = g_server->env["KUBE_CA"];
  k.token_file = cluster().token_file;
  return k;
}

// What the admin sees on `node`.
NodeBatchView node_view(const std::string& node) {
  auto a = call("GET", "/api/v1/nodes/" + node);
  EXPECT_EQ(a.status, 200);
  auto v = parse_node_batch(a.body.dump());
  EXPECT_TRUE(v) << v.error().str();
  return v ? *v : NodeBatchView{};
}

void admin_patch(const std::string& node, const json& ops) {
  auto a = call("PATCH", "/api/v1/nodes/" + node + "/status", ops, "application/json-patch+json");
  ASSERT_EQ(a.status, 200) << a.body.dump();
}

// ---- the tests ------------------------------------------------------------------

TEST(KubeCapacity, PublishesValuesAndExplanationOnItsNode) {
  REQUIRE_SERVER();
  ASSERT_TRUE(cluster().ready);
  BatchPublisher p(publisher_config(), "node-a", false);
  const BatchQuantity q{2350, int64_t{6} << 30};
  p.want(q, "batch-cpu 2350m: test explanation", mono_ns());
  p.round(mono_ns());
  auto st = p.status();
  EXPECT_EQ(st.last_error, "");
  EXPECT_EQ(st.patches_ok, 1u);
  auto v = node_view("node-a");
  EXPECT_EQ(v.shown, q);
  EXPECT_EQ(v.explanation, "batch-cpu 2350m: test explanation");
  // Capacity and allocatable both, as whole numbers.
  auto node = call("GET", "/api/v1/nodes/node-a").body;
  EXPECT_EQ(node["status"]["capacity"]["kubernetes.io/batch-cpu"], "2350");
  EXPECT_EQ(node["status"]["allocatable"]["kubernetes.io/batch-memory"], std::to_string(int64_t{6} << 30));
}

TEST(KubeCapacity, TheAdmissionPolicyDeniesAnotherNode) {
  REQUIRE_SERVER();
  ASSERT_TRUE(cluster().ready);
  BatchPublisher p(publisher_config(), "node-b", false);
  p.want({1000, -1}, "not mine", mono_ns());
  p.round(mono_ns());
  const CapacityStatus st = p.status();
  std::printf("node-b: %s\n", st.last_error.c_str());
  EXPECT_EQ(st.patches_ok, 0u);
  EXPECT_EQ(st.patches_failed, 1u);
  EXPECT_NE(st.last_error.find("may not write the status of node node-b"), std::string::npos) << st.last_error;
  EXPECT_EQ(node_view("node-b").shown.cpu_milli, -1);
}

TEST(KubeCapacity, ReassertsWithinTheIntervalAfterTheValueIsZeroedOrRemoved) {
  REQUIRE_SERVER();
  ASSERT_TRUE(cluster().ready);
  CapacityConfig k = publisher_config();
  k.reassert_interval_ns = 2 * kS;
  BatchPublisher p(k, "node-a", false);
  const BatchQuantity q{1800, int64_t{3} << 30};
  p.want(q, "reassert test", mono_ns());
  p.start();
  auto wait_for = [&](const BatchQuantity& want, double limit_s) {
    const uint64_t t0 = mono_ns();
    while (mono_ns() - t0 < static_cast<uint64_t>(limit_s * 1e9)) {
      if (node_view("node-a").shown == want) return static_cast<double>(mono_ns() - t0) / 1e9;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1.0;
  };
  ASSERT_GE(wait_for(q, 10), 0) << "never published";
  // The kubelet zeroes extended resources when the node registers again.
  admin_patch(
      "node-a",
      json::array({{{"op", "replace"}, {"path", "/status/capacity/kubernetes.io~1batch-cpu"}, {"value", "0"}},
                   {{"op", "replace"}, {"path", "/status/allocatable/kubernetes.io~1batch-cpu"}, {"value", "0"}}}));
  const double zeroed = wait_for(q, 20);
  // Or someone removes them.
  admin_patch("node-a", json::array({{{"op", "remove"}, {"path", "/status/capacity/kubernetes.io~1batch-memory"}},
                                     {{"op", "remove"}, {"path", "/status/allocatable/kubernetes.io~1batch-memory"}}}));
  const double removed = wait_for(q, 20);
  p.stop();
  std::printf("re-asserted %.1f s after zeroing and %.1f s after removal (reassert_interval 2 s)\n", zeroed, removed);
  EXPECT_GE(zeroed, 0);
  EXPECT_LE(zeroed, 2 * 2.0 + 1);
  EXPECT_GE(removed, 0);
  EXPECT_LE(removed, 2 * 2.0 + 1);
  EXPECT_GE(p.status().reasserts, 2u);
}

// The whole chain, planner to node, over a simulated hour of a noisy
// online series (+-15% around 6 of 16 cores) and then a surge, one tick a
// simulated second, each PATCH real.
TEST(KubeCapacity, FewPatchesUnderNoiseAndASurgeShowsWithinTenSeconds) {
  REQUIRE_SERVER();
  ASSERT_TRUE(cluster().ready);
  CapacityConfig k = publisher_config();
  CapacityPlanner planner(k, true);
  BatchPublisher p(k, "node-a", false);
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> noise(-0.15, 0.15);
  const uint64_t base = mono_ns();
  auto tick = [&](int t, double online) {
    const uint64_t now = base + static_cast<uint64_t>(t) * kS;
    YarnOffer o;
    o.now_ns = now;
    o.budget_cores = std::max(0.5, 16.0 - online - 1.0);
    o.cpu_terms = BudgetTerms{16, online, 1, 0, o.budget_cores};
    auto plan = planner.plan(o, {}, now);
    p.want(plan.publish.value, plan.explanation, now);
    p.round(now);
    return plan;
  };
  for (int t = 0; t < 3600; t++) tick(t, 6.0 * (1.0 + noise(rng)));
  const uint64_t noisy_patches = p.status().patches_ok;
  EXPECT_EQ(p.status().patches_failed, 0u) << p.status().last_error;
  const int64_t before = node_view("node-a").shown.cpu_milli;
  int shown_after = -1;
  for (int t = 3600; t < 3620; t++) {
    tick(t, 12.0 * (1.0 + noise(rng) / 5));
    if (shown_after < 0 && node_view("node-a").shown.cpu_milli < before * 0.8) shown_after = t - 3600 + 1;
  }
  std::printf(
      "%lu PATCHes in a simulated hour of +-15%% noise; a surge from 6 to 12 cores of online took the "
      "node's batch-cpu from %ldm to %ldm within %d s (ticks of 1 s)\n",
      static_cast<unsigned long>(noisy_patches), static_cast<long>(before),
      static_cast<long>(node_view("node-a").shown.cpu_milli), shown_after);
  EXPECT_LE(noisy_patches, 60u);  // at most one a minute
  ASSERT_GT(shown_after, 0);
  EXPECT_LE(shown_after, 10);
}

// The example batch workloads are valid for a real API server; a pod that
// asks for more batch-cpu than the node has is judged by the published value.
TEST(KubeCapacity, ExampleBatchWorkloadsAreAcceptedAndJudgedByThePublishedValue) {
  REQUIRE_SERVER();
  ASSERT_TRUE(cluster().ready);
  // No controller manager here makes a namespace's default ServiceAccount.
  create("/api/v1/namespaces", {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "batch"}}}});
  create("/api/v1/namespaces/batch/serviceaccounts",
         {{"apiVersion", "v1"}, {"kind", "ServiceAccount"}, {"metadata", {{"name", "default"}}}});
  apply("priorityclasses.yaml");
  apply("examples/batch-pod.yaml");
  apply("examples/batch-deployment.yaml");
  auto pod = call("GET", "/api/v1/namespaces/batch/pods/batch-example");
  ASSERT_EQ(pod.status, 200);
  const std::string asked = pod.body["spec"]["containers"][0]["resources"]["requests"]["kubernetes.io/batch-cpu"];
  BatchPublisher p(publisher_config(), "node-a", false);
  p.want({500, int64_t{1} << 30}, "small", mono_ns());
  p.round(mono_ns());
  const int64_t allocatable = node_view("node-a").shown.cpu_milli;
  EXPECT_EQ(allocatable, 500);
  EXPECT_GT(whole_quantity(asked), allocatable) << "the example asks for " << asked << ", node-a has " << allocatable;
}

// The agent itself: `khagent run` with capacity.enabled publishes its own
// budget's split on its node, explained with this machine's CPUs, keeps a
// report for `khagent status`, and leaves the values on the node when it
// stops. Needs root (the agent's BPF programs).
TEST(KubeCapacity, TheAgentPublishesItsBudgetAndLeavesItOnExit) {
  REQUIRE_SERVER();
  ASSERT_TRUE(cluster().ready);
  ASSERT_EQ(geteuid(), 0u) << "the agent needs root (BPF, cgroups): run the kube tier as root";
  const std::string dir = g_server->dir;
  const std::string cfg = dir + "/agent.yaml", state = dir + "/agent-state.json", log = dir + "/agent.log";
  std::ofstream(cfg) << "capacity:\n  enabled: true\n  api_server: " << g_server->env["KUBE_URL"]
                     << "\n  ca_file: " << g_server->env["KUBE_CA"] << "\n  token_file: " << cluster().token_file
                     << "\n  node_name: node-a\n";
  pid_t agent = fork();
  if (agent == 0) {
    const std::string cmd = std::string("exec ") + KHAGENT_BINARY + " --no-pin run --no-metrics --config " + cfg +
                            " --state-file " + state + " > " + log + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  ASSERT_GT(agent, 0);
  char cpus[32];
  std::snprintf(cpus, sizeof cpus, "capacity %.2f - online", static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN)));
  const uint64_t t0 = mono_ns();
  NodeBatchView v;
  while (mono_ns() - t0 < 20 * kS) {
    v = node_view("node-a");
    if (v.explanation.find(cpus) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const double took = static_cast<double>(mono_ns() - t0) / 1e9;
  const bool report = fs::exists(dir + "/agent-state.capacity.json");
  kill(agent, SIGTERM);
  int ws = 0;
  waitpid(agent, &ws, 0);
  std::ifstream in(log);
  std::stringstream agent_log;
  agent_log << in.rdbuf();
  std::printf("the agent published in %.1f s: %s\n", took, v.explanation.c_str());
  EXPECT_NE(v.explanation.find(cpus), std::string::npos) << agent_log.str();
  EXPECT_GT(v.shown.cpu_milli, 0) << agent_log.str();
  EXPECT_TRUE(report) << "no capacity report beside the state file";
  EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) << agent_log.str();
  EXPECT_EQ(node_view("node-a").shown, v.shown) << "the values stay on the node after the agent stops";
}

}  // namespace
}  // namespace khagent

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new khagent::KubeEnvironment);
  return RUN_ALL_TESTS();
}
