// The capacity publisher (app/batch_publisher) against an in-process API
// server double that behaves as the real one did in the kube tier: a JSON
// patch applied to the stored Node (an "add" under a missing map is a 422),
// quantities written back in canonical form ("1000" as "1k"), the bearer
// token checked. The real server is in tests/kube.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "khagent/app/batch_publisher.h"
#include "khagent/util/clock.h"

namespace khagent {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

class FakeApiServer {
 public:
  FakeApiServer() {
    node_ = {{"kind", "Node"}, {"apiVersion", "v1"}, {"metadata", {{"name", "n1"}}}, {"status", json::object()}};
    svr_.Get("/api/v1/nodes/n1", [this](const httplib::Request& q, httplib::Response& r) { serve(q, r, false); });
    svr_.Patch("/api/v1/nodes/n1/status",
               [this](const httplib::Request& q, httplib::Response& r) { serve(q, r, true); });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~FakeApiServer() {
    svr_.stop();
    thread_.join();
  }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void fail_next(int n) { fail_ = n; }
  std::string token = "t1";
  std::atomic<int> patches{0};
  json node() {
    std::lock_guard lk(mu_);
    return node_;
  }

 private:
  // "1000" -> "1k", as the API server's canonical form.
  static void canonical(json& map) {
    if (!map.is_object()) return;
    for (auto& [k, v] : map.items()) {
      if (!v.is_string()) continue;
      const std::string s = v.get<std::string>();
      if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos && s.size() > 3 &&
          s.compare(s.size() - 3, 3, "000") == 0)
        v = s.substr(0, s.size() - 3) + "k";
    }
  }
  void serve(const httplib::Request& q, httplib::Response& r, bool patch) {
    if (q.get_header_value("Authorization") != "Bearer " + token) {
      r.status = 401;
      r.set_content(R"({"kind":"Status","message":"Unauthorized"})", "application/json");
      return;
    }
    if (fail_ > 0) {
      fail_--;
      r.status = 500;
      r.set_content(R"({"kind":"Status","message":"etcdserver: request timed out"})", "application/json");
      return;
    }
    std::lock_guard lk(mu_);
    if (patch) {
      patches++;
      try {
        node_ = node_.patch(json::parse(q.body));
      } catch (const std::exception&) {
        r.status = 422;
        r.set_content(R"({"kind":"Status","message":"the server rejected our request"})", "application/json");
        return;
      }
      canonical(node_["status"]["capacity"]);
      canonical(node_["status"]["allocatable"]);
    }
    r.set_content(node_.dump(), "application/json");
  }

  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  json node_;
  std::atomic<int> fail_{0};
};

struct Fixture {
  FakeApiServer api;
  std::string token_file = ::testing::TempDir() + "/khagent-token-" + std::to_string(::getpid());
  CapacityConfig cfg;
  Fixture() {
    std::ofstream(token_file) << "t1\n";
    cfg.enabled = true;
    cfg.api_server = api.base();
    cfg.token_file = token_file;
    cfg.ca_file = "";
  }
  ~Fixture() { std::remove(token_file.c_str()); }
};

TEST(BatchPublisher, PublishesOnAFreshNodeAndNotAgainWhenItShowsTheValue) {
  Fixture f;
  BatchPublisher p(f.cfg, "n1", false);
  p.want({1000, int64_t{2} << 30}, "why", mono_ns());
  p.round(mono_ns());
  EXPECT_EQ(p.status().last_error, "");
  json n = f.api.node();
  EXPECT_EQ(n["status"]["capacity"]["kubernetes.io/batch-cpu"], "1k");  // as the real server answers
  EXPECT_EQ(n["metadata"]["annotations"]["khagent.io/batch-explanation"], "why");
  // The node shows it (in canonical form): nothing more is sent.
  p.want({1000, int64_t{2} << 30}, "why, later", mono_ns());
  p.round(mono_ns());
  EXPECT_EQ(f.api.patches.load(), 1);
  EXPECT_EQ(p.status().on_node, (BatchQuantity{1000, int64_t{2} << 30}));
}

TEST(BatchPublisher, AFailedPatchIsRetriedAfterABackoffAndSaysWhy) {
  Fixture f;
  BatchPublisher p(f.cfg, "n1", false);
  p.want({1500, -1}, "why", mono_ns());
  f.api.fail_next(1);
  p.round(mono_ns());  // the GET fails
  auto st = p.status();
  EXPECT_EQ(st.patches_ok, 0u);
  EXPECT_NE(st.last_error.find("HTTP 500"), std::string::npos) << st.last_error;
  EXPECT_NE(st.last_error.find("etcdserver: request timed out"), std::string::npos) << st.last_error;
  p.round(mono_ns());  // within the backoff: nothing sent
  EXPECT_EQ(f.api.patches.load(), 0);
  std::this_thread::sleep_for(1100ms);
  p.round(mono_ns());
  st = p.status();
  EXPECT_EQ(st.patches_ok, 1u);
  EXPECT_EQ(st.last_error, "");
}

TEST(BatchPublisher, TheTokenIsReadAtEachRequest) {
  Fixture f;
  BatchPublisher p(f.cfg, "n1", false);
  p.want({1500, -1}, "a", mono_ns());
  p.round(mono_ns());
  ASSERT_EQ(p.status().patches_ok, 1u);
  f.api.token = "t2";  // rotated by the kubelet
  std::ofstream(f.token_file) << "t2\n";
  p.want({700, -1}, "b", mono_ns());
  p.round(mono_ns());
  EXPECT_EQ(p.status().patches_ok, 2u) << p.status().last_error;
  EXPECT_EQ(f.api.node()["status"]["allocatable"]["kubernetes.io/batch-cpu"], "700");
}

TEST(BatchPublisher, SaysStaleWhenNoDecisionCameAndKeepsTheValue) {
  Fixture f;
  BatchPublisher p(f.cfg, "n1", false);
  const uint64_t t = mono_ns();
  p.want({1500, -1}, "a", t);
  p.round(t);
  EXPECT_FALSE(p.status().stale);
  p.round(t + f.cfg.stale_after_ns + 1'000'000'000);
  EXPECT_TRUE(p.status().stale);
  EXPECT_EQ(f.api.node()["status"]["capacity"]["kubernetes.io/batch-cpu"], "1500");
  p.want({1500, -1}, "a", t + f.cfg.stale_after_ns + 2'000'000'000);
  p.round(t + f.cfg.stale_after_ns + 2'000'000'000);
  EXPECT_FALSE(p.status().stale);
}

TEST(BatchPublisher, AnUnreadableTokenIsAnErrorNamingTheFile) {
  Fixture f;
  f.cfg.token_file = "/nonexistent/token";
  BatchPublisher p(f.cfg, "n1", false);
  p.want({1500, -1}, "a", mono_ns());
  p.round(mono_ns());
  EXPECT_NE(p.status().last_error.find("/nonexistent/token"), std::string::npos) << p.status().last_error;
  EXPECT_EQ(f.api.patches.load(), 0);
}

}  // namespace
}  // namespace khagent
