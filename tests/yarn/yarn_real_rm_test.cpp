// The YARN client and downscaler against a real ResourceManager and
// NodeManager: Hadoop 3.5.0's MiniYARNCluster (tests/yarn-mini), started once
// for this binary, on 127.0.0.1. One NodeManager with 8 vcores, 8192 MB and 4
// yarn.io/gpu; CapacityScheduler with the DominantResourceCalculator and the
// leaf queues root.default, root.low, root.high; ACLs on and simple web auth,
// so khagent's user ("khagent") is authenticated but has no view access to
// the applications, which the launcher's own user submits. Applications run
// real `sleep` containers under a small ApplicationMaster.
//
// The tests run in this order and share the node (one cluster start): the
// first ones see its GPUs; once a test has shown that the RM's resize zeroes
// them, the node is a CPU-only one for the rest. Never skipped: without Java
// or the launcher they fail and say why.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "khagent/actuate/yarn_resize.h"
#include "khagent/app/yarn_downscaler.h"
#include "khagent/collect/yarn_rest.h"
#include "khagent/util/clock.h"
#include "khagent/util/hadoop_error.h"
#include "mini_yarn.h"

using namespace khagent;
using yarnreal::json;
using yarnreal::MiniYarn;

namespace {

using Clock = std::chrono::steady_clock;

MiniYarn* g_cluster = nullptr;
std::string g_start_error = "the cluster was not started";
double g_start_seconds = 0;

class ClusterEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    auto t0 = Clock::now();
    cluster_ = std::make_unique<MiniYarn>();
    g_start_error =
        cluster_->start(KHAGENT_JAVA, KHAGENT_YARN_MINI_JAR, KHAGENT_YARN_MINI_CLASSPATH, KHAGENT_YARN_MINI_LOG);
    g_start_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (g_start_error.empty()) {
      g_cluster = cluster_.get();
      std::printf("MiniYARNCluster ready in %.1f s: RM %s, NM %s (web %s)\n", g_start_seconds,
                  cluster_->rm_url().c_str(), cluster_->nodes()[0].id.c_str(), cluster_->nodes()[0].http.c_str());
    }
  }
  void TearDown() override {
    if (cluster_) std::printf("MiniYARNCluster stopped in %.1f s\n", cluster_->stop());
    g_cluster = nullptr;
  }

 private:
  std::unique_ptr<MiniYarn> cluster_;
};

bool wait_for(const std::function<bool()>& pred, int timeout_ms) {
  auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return pred();
}

HttpClientOptions opts(const std::string& url, const std::string& user = "khagent") {
  HttpClientOptions o;
  o.base_urls = {url};
  if (!user.empty()) {
    o.auth = HttpAuth::Simple;
    o.user = user;
  }
  o.retries = 0;
  o.timeout_ms = 10000;
  return o;
}

// The user the launcher runs as: the applications' owner and the only admin.
std::string launcher_user() {
  const char* u = std::getenv("USER");
  return u != nullptr && *u != '\0' ? u : "root";
}

