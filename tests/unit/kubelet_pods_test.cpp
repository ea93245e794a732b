#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "khagent/collect/kubelet_pods.h"
#include "test_util.h"

using namespace khagent;
using namespace std::chrono_literals;

namespace {

// A minimal HTTP/1.1 server on 127.0.0.1 for the client tests. (Debian's
// cpp-httplib is built as a shared library, which the unit test binary does
// not link, so it is not used here.) One request per connection, answered
// with "Connection: close", one connection at a time.
class TestServer {
 public:
  struct Request {
    std::string method;
    std::string target;
    std::map<std::string, std::string> headers;  // names lowercased
  };
  struct Response {
    int status = 200;
    std::string body;
    std::chrono::milliseconds delay{0};  // before answering
    bool content_length = true;          // false: the body ends when the connection closes
  };
  using Handler = std::function<Response(const Request&)>;

  explicit TestServer(Handler handler) : handler_(std::move(handler)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;  // any free port
    socklen_t len = sizeof addr;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ::close(fd_);
      throw std::runtime_error("bind/listen on 127.0.0.1 failed");
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { loop(); });
  }
  ~TestServer() { stop(); }
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  // Stops accepting and closes the listening socket: the port refuses connections.
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int port() const { return port_; }
  std::string url(const std::string& path = "/pods") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  int requests() const { return requests_.load(); }
  Request last_request() const {
    std::lock_guard lk(mu_);
    return last_;
  }

 private:
  void loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      serve(c);
      ::close(c);
    }
  }

  void serve(int c) {
    timeval tv{2, 0};  // a client that sends nothing cannot hang the server
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string in;
    char buf[4096];
    while (in.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      in.append(buf, static_cast<size_t>(n));
    }
    Request req;
    size_t eol = in.find("\r\n");
    std::string line = in.substr(0, eol);
    size_t sp1 = line.find(' ');
    size_t sp2 = line.find(' ', sp1 + 1);
    req.method = line.substr(0, sp1);
    req.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    for (size_t pos = eol + 2; pos < in.size();) {
      size_t end = in.find("\r\n", pos);
      if (end == pos || end == std::string::npos) break;
      std::string h = in.substr(pos, end - pos);
      pos = end + 2;
      size_t colon = h.find(':');
      if (colon == std::string::npos) continue;
      std::string name = h.substr(0, colon);
      for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      size_t v = h.find_first_not_of(' ', colon + 1);
      req.headers[name] = v == std::string::npos ? "" : h.substr(v);
    }
    {
      std::lock_guard lk(mu_);
      last_ = req;
    }
    ++requests_;

    Response r = handler_(req);
    for (auto until = std::chrono::steady_clock::now() + r.delay; !stop_ && std::chrono::steady_clock::now() < until;) {
      std::this_thread::sleep_for(5ms);
    }
    std::string out = "HTTP/1.1 " + std::to_string(r.status) + " Test\r\nContent-Type: application/json\r\n";
    if (r.content_length) out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
    out += "Connection: close\r\n\r\n" + r.body;
    for (size_t off = 0; off < out.size();) {
      // MSG_NOSIGNAL: the client may have given up (timeout tests).
      ssize_t n = ::send(c, out.data() + off, out.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }

  Handler handler_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  mutable std::mutex mu_;
  Request last_;
  std::thread thread_;
};

// A body the tests change while a server answers with it.
class SharedBody {
 public:
  explicit SharedBody(std::string b) : body_(std::move(b)) {}
  void set(std::string b) {
    std::lock_guard lk(mu_);
    body_ = std::move(b);
  }
  std::string get() const {
    std::lock_guard lk(mu_);
    return body_;
  }

 private:
  mutable std::mutex mu_;
  std::string body_;
};

std::string pod_json(const std::string& uid, const std::string& name, const std::string& prio = "") {
  std::string spec = prio.empty() ? "{}" : R"({"priorityClassName":")" + prio + R"("})";
  return R"({"metadata":{"uid":")" + uid + R"(","name":")" + name + R"(","namespace":"default"},"spec":)" + spec + "}";
}

std::string pod_list(const std::string& items) {
  return R"({"kind":"PodList","apiVersion":"v1","metadata":{},"items":[)" + items + "]}";
}

KubeletPodsOptions options_for(const TestServer& srv, const TempDir& t) {
  KubeletPodsOptions o;
  o.url = srv.url();
  o.token_file = (t.path / "token").string();  // absent unless a test writes it
  o.timeout_ms = 2000;
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Polls `w.take_if_new()` until it yields or `limit` passes.
std::optional<PodMetaMap> wait_new(KubeletPodsWatcher& w, std::chrono::milliseconds limit = 5000ms) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (auto m = w.take_if_new()) return m;
    std::this_thread::sleep_for(10ms);
  }
  return std::nullopt;
}

}  // namespace

