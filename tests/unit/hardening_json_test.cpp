// Bounded JSON parsing (util/json_bounded) and its use for the kubelet's pod
// list and every YARN RM/NM body: nesting, value counts and bytes are capped
// while parsing, so a small (or gzip-compressed) hostile body cannot make
// the agent build a document of GBs.
#include <httplib.h>
#include <zlib.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "khagent/collect/kubelet_pods.h"
#include "khagent/collect/yarn_rest.h"
#include "khagent/util/http_client.h"
#include "khagent/util/json_bounded.h"
#include "test_util.h"

using namespace khagent;
using json = nlohmann::json;

namespace {

std::string nested(size_t depth, const std::string& prefix = "", const std::string& suffix = "") {
  std::string s = prefix;
  s.append(depth, '[');
  s.append(depth, ']');
  return s + suffix;
}

std::string zeros(size_t n, const std::string& prefix = "[", const std::string& suffix = "]") {
  std::string s = prefix;
  s.reserve(prefix.size() + 2 * n + suffix.size());
  for (size_t i = 0; i < n; ++i) s += i == 0 ? "0" : ",0";
  return s + suffix;
}

std::string gzip(const std::string& in) {
  z_stream z{};
  if (deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK) return {};
  std::string out(deflateBound(&z, in.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return rc == Z_STREAM_END ? out : std::string();
}

// One httplib server on 127.0.0.1 answering every GET with `body` (sent
// as it is, with `encoding` as its Content-Encoding when given).
class RawServer {
 public:
  RawServer(std::string body, std::string encoding = "") : body_(std::move(body)), encoding_(std::move(encoding)) {
    svr_.Get(".*", [this](const httplib::Request&, httplib::Response& r) {
      // Not a compressible type, so httplib does not compress it again.
      r.set_content(body_, "application/octet-stream");
      if (!encoding_.empty()) r.set_header("Content-Encoding", encoding_);
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~RawServer() {
    svr_.stop();
    thread_.join();
  }
  std::string url(const std::string& path = "") const { return "http://127.0.0.1:" + std::to_string(port_) + path; }

 private:
  std::string body_, encoding_;
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace

// ---- util/json_bounded -------------------------------------------------------

TEST(HardeningJson, NestingPastTheLimitIsRefusedBeforeItIsBuilt) {
  JsonLimits l{1 << 20, 64, 1'000'000};
  EXPECT_TRUE(parse_json_bounded(nested(64), l).ok());
  auto r = parse_json_bounded(nested(65), l);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, E2BIG);
  EXPECT_NE(r.error().message.find("deeper than 64"), std::string::npos) << r.error().message;

  // 2M levels (4 MB of text): refused at once rather than built.
  l.max_bytes = 8 << 20;
  auto t0 = std::chrono::steady_clock::now();
  auto deep = parse_json_bounded(nested(2'000'000, "{\"items\":", "}"), l);
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.error().err, E2BIG);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

TEST(HardeningJson, ValuesPastTheLimitAreRefused) {
  JsonLimits l{1 << 20, 64, 1000};
  EXPECT_TRUE(parse_json_bounded(zeros(999), l).ok());  // 999 zeros and the array
  auto r = parse_json_bounded(zeros(1000), l);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, E2BIG);
  EXPECT_NE(r.error().message.find("more than 1000 values"), std::string::npos) << r.error().message;
  // Objects count as values too; keys do not.
  std::string objs = "[";
  for (int i = 0; i < 600; ++i) objs += std::string(i ? "," : "") + "{\"k\":1}";
  objs += "]";
  EXPECT_FALSE(parse_json_bounded(objs, l).ok());
}

TEST(HardeningJson, BytesPastTheLimitAndBadTextAreErrors) {
  JsonLimits l{100, 64, 1000};
  auto big = parse_json_bounded(std::string(101, ' '), l);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().err, E2BIG);
  for (const char* bad : {"", "{", "[1,]", "{\"a\":1} x", "nul", "[1e400]"}) {
    auto r = parse_json_bounded(bad, l);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().err, EINVAL) << bad;
  }
}

TEST(HardeningJson, BuildsWhatNlohmannBuilds) {
  const std::string text = R"({"a":[1,-2,3.5,true,false,null,"x\u00e9"],"b":{"c":{},"d":[],"a":1,"a":2},)"
                           R"("big":18446744073709551615,"neg":-9223372036854775808,"e":[[{"f":[{}]}]]})";
  auto r = parse_json_bounded(text, JsonLimits{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value(), json::parse(text));
  EXPECT_EQ(parse_json_bounded("  7 ", JsonLimits{}).value(), json(7));
}

TEST(HardeningJson, IntInRangeNeverOverflows) {
  EXPECT_EQ(json_int_in_range(json(8), 0, 10), 8);
  EXPECT_EQ(json_int_in_range(json(8.9), 0, 10), 8);
  EXPECT_EQ(json_int_in_range(json(-0.0), 0, 10), 0);
  EXPECT_EQ(json_int_in_range(json(-1), 0, 10), std::nullopt);
  EXPECT_EQ(json_int_in_range(json(11), 0, 10), std::nullopt);
  EXPECT_EQ(json_int_in_range(json(1e300), 0, INT64_MAX), std::nullopt);
  EXPECT_EQ(json_int_in_range(json(-1e300), INT64_MIN, 0), std::nullopt);
  EXPECT_EQ(json_int_in_range(json(9223372036854775808.0), 0, INT64_MAX), std::nullopt);  // 2^63
  EXPECT_EQ(json_int_in_range(json(std::numeric_limits<double>::quiet_NaN()), INT64_MIN, INT64_MAX), std::nullopt);
  EXPECT_EQ(json_int_in_range(json(std::numeric_limits<double>::infinity()), INT64_MIN, INT64_MAX), std::nullopt);
  EXPECT_EQ(json_int_in_range(json(UINT64_MAX), 0, INT64_MAX), std::nullopt);
  EXPECT_EQ(json_int_in_range(json(uint64_t{INT64_MAX}), 0, INT64_MAX), INT64_MAX);
  EXPECT_EQ(json_int_in_range(json(INT64_MAX), 0, 1'000'000), std::nullopt);
  EXPECT_EQ(json_int_in_range(json("8"), 0, 10), std::nullopt);
  EXPECT_EQ(json_int_in_range(json(nullptr), 0, 10), std::nullopt);
}

// ---- the kubelet's pod list ----------------------------------------------------

TEST(HardeningKubelet, PodListPastTheLimitsIsRefused) {
  auto deep = parse_pod_list(nested(100'000, "{\"items\":", "}"));
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.error().err, E2BIG);
  EXPECT_NE(deep.error().message.find("pod list"), std::string::npos) << deep.error().message;

  auto flat = parse_pod_list(zeros(kPodListMaxValues, "{\"items\":[", "]}"));
  ASSERT_FALSE(flat.ok());
  EXPECT_EQ(flat.error().err, E2BIG);
  EXPECT_NE(flat.error().message.find("values"), std::string::npos) << flat.error().message;
}

TEST(HardeningKubelet, ALargeRealisticPodListFits) {
  // 500 pods of ~1500 JSON values each (heavier than most): 750k values.
  json items = json::array();
  for (int i = 0; i < 500; ++i) {
    json pod;
    pod["metadata"] = {{"uid", "uid-" + std::to_string(i)},
                       {"name", "pod-" + std::to_string(i)},
                       {"namespace", "prod"},
                       {"labels", {{"app", "svc"}, {"team", "search"}}},
                       {"annotations", {{"a", "b"}}}};
    pod["spec"] = {{"priorityClassName", "high"}};
    json env = json::array();
    for (int k = 0; k < 480; ++k) env.push_back({{"name", "E"}, {"value", "v"}});
    pod["spec"]["containers"] = json::array({{{"name", "c"}, {"env", env}}});
    items.push_back(std::move(pod));
  }
  std::string text = json{{"kind", "PodList"}, {"items", items}}.dump();
  auto r = parse_pod_list(text);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->size(), 500u);
  EXPECT_EQ(r->at("uid-7").priority_class, "high");
}

TEST(HardeningKubelet, GzipBombFromTheKubeletIsRefused) {
  // 10 MB of brackets decoded, ~10 KB on the wire.
  std::string body = gzip(nested(5'000'000, "{\"items\":", "}"));
  ASSERT_FALSE(body.empty());
  ASSERT_LT(body.size(), 100'000u);
  RawServer srv(body, "gzip");
  KubeletPodsOptions o;
  o.url = srv.url("/pods");
  o.token_file = "";
  o.timeout_ms = 10'000;
  KubeletPodsClient client(o);
  auto t0 = std::chrono::steady_clock::now();
  auto r = client.fetch();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, E2BIG) << r.error().str();
  EXPECT_NE(r.error().message.find("deeper than"), std::string::npos) << r.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// ---- YARN RM/NM bodies -----------------------------------------------------------

TEST(HardeningYarnJson, NestedOrHugeBodiesAreRefused) {
  auto nodes = parse_yarn_nodes(nested(7'000'000, "{\"nodes\":", "}"));
  ASSERT_FALSE(nodes.ok());
  EXPECT_EQ(nodes.error().err, E2BIG);
  EXPECT_NE(nodes.error().message.find("deeper than"), std::string::npos) << nodes.error().message;

  auto containers = parse_nm_containers(zeros(kYarnJsonLimits.max_values, "{\"containers\":{\"container\":[", "]}}"));
  ASSERT_FALSE(containers.ok());
  EXPECT_EQ(containers.error().err, E2BIG);

  for (auto* parse : {+[](const std::string& t) { return parse_nm_node_info(t).ok(); },
                      +[](const std::string& t) { return parse_yarn_apps(t).ok(); },
                      +[](const std::string& t) { return parse_am_container(t).ok(); },
                      +[](const std::string& t) { return parse_yarn_node(t).ok(); }}) {
    EXPECT_FALSE(parse(nested(1000, "{\"x\":", "}")));
  }
}

TEST(HardeningYarnJson, TheRestClientRefusesANestedBody) {
  RawServer rm(nested(1'000'000, "{\"nodes\":", "}"));
  HttpClientOptions o;
  o.base_urls = {rm.url()};
  o.retries = 0;
  HttpClient rm_client(o);
  HttpClient nm_client(o);
  YarnRest rest(rm_client, nm_client);
  auto r = rest.nodes();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, E2BIG) << r.error().str();
}