class YarnRealRm : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(g_cluster, nullptr) << "no real ResourceManager: " << g_start_error;
    rm_ = std::make_unique<HttpClient>(opts(g_cluster->rm_url()));
    nm_ = std::make_unique<HttpClient>(opts("http://" + g_cluster->nodes()[0].http));
    rest_ = std::make_unique<YarnRest>(*rm_, *nm_);
    node_id_ = g_cluster->nodes()[0].id;
  }

  YarnNodeReport node() {
    auto n = rest_->node(node_id_);
    EXPECT_TRUE(n.ok()) << n.error().str();
    return n.ok() ? n.value() : YarnNodeReport{};
  }

  // Posts directly (not through the downscaler) and checks the RM took it.
  void post(YarnResource r, int64_t timeout_ms) {
    auto a = post_node_resource(*rm_, node_id_, r, {}, timeout_ms);
    ASSERT_TRUE(a.ok()) << a.error().str();
    ASSERT_TRUE(wait_for([&] { return node().total == r; }, 5000)) << "RM total stays " << node().total.vcores;
  }

  json submit(const std::string& queue, int count, int mem, int vcores) {
    json app = g_cluster->command("submit " + queue + " " + std::to_string(count) + " " + std::to_string(mem) + " " +
                                  std::to_string(vcores) + " 0");
    if (app.contains("app")) submitted_.push_back(app["app"]);
    return app;
  }
  json status(const std::string& app) { return g_cluster->command("status " + app); }
  void kill_app(const std::string& app) { g_cluster->command("kill " + app); }

  // Stops the downscaler with a restore, checks the node has its whole
  // total back (every type, in the RM and in the NodeManager's configured
  // resources), then kills `apps` and waits for their containers to go.
  void stop_restored_and_cleared(YarnDownscaler& ds, const YarnNodeReport& before,
                                 const std::vector<std::string>& apps) {
    ds.stop(true);
    ASSERT_TRUE(wait_for([&] { return node().total == before.total; }, 5000));
    EXPECT_EQ(node().other_resources, before.other_resources);
    ASSERT_TRUE(wait_for(
        [&] {
          auto c = rest_->nm_configured();
          return c.ok() && *c == before.total;
        },
        5000));
    for (const auto& a : apps) kill_app(a);
    ASSERT_TRUE(wait_for([&] { return containers().empty(); }, 15000));
  }

  YarnConfig downscaler_config() {
    YarnConfig c;
    c.enabled = true;
    c.rm_urls = {g_cluster->rm_url()};
    c.auth = HttpAuth::Simple;
    c.user = "khagent";
    c.request_timeout_ms = 5000;
    c.connect_timeout_ms = 2000;
    c.retries = 0;
    c.refresh_interval_ns = 1'000'000'000;
    c.min_vcores = 1;
    c.reclaim_grace_ns = 3'000'000'000;
    return c;
  }

  // The NodeManager's active containers.
  std::vector<NmContainer> containers() {
    auto cs = rest_->containers();
    EXPECT_TRUE(cs.ok()) << cs.error().str();
    std::vector<NmContainer> out;
    if (cs.ok()) {
      for (const auto& c : cs.value()) {
        if (nm_container_active(c.state)) out.push_back(c);
      }
    }
    return out;
  }

  // An offer that knows every active container (cgroup paths are stand-ins:
  // these containers have none; see ProcessKiller).
  YarnOffer offer(double budget) {
    YarnOffer o;
    o.now_ns = mono_ns();
    o.budget_cores = budget;
    for (const auto& c : containers()) o.containers[c.id] = {"/yarn/" + c.id, 0};
    return o;
  }

  // The RM's creation time (ms) of each container of an application's first
  // attempt, read as its admin: the key of the RM's over-commit kill order.
  std::map<std::string, int64_t> created(const std::string& app) {
    HttpClient admin(opts(g_cluster->rm_url(), launcher_user()));
    const std::string attempt = "appattempt_" + app.substr(app.find('_') + 1) + "_000001";
    HttpRequest req;
    req.path = "/ws/v1/cluster/apps/" + app + "/appattempts/" + attempt + "/containers";
    req.headers = {"Accept: application/json"};
    auto r = admin.send(req);
    std::map<std::string, int64_t> out;
    EXPECT_TRUE(r.ok() && r->status == 200) << req.path << ": " << (r.ok() ? r->body : r.error().str());
    if (!r.ok() || r->status != 200) return out;
    json doc = json::parse(r->body, nullptr, false);
    // Hadoop 3.5 writes {"container":[...]}, without the "containers" wrapper
    // of its other lists.
    const json list = doc.is_object() ? doc.value("container", json::array()) : json::array();
    for (const auto& c : list) out[c.value("containerId", "")] = c.value("startedTime", int64_t{0});
    EXPECT_FALSE(out.empty()) << r->body;
    return out;
  }

  // After a failed test, gives the next ones the node as they expect it: its
  // configured size, and none of this test's applications left running.
  void TearDown() override {
    if (g_cluster == nullptr || !HasFailure()) return;
    std::printf("after the failure: restoring the node and killing %zu application(s)\n", submitted_.size());
    (void)post_node_resource(*rm_, node_id_, {8, 8192}, {}, -1);
    for (const auto& app : submitted_) kill_app(app);
    wait_for([&] { return containers().empty(); }, 15000);
  }

  std::unique_ptr<HttpClient> rm_, nm_;
  std::unique_ptr<YarnRest> rest_;
  std::string node_id_;
  std::vector<std::string> submitted_;
};