// --- parse_pod_list ---

TEST(KubeletParse, FullItem) {
  auto r = parse_pod_list(R"({"kind":"PodList","items":[{
      "metadata":{"uid":"u-1","name":"web-0","namespace":"prod",
                  "labels":{"app":"web","tier":"online"},
                  "annotations":{"khagent.io/class":"online","n":3}},
      "spec":{"priorityClassName":"high","containers":[{"name":"c"}]},
      "status":{"phase":"Running"}}]})");
  ASSERT_TRUE(r.ok()) << r.error().str();
  ASSERT_EQ(r->size(), 1u);
  const PodMeta& m = r->at("u-1");
  EXPECT_EQ(m.name, "web-0");
  EXPECT_EQ(m.ns, "prod");
  EXPECT_EQ(m.priority_class, "high");
  EXPECT_EQ(m.labels, (std::map<std::string, std::string>{{"app", "web"}, {"tier", "online"}}));
  // Non-string annotation values are not representable: skipped.
  EXPECT_EQ(m.annotations, (std::map<std::string, std::string>{{"khagent.io/class", "online"}}));
}

TEST(KubeletParse, BatchResourcesInAnyContainer) {
  auto r = parse_pod_list(R"({"items":[
      {"metadata":{"uid":"a"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"1"}}},
          {"name":"d","resources":{"requests":{"kubernetes.io/batch-cpu":"1000"}}}]}},
      {"metadata":{"uid":"b"},"spec":{"initContainers":[{"resources":{"limits":{"kubernetes.io/batch-memory":"1Gi"}}}],
          "containers":[{"name":"c"}]}},
      {"metadata":{"uid":"c"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"1","memory":"1Gi"}}}]}}
      ]})");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_TRUE(r->at("a").batch_resources);
  EXPECT_TRUE(r->at("b").batch_resources);
  EXPECT_FALSE(r->at("c").batch_resources);
}

TEST(KubeletParse, MissingOptionalFields) {
  auto r = parse_pod_list(R"({"items":[{"metadata":{"uid":"u-1"}},
                                       {"metadata":{"uid":"u-2","name":"b","labels":null},"spec":{}}]})");
  ASSERT_TRUE(r.ok()) << r.error().str();
  ASSERT_EQ(r->size(), 2u);
  const PodMeta& a = r->at("u-1");
  EXPECT_EQ(a.name, "");
  EXPECT_EQ(a.ns, "");
  EXPECT_EQ(a.priority_class, "");
  EXPECT_TRUE(a.labels.empty());
  EXPECT_TRUE(a.annotations.empty());
  EXPECT_EQ(r->at("u-2").name, "b");
}

TEST(KubeletParse, ItemsWithoutUidAreSkipped) {
  auto r = parse_pod_list(R"({"items":[{"metadata":{"name":"no-uid"}},
                                       {"metadata":{"uid":""}},
                                       {"metadata":{"uid":7}},
                                       {"spec":{}},
                                       "not an object",
                                       {"metadata":{"uid":"u-ok","name":"ok"}}]})");
  ASSERT_TRUE(r.ok()) << r.error().str();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ(r->at("u-ok").name, "ok");
}

TEST(KubeletParse, NoItemsIsEmpty) {
  for (const char* doc :
       {R"({"kind":"PodList","items":[]})", R"({"kind":"PodList","items":null})", R"({"kind":"PodList"})"}) {
    auto r = parse_pod_list(doc);
    ASSERT_TRUE(r.ok()) << doc << ": " << r.error().str();
    EXPECT_TRUE(r->empty()) << doc;
  }
}

TEST(KubeletParse, MalformedJsonIsEinval) {
  for (const char* doc : {"", "{", R"({"items":[{"metadata":{"uid":"a"}}]} trailing)", "<html>"}) {
    auto r = parse_pod_list(doc);
    ASSERT_FALSE(r.ok()) << doc;
    EXPECT_EQ(r.error().err, EINVAL);
    EXPECT_NE(r.error().message.find("malformed JSON"), std::string::npos) << r.error().message;
  }
}

TEST(KubeletParse, ItemsNotAnArrayIsEinval) {
  auto r = parse_pod_list(R"({"kind":"PodList","items":{"uid":"x"}})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EINVAL);
  EXPECT_NE(r.error().message.find("\"items\" is not an array"), std::string::npos) << r.error().message;

  auto top = parse_pod_list(R"([1,2])");
  ASSERT_FALSE(top.ok());
  EXPECT_EQ(top.error().err, EINVAL);
  EXPECT_NE(top.error().message.find("expected a JSON object"), std::string::npos) << top.error().message;
}

TEST(KubeletParse, PodsEqual) {
  PodMetaMap a{{"u", PodMeta{"n", "ns", "p", {{"k", "v"}}, {}}}};
  PodMetaMap b = a;
  EXPECT_TRUE(pods_equal(a, b));
  b["u"].annotations["x"] = "y";
  EXPECT_FALSE(pods_equal(a, b));
  b = a;
  b["u2"] = PodMeta{};
  EXPECT_FALSE(pods_equal(a, b));
  PodMetaMap c{{"other", a.at("u")}};  // same size and contents, different uid
  EXPECT_FALSE(pods_equal(a, c));
}

// --- KubeletPodsClient against a loopback server ---

TEST(KubeletClient, FetchesWithBearerToken) {
  TempDir t;
  t.write("token", "tok-123\n");  // trailing newline as in projected token files
  TestServer srv([](const TestServer::Request& req) {
    auto it = req.headers.find("authorization");
    if (it == req.headers.end() || it->second != "Bearer tok-123") {
      return TestServer::Response{401, R"({"message":"Unauthorized"})"};
    }
    return TestServer::Response{200, pod_list(pod_json("u-1", "web", "high"))};
  });
  KubeletPodsClient client(options_for(srv, t));
  auto r = client.fetch();
  ASSERT_TRUE(r.ok()) << r.error().str();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ(r->at("u-1").priority_class, "high");
  auto req = srv.last_request();
  EXPECT_EQ(req.method, "GET");
  EXPECT_EQ(req.target, "/pods");
}

TEST(KubeletClient, RereadsTheTokenOnEachFetch) {
  TempDir t;
  t.write("token", "first");
  TestServer srv([](const TestServer::Request&) { return TestServer::Response{200, pod_list("")}; });
  KubeletPodsClient client(options_for(srv, t));
  ASSERT_TRUE(client.fetch().ok());
  EXPECT_EQ(srv.last_request().headers["authorization"], "Bearer first");
  t.write("token", "second\n");
  ASSERT_TRUE(client.fetch().ok());
  EXPECT_EQ(srv.last_request().headers["authorization"], "Bearer second");
}

TEST(KubeletClient, NoTokenFileNoAuthorizationHeader) {
  TempDir t;  // no token file written
  TestServer srv([](const TestServer::Request&) { return TestServer::Response{200, pod_list(pod_json("u-1", "a"))}; });
  KubeletPodsClient client(options_for(srv, t));
  auto r = client.fetch();
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->size(), 1u);
  EXPECT_EQ(srv.last_request().headers.count("authorization"), 0u);
}