// Completed containers of an application as its AM saw them: id -> exit status.
std::map<std::string, int> completed(const json& st) {
  std::map<std::string, int> out;
  for (const auto& c : st.value("completed", json::array())) out[c.value("id", "")] = c.value("exit", 0);
  return out;
}

std::vector<std::string> strings(const json& a) {
  std::vector<std::string> out;
  for (const auto& s : a) out.push_back(s.get<std::string>());
  return out;
}

constexpr int kPreempted = -102;  // ContainerExitStatus.PREEMPTED: the RM's kill

// khagent's local kill for containers without a cgroup: SIGKILL to every
// process whose environment names the container (the NodeManager exports
// CONTAINER_ID), and only to descendants of the launcher this binary started.
struct ProcessKiller {
  pid_t launcher;
  std::vector<std::string> killed;

  static pid_t parent_of(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto close = s.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream rest(s.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    return ppid;
  }
  bool descends_from_launcher(pid_t pid) const {
    for (int i = 0; i < 32 && pid > 1; i++) {
      pid = parent_of(pid);
      if (pid == launcher) return true;
    }
    return false;
  }

  YarnDownscaler::KillFn fn() {
    return [this](const std::string&, const std::string& rel) -> Result<CgroupKillResult> {
      const std::string id = rel.substr(rel.rfind('/') + 1);
      const std::string needle = "CONTAINER_ID=" + id;
      CgroupKillResult r;
      DIR* d = ::opendir("/proc");
      if (d == nullptr) return make_error(errno, "opendir /proc");
      while (dirent* e = ::readdir(d)) {
        pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
        if (pid <= 1) continue;
        std::ifstream env("/proc/" + std::to_string(pid) + "/environ");
        std::string text((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
        bool match = false;
        for (size_t p = 0; p < text.size();) {
          size_t z = text.find('\0', p);
          if (text.compare(p, (z == std::string::npos ? text.size() : z) - p, needle) == 0) match = true;
          if (z == std::string::npos) break;
          p = z + 1;
        }
        if (match && descends_from_launcher(pid) && ::kill(pid, SIGKILL) == 0) r.signalled++;
      }
      ::closedir(d);
      if (r.signalled == 0) return make_error(ENOENT, "no process of " + id);
      killed.push_back(id);
      r.empty = true;
      return r;
    };
  }
};

}  // namespace

// ---- reading -------------------------------------------------------------------

TEST_F(YarnRealRm, ReadsTheNodeWithItsGpus) {
  auto nodes = rest_->nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.error().str();
  ASSERT_EQ(nodes->size(), 1u);
  const YarnNodeReport& n = (*nodes)[0];
  EXPECT_EQ(n.id, node_id_);
  EXPECT_EQ(n.state, "RUNNING");
  EXPECT_EQ(n.total, (YarnResource{8, 8192}));
  EXPECT_EQ(n.other_resources, (std::map<std::string, int64_t>{{"yarn.io/gpu", 4}}));
  auto m = match_node(nodes.value(), {"localhost"});
  ASSERT_TRUE(m.ok()) << m.error().str();
  EXPECT_EQ(m->id, node_id_);
  auto conf = rest_->nm_configured();
  ASSERT_TRUE(conf.ok()) << conf.error().str();
  EXPECT_EQ(*conf, (YarnResource{8, 8192}));
  auto cs = rest_->containers();
  ASSERT_TRUE(cs.ok()) << cs.error().str();
  EXPECT_TRUE(cs->empty());
  auto apps = rest_->running_apps();
  ASSERT_TRUE(apps.ok()) << apps.error().str();
  EXPECT_TRUE(apps->empty());
}

TEST_F(YarnRealRm, ErrorsAsTheRealRmWritesThem) {
  // Simple auth without user.name: the login filter's 401 HTML page.
  HttpClient anon(opts(g_cluster->rm_url(), ""));
  YarnRest anon_rest(anon, anon);
  auto denied = anon_rest.nodes();
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.error().err, EACCES);
  EXPECT_NE(denied.error().message.find("HTTP 401: Authentication required (web server)"), std::string::npos)
      << denied.error().message;
  auto post_denied = post_node_resource(anon, node_id_, {8, 8192}, {}, -1);
  ASSERT_FALSE(post_denied.ok());
  EXPECT_EQ(post_denied.error().err, EACCES);
  // An unknown node: the RM's NotFoundException.
  auto unknown = post_node_resource(*rm_, "nosuch:1", {1, 1024}, {}, -1);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().err, ENOENT) << unknown.error().message;
  EXPECT_NE(unknown.error().message.find("is not found"), std::string::npos) << unknown.error().message;
  // A path no REST resource serves: an HTML 404, not an unknown node.
  HttpRequest req;
  req.path = "/ws/v1/cluster/nodes/" + node_id_ + "/resourcex";
  req.method = "POST";
  req.body = "{}";
  auto none = rm_->send(req);
  ASSERT_TRUE(none.ok()) << none.error().str();
  EXPECT_EQ(none->status, 404);
  EXPECT_EQ(hadoop_http_error(none->status, none->body).err, EOPNOTSUPP) << none->body;
  // A malformed node id: 400.
  auto bad = post_node_resource(*rm_, "nosuch", {1, 1024}, {}, -1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().err, EINVAL) << bad.error().message;
}