TEST(KubeletClient, TokenWithLineBreakInsideIsRejected) {
  TempDir t;
  t.write("token", "abc\r\nX-Injected: 1\n");
  TestServer srv([](const TestServer::Request&) { return TestServer::Response{200, pod_list("")}; });
  KubeletPodsClient client(options_for(srv, t));
  auto r = client.fetch();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EINVAL);
  EXPECT_NE(r.error().message.find("token file"), std::string::npos) << r.error().message;
  EXPECT_EQ(srv.requests(), 0);
}

TEST(KubeletClient, HttpErrorStatusIsReported) {
  TempDir t;
  for (int status : {401, 500}) {
    TestServer srv([status](const TestServer::Request&) {
      return TestServer::Response{status, "{\"message\":\"nope\"}\n" + std::string(500, 'x')};
    });
    KubeletPodsClient client(options_for(srv, t));
    auto r = client.fetch();
    ASSERT_FALSE(r.ok()) << status;
    const std::string& m = r.error().message;
    EXPECT_NE(m.find("HTTP " + std::to_string(status)), std::string::npos) << m;
    EXPECT_NE(m.find(R"({"message":"nope"})"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;  // the excerpt is one line
    EXPECT_LT(m.size(), 400u) << "only the start of the body: " << m;
    EXPECT_EQ(r.error().err, status == 401 ? EACCES : 0);
  }
}

TEST(KubeletClient, MalformedBodyIsAnError) {
  TempDir t;
  TestServer srv([](const TestServer::Request&) { return TestServer::Response{200, "<html>oops"}; });
  KubeletPodsClient client(options_for(srv, t));
  auto r = client.fetch();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EINVAL);
  EXPECT_NE(r.error().message.find("malformed JSON"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find(srv.url()), std::string::npos) << r.error().message;
}

TEST(KubeletClient, TimesOut) {
  TempDir t;
  TestServer srv([](const TestServer::Request&) { return TestServer::Response{200, pod_list(""), 1500ms}; });
  auto o = options_for(srv, t);
  o.timeout_ms = 200;
  KubeletPodsClient client(o);
  auto t0 = std::chrono::steady_clock::now();
  auto r = client.fetch();
  double took = seconds_since(t0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ETIMEDOUT) << r.error().str();
  EXPECT_LT(took, 1.0);
}

TEST(KubeletClient, ConnectionRefused) {
  TempDir t;
  std::string url;
  {
    TestServer srv([](const TestServer::Request&) { return TestServer::Response{}; });
    url = srv.url();
  }  // stopped: nothing listens on the port any more
  KubeletPodsOptions o;
  o.url = url;
  o.token_file = (t.path / "token").string();
  KubeletPodsClient client(o);
  auto r = client.fetch();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ECONNREFUSED) << r.error().str();
  EXPECT_NE(r.error().message.find(url), std::string::npos) << r.error().message;
}

TEST(KubeletClient, OversizeResponseIsAnError) {
  TempDir t;
  std::string big = pod_list(pod_json("u-1", std::string(5000, 'n')));
  for (bool announced : {true, false}) {
    TestServer srv([&big, announced](const TestServer::Request&) {
      TestServer::Response r{200, big};
      r.content_length = announced;
      return r;
    });
    auto o = options_for(srv, t);
    o.max_body_bytes = 1000;
    KubeletPodsClient client(o);
    auto r = client.fetch();
    ASSERT_FALSE(r.ok()) << "announced=" << announced;
    EXPECT_EQ(r.error().err, EFBIG) << r.error().str();
    EXPECT_NE(r.error().message.find("larger than 1000 bytes"), std::string::npos) << r.error().message;

    o.max_body_bytes = big.size();  // exactly at the cap is fine
    KubeletPodsClient fits(o);
    auto ok = fits.fetch();
    EXPECT_TRUE(ok.ok()) << ok.error().str();
  }
}

TEST(KubeletClient, EmptyUrlIsEinval) {
  KubeletPodsClient client(KubeletPodsOptions{});
  auto r = client.fetch();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EINVAL);
}

TEST(KubeletClient, AbortFlagCancelsATransfer) {
  TempDir t;
  TestServer srv([](const TestServer::Request&) { return TestServer::Response{200, pod_list(""), 5000ms}; });
  auto o = options_for(srv, t);
  o.timeout_ms = 10000;
  KubeletPodsClient client(o);
  std::atomic<bool> abort{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    abort = true;
  });
  auto t0 = std::chrono::steady_clock::now();
  auto r = client.fetch(&abort);
  double took = seconds_since(t0);
  stopper.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ECANCELED) << r.error().str();
  EXPECT_LT(took, 1.5);
}

// --- KubeletPodsWatcher ---

TEST(KubeletWatcher, PicksUpChangesOnlyOnce) {
  TempDir t;
  SharedBody body(pod_list(pod_json("u-1", "a")));
  TestServer srv([&body](const TestServer::Request&) { return TestServer::Response{200, body.get()}; });
  KubeletPodsWatcher w(options_for(srv, t), 30ms);

  auto first = wait_new(w);
  ASSERT_TRUE(first.has_value()) << w.last_error();
  EXPECT_EQ(first->count("u-1"), 1u);
  EXPECT_EQ(w.last_error(), "");

  // Several more refreshes with the same answer: nothing new.
  int seen = srv.requests();
  auto until = std::chrono::steady_clock::now() + 5s;
  while (srv.requests() < seen + 3 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(srv.requests(), seen + 3);
  EXPECT_FALSE(w.take_if_new().has_value());

  body.set(pod_list(pod_json("u-1", "a") + "," + pod_json("u-2", "b", "batch")));
  auto second = wait_new(w);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->size(), 2u);
  EXPECT_EQ(second->at("u-2").priority_class, "batch");
  EXPECT_FALSE(w.take_if_new().has_value());
}

TEST(KubeletWatcher, KeepsLastGoodListAndReportsErrors) {
  TempDir t;
  std::atomic<int> status{200};
  TestServer srv([&status](const TestServer::Request&) {
    return TestServer::Response{status.load(), pod_list(pod_json("u-1", "a"))};
  });
  KubeletPodsWatcher w(options_for(srv, t), 20ms);
  ASSERT_TRUE(wait_new(w).has_value());

  status = 500;
  auto until = std::chrono::steady_clock::now() + 5s;
  while (w.last_error().empty() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(w.last_error().find("HTTP 500"), std::string::npos) << w.last_error();
  EXPECT_FALSE(w.take_if_new().has_value());  // failures do not replace the list

  status = 200;  // same list as before the failures: recovered, but nothing new
  until = std::chrono::steady_clock::now() + 5s;
  while (!w.last_error().empty() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(w.last_error(), "");
  EXPECT_FALSE(w.take_if_new().has_value());
}

TEST(KubeletWatcher, StopIsPromptWithLongRefresh) {
  TempDir t;
  TestServer srv([](const TestServer::Request&) { return TestServer::Response{200, pod_list(pod_json("u-1", "a"))}; });
  KubeletPodsWatcher w(options_for(srv, t), 10s);
  ASSERT_TRUE(wait_new(w).has_value());  // the first fetch is immediate
  auto t0 = std::chrono::steady_clock::now();
  w.stop();
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_EQ(srv.requests(), 1);
  w.stop();  // idempotent
}

TEST(KubeletWatcher, StopAbortsAnInFlightFetch) {
  TempDir t;
  TestServer srv([](const TestServer::Request&) { return TestServer::Response{200, pod_list(""), 5000ms}; });
  auto o = options_for(srv, t);
  o.timeout_ms = 10000;
  KubeletPodsWatcher w(o, 10s);
  auto until = std::chrono::steady_clock::now() + 5s;
  while (srv.requests() == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(srv.requests(), 1);
  auto t0 = std::chrono::steady_clock::now();
  w.stop();
  EXPECT_LT(seconds_since(t0), 1.5);
  EXPECT_FALSE(w.take_if_new().has_value());
}