// ---- other resource types ------------------------------------------------------

TEST_F(YarnRealRm, TheDownscalerLeavesAGpuNodeAlone) {
  YarnDownscaler ds(downscaler_config(), false, "/nonexistent", {"localhost"});
  for (int i = 0; i < 3; i++) {
    ds.round(offer(2));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  YarnStatus st = ds.status();
  EXPECT_EQ(st.node_id, node_id_);
  EXPECT_EQ(st.last_action, "refused");
  EXPECT_NE(st.last_error.find("yarn.io/gpu=4"), std::string::npos) << st.last_error;
  EXPECT_EQ(st.updates_ok, 0u);
  ds.stop(true);
  YarnNodeReport n = node();
  EXPECT_EQ(n.total, (YarnResource{8, 8192}));
  EXPECT_EQ(n.other_resources.at("yarn.io/gpu"), 4);
}

TEST_F(YarnRealRm, AResizeZeroesOtherTypesWhateverThePostCarries) {
  YarnNodeReport before = node();
  ASSERT_EQ(before.other_resources.at("yarn.io/gpu"), 4);
  // The whole vector, GPUs included, with 6 vcores.
  auto a = post_node_resource(*rm_, node_id_, {6, 8192}, before.other_resources, -1);
  ASSERT_TRUE(a.ok()) << a.error().str();
  std::printf("POST 6 vcores: the RM answered %lld vcores (its total %s the update)\n",
              static_cast<long long>(a->vcores), a->vcores == 8 ? "before" : "after");
  EXPECT_TRUE(a->vcores == 8 || a->vcores == 6) << a->vcores;
  ASSERT_TRUE(wait_for([&] { return node().total.vcores == 6; }, 5000));
  EXPECT_EQ(node().other_resources.at("yarn.io/gpu"), 0) << "the RM kept the GPUs: update docs/yarn.md";
  // The NodeManager takes the new total with a heartbeat.
  auto t0 = Clock::now();
  ASSERT_TRUE(wait_for(
      [&] {
        auto c = rest_->nm_configured();
        return c.ok() && c->vcores == 6;
      },
      5000));
  std::printf("the NodeManager showed 6 vcores %.0f ms after the RM did\n",
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  // Back to the full size: the GPUs stay 0, whatever is posted.
  a = post_node_resource(*rm_, node_id_, {8, 8192}, before.other_resources, -1);
  ASSERT_TRUE(a.ok()) << a.error().str();
  ASSERT_TRUE(wait_for([&] { return node().total.vcores == 8; }, 5000));
  EXPECT_EQ(node().other_resources.at("yarn.io/gpu"), 0);
}

// ---- containers and applications -----------------------------------------------

TEST_F(YarnRealRm, ContainersAndApplicationMastersAsTheRmShowsThem) {
  json low = submit("low", 3, 512, 1);
  json high = submit("root.high", 2, 512, 1);
  const std::string low_app = low["app"], high_app = high["app"];
  const std::string low_am = low["status"]["am"];
  std::vector<NmContainer> cs = containers();
  ASSERT_EQ(cs.size(), 7u);
  std::map<std::string, YarnResource> by_id;
  for (const auto& c : cs) by_id[c.id] = c.resource;
  EXPECT_EQ(by_id.at(low_am), (YarnResource{1, 256}));
  for (const auto& id : strings(low["status"]["running"])) EXPECT_EQ(by_id.at(id), (YarnResource{1, 512})) << id;
  // Queues by full path on the CapacityScheduler of 3.5.0, however submitted.
  auto apps = rest_->running_apps();
  ASSERT_TRUE(apps.ok()) << apps.error().str();
  std::map<std::string, std::string> queue;
  for (const auto& a : apps.value()) queue[a.id] = a.queue;
  EXPECT_EQ(queue[low_app], "root.low");
  EXPECT_EQ(queue[high_app], "root.high");
  // khagent's user has no view access: the attempt's container is "".
  auto hidden = rest_->am_attempt(low_app);
  ASSERT_TRUE(hidden.ok()) << hidden.error().str();
  EXPECT_EQ(hidden->attempt, 1);
  EXPECT_EQ(hidden->container, "");
  EXPECT_TRUE(first_container_of_attempt(low_am, hidden->attempt)) << low_am;
  // The admin sees it.
  HttpClient admin(opts(g_cluster->rm_url(), launcher_user()));
  YarnRest admin_rest(admin, admin);
  auto shown = admin_rest.am_attempt(low_app);
  ASSERT_TRUE(shown.ok()) << shown.error().str();
  EXPECT_EQ(shown->container, low_am);
  kill_app(low_app);
  kill_app(high_app);
  ASSERT_TRUE(wait_for([&] { return containers().empty(); }, 15000));
}

// ---- reclaim ---------------------------------------------------------------------

TEST_F(YarnRealRm, TheDownscalerShrinksReclaimsInOrderAndRestores) {
  YarnNodeReport before = node();
  ASSERT_EQ(before.total, (YarnResource{8, 8192}));
  json low = submit("low", 3, 512, 1);    // AM + 3 workers, 4 vcores
  json high = submit("high", 2, 512, 1);  // AM + 2 workers, 3 vcores
  const std::string low_app = low["app"], high_app = high["app"];
  std::vector<std::string> low_workers = strings(low["status"]["running"]);
  ASSERT_EQ(low_workers.size(), 3u);
  std::sort(low_workers.begin(), low_workers.end());  // oldest first
  ASSERT_EQ(containers().size(), 7u);

  YarnConfig cfg = downscaler_config();
  cfg.queue_priority = {{"low", 0}, {"root.high", 10}};  // a leaf key and a full-path key
  ProcessKiller killer{g_cluster->pid(), {}};
  YarnDownscaler ds(cfg, false, "/nonexistent", {"localhost"});
  ds.set_killer(killer.fn());
  // Budget 5 cores -> 5 vcores for 7 used: two go, low's two newest workers.
  auto t0 = Clock::now();
  ds.round(offer(5));
  ASSERT_EQ(ds.status().updates_ok, 1u) << ds.status().last_error;
  ASSERT_TRUE(wait_for([&] { return node().total == YarnResource{5, 8192}; }, 5000));
  ASSERT_TRUE(wait_for(
      [&] {
        ds.round(offer(5));
        return killer.killed.size() >= 2;
      },
      20000))
      << ds.status().last_error;
  double reclaim_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(killer.killed, (std::vector<std::string>{low_workers[2], low_workers[1]}));
  // The RM sees them end, as khagent's kills (not its own preemption).
  ASSERT_TRUE(wait_for([&] { return completed(status(low_app)).size() == 2; }, 15000));
  json st = status(low_app);
  for (const auto& [id, exit] : completed(st)) EXPECT_NE(exit, kPreempted) << id;
  EXPECT_TRUE(st["preempt"].empty()) << st.dump();  // overCommitTimeout -1: no notices
  EXPECT_EQ(strings(st["running"]), (std::vector<std::string>{low_workers[0]}));
  json hs = status(high_app);
  EXPECT_TRUE(hs["completed"].empty()) << hs.dump();
  EXPECT_TRUE(hs["preempt"].empty()) << hs.dump();
  // Nothing more to reclaim: a few more rounds kill nothing.
  for (int i = 0; i < 4; i++) {
    ds.round(offer(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  EXPECT_EQ(killer.killed.size(), 2u);
  std::printf("shrink to 5 vcores, 2 containers reclaimed by khagent in %.1f s (grace 3 s)\n", reclaim_s);

  // The restore brings back the whole total, every type as before.
  stop_restored_and_cleared(ds, before, {low_app, high_app});
}

TEST_F(YarnRealRm, OverCommitAsTheRmDoesIt) {
  json app = submit("low", 3, 512, 1);  // 4 vcores
  const std::string id = app["app"];
  std::vector<std::string> workers = strings(app["status"]["running"]);
  ASSERT_EQ(workers.size(), 3u) << app.dump();
  // Oldest first, by the RM's creation time (ms). Containers allocated in one
  // heartbeat can share a millisecond, and the RM's order among them is its
  // map's, not the container ids'.
  std::map<std::string, int64_t> born = created(id);
  for (const auto& w : workers) ASSERT_TRUE(born.count(w)) << w;
  std::stable_sort(workers.begin(), workers.end(),
                   [&](const std::string& a, const std::string& b) { return born[a] < born[b]; });
  // Shrink to 2 vcores with a 2 s timeout: the AM is told at once which of
  // its containers the RM will take (non-AM, newest first), and the RM kills
  // them at the deadline.
  auto t0 = Clock::now();
  post({2, 8192}, 2000);
  ASSERT_TRUE(wait_for([&] { return status(id)["preempt"].size() >= 2; }, 2000)) << status(id).dump();
  double noticed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<std::string> noticed = strings(status(id)["preempt"]);
  ASSERT_EQ(noticed.size(), 2u) << status(id).dump();
  // Two workers (never the AM), and none older than the worker left.
  std::string left;
  for (const auto& w : workers) {
    if (std::find(noticed.begin(), noticed.end(), w) == noticed.end()) left = w;
  }
  for (const auto& c : noticed) {
    ASSERT_TRUE(born.count(c)) << c << " is not a worker";
    EXPECT_GE(born[c], born[left]) << c << " was taken before the newer " << left;
  }
  EXPECT_TRUE(completed(status(id)).empty());
  ASSERT_TRUE(wait_for([&] { return completed(status(id)).size() == 2; }, 8000)) << status(id).dump();
  double killed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(killed_s, 1.9);
  auto done = completed(status(id));
  for (const auto& c : noticed) {
    ASSERT_TRUE(done.count(c)) << c << " noticed but not completed: " << status(id).dump();
    EXPECT_EQ(done.at(c), kPreempted) << c;
  }
  std::printf("overCommitTimeout 2 s: AM notified after %.1f s, 2 containers preempted after %.1f s\n", noticed_s,
              killed_s);
  // -1 does not clear the deadline set before: a shrink with -1 is reclaimed
  // by the RM at its next heartbeat.
  t0 = Clock::now();
  post({1, 8192}, -1);
  ASSERT_TRUE(wait_for([&] { return completed(status(id)).size() == 3; }, 5000)) << status(id).dump();
  ASSERT_TRUE(completed(status(id)).count(left)) << status(id).dump();
  EXPECT_EQ(completed(status(id)).at(left), kPreempted);
  std::printf("then -1: the RM still preempted after %.1f s (its earlier deadline stands)\n",
              std::chrono::duration<double>(Clock::now() - t0).count());
  post({8, 8192}, -1);
  kill_app(id);
  ASSERT_TRUE(wait_for([&] { return containers().empty(); }, 15000));
}

TEST_F(YarnRealRm, WithReclaimerRmOnlyTheRmKills) {
  json app = submit("low", 3, 512, 1);  // 4 vcores
  const std::string id = app["app"];
  YarnConfig cfg = downscaler_config();
  cfg.reclaimer = Reclaimer::Rm;
  cfg.over_commit_timeout_ms = 2000;
  ProcessKiller killer{g_cluster->pid(), {}};
  YarnDownscaler ds(cfg, false, "/nonexistent", {"localhost"});
  ds.set_killer(killer.fn());
  ds.round(offer(2));
  ASSERT_EQ(ds.status().updates_ok, 1u) << ds.status().last_error;
  ASSERT_TRUE(wait_for(
      [&] {
        ds.round(offer(2));
        return completed(status(id)).size() >= 2;
      },
      15000))
      << status(id).dump();
  for (int i = 0; i < 10; i++) {  // past khagent's 3 s grace too
    ds.round(offer(2));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  EXPECT_TRUE(killer.killed.empty());
  EXPECT_EQ(ds.status().kills_ok, 0u);
  for (const auto& [cid, exit] : completed(status(id))) EXPECT_EQ(exit, kPreempted) << cid;
  ds.stop(true);
  ASSERT_TRUE(wait_for([&] { return node().total == (YarnResource{8, 8192}); }, 5000));
  kill_app(id);
  ASSERT_TRUE(wait_for([&] { return containers().empty(); }, 15000));
}

// ---- the memory lever's part -----------------------------------------------------

// The NodeManager's memory follows the memory lever's offline budget, and
// while the node's memory is critical the highest-ranked container goes at
// once (no grace), one every 2 s at most, in the CPU reclaim's order.
TEST_F(YarnRealRm, TheMemoryBudgetShrinksTheNodeAndACriticalNodeLosesOneContainerAtOnce) {
  YarnNodeReport before = node();
  ASSERT_EQ(before.total, (YarnResource{8, 8192}));
  json low = submit("low", 3, 512, 1);    // AM + 3 workers
  json high = submit("high", 2, 512, 1);  // AM + 2 workers
  const std::string low_app = low["app"], high_app = high["app"];
  std::vector<std::string> low_workers = strings(low["status"]["running"]);
  ASSERT_EQ(low_workers.size(), 3u);
  // Without cgroups (mount "/nonexistent") no container has a birth time:
  // the reclaim order falls back to the highest id first.
  std::sort(low_workers.begin(), low_workers.end());
  ASSERT_EQ(containers().size(), 7u);

  YarnConfig cfg = downscaler_config();
  cfg.queue_priority = {{"low", 0}, {"root.high", 10}};
  ProcessKiller killer{g_cluster->pid(), {}};
  YarnDownscaler ds(cfg, false, "/nonexistent", {"localhost"});
  ds.set_killer(killer.fn());
  auto offer_memory = [&](uint64_t budget_mb, const std::string& critical) {
    YarnOffer o = offer(8);
    o.memory_budget_bytes = budget_mb << 20;
    if (!critical.empty()) o.memory_emergency = critical;
    return o;
  };
  // A budget of 6144 MiB: the node advertises that much memory, all its
  // CPU, and kills nothing (the 7 containers' 3584 MB fit).
  ds.round(offer_memory(6144, ""));
  ASSERT_EQ(ds.status().updates_ok, 1u) << ds.status().last_error;
  ASSERT_TRUE(wait_for([&] { return node().total == YarnResource{8, 6144}; }, 5000)) << node().total.memory_mb;
  for (int i = 0; i < 3; i++) {
    ds.round(offer_memory(6144, ""));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(killer.killed.empty());

  // Critical: low's worker with the highest id goes in the same round, not after the
  // 3 s grace; a second round within 2 s takes nothing more.
  const std::string why = "test: 40 MiB free above the eviction threshold";
  auto t0 = Clock::now();
  ds.round(offer_memory(6144, why));
  const double first_s = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_EQ(killer.killed, (std::vector<std::string>{low_workers[2]})) << ds.status().last_error;
  EXPECT_LT(first_s, 2.5) << "not at once: the grace is 3 s";
  ds.round(offer_memory(6144, why));
  EXPECT_EQ(killer.killed.size(), 1u) << "a second kill within 2 s";
  // The RM sees it end as khagent's kill, and the next goes 2 s after.
  ASSERT_TRUE(wait_for([&] { return completed(status(low_app)).size() == 1; }, 15000));
  for (const auto& [id, exit] : completed(status(low_app))) EXPECT_NE(exit, kPreempted) << id;
  ASSERT_TRUE(wait_for(
      [&] {
        ds.round(offer_memory(6144, why));
        return killer.killed.size() >= 2;
      },
      10000));
  const double second_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(killer.killed, (std::vector<std::string>{low_workers[2], low_workers[1]}));
  EXPECT_GE(second_s, 2.0);
  // No longer critical: nothing more goes.
  for (int i = 0; i < 4; i++) {
    ds.round(offer_memory(6144, ""));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  EXPECT_EQ(killer.killed.size(), 2u);
  EXPECT_TRUE(completed(status(high_app)).empty()) << status(high_app).dump();
  std::printf(
      "memory budget 6144 MiB advertised; critical node: first container killed after %.2f s, "
      "the next after %.1f s\n",
      first_s, second_s);

  stop_restored_and_cleared(ds, before, {low_app, high_app});
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new ClusterEnv);
  return RUN_ALL_TESTS();
}
