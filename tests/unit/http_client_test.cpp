#include "khagent/util/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

using namespace khagent;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

// An httplib server on 127.0.0.1 (ephemeral port) standing in for a
// ResourceManager. The handler gets the 1-based number of the request.
class Peer {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&, int hit)>;

  explicit Peer(Handler handler) : handler_(std::move(handler)) {
    svr_.new_task_queue = [] { return new httplib::ThreadPool(4); };
    svr_.set_keep_alive_timeout(1);
    auto wrap = [this](const httplib::Request& q, httplib::Response& r) {
      int hit = ++hits_;
      {
        std::lock_guard lk(mu_);
        last_ = q;
      }
      handler_(q, r, hit);
    };
    svr_.Get(".*", wrap);
    svr_.Post(".*", wrap);
    svr_.Put(".*", wrap);
    port_ = svr_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("cannot bind 127.0.0.1");
    thread_ = std::thread([this] {
      svr_.listen_after_bind();
      done_ = true;
    });
    // httplib's stop() does nothing until the accept loop runs: wait for it.
    while (!svr_.is_running() && !done_) std::this_thread::sleep_for(1ms);
  }
  ~Peer() { stop(); }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  // Stops the server: its port then refuses connections.
  void stop() {
    stopping_ = true;
    if (thread_.joinable()) {
      svr_.stop();
      thread_.join();
    }
  }

  std::string base() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int hits() const { return hits_.load(); }
  httplib::Request last() const {
    std::lock_guard lk(mu_);
    return last_;
  }
  // For handlers: sleeps up to `d`, less when the server is stopping.
  void nap(std::chrono::milliseconds d) const {
    for (auto until = Clock::now() + d; !stopping_ && Clock::now() < until;) std::this_thread::sleep_for(5ms);
  }

 private:
  Handler handler_;
  httplib::Server svr_;
  int port_ = 0;
  std::atomic<int> hits_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> done_{false};
  mutable std::mutex mu_;
  httplib::Request last_;
  std::thread thread_;
};

void ok_handler(const httplib::Request&, httplib::Response& r, int) {
  r.set_content("{\"ok\":true}", "application/json");
}

// A base URL on 127.0.0.1 where nothing listens: bind a port, then close it.
std::string refused_base() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind failed");
  }
  ::close(fd);
  return "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
}

HttpClientOptions options(std::vector<std::string> bases) {
  HttpClientOptions o;
  o.base_urls = std::move(bases);
  o.timeout_ms = 1500;
  o.connect_timeout_ms = 500;
  o.retries = 0;
  o.retry_backoff_ms = 10;
  return o;
}

HttpRequest get(const std::string& path) {
  HttpRequest r;
  r.path = path;
  return r;
}

// Sets an environment variable for the scope, then puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v, had_ = true;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

long ms_since(Clock::time_point t0) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

}  // namespace

TEST(HttpClient, GetReturnsStatusBodyAndBaseUrl) {
  Peer peer(ok_handler);
  HttpClient c(options({peer.base()}));
  auto r = c.send(get("/ws/v1/cluster/info"));
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "{\"ok\":true}");
  EXPECT_EQ(r->base_url, peer.base());
  EXPECT_EQ(r->location, "");
  auto q = peer.last();
  EXPECT_EQ(q.method, "GET");
  EXPECT_EQ(q.path, "/ws/v1/cluster/info");
  EXPECT_EQ(q.get_header_value("Accept"), "application/json");
  EXPECT_FALSE(q.has_param("user.name"));  // HttpAuth::None
  EXPECT_EQ(c.stats().requests.load(), 1u);
  EXPECT_EQ(c.stats().failovers.load(), 0u);
  EXPECT_EQ(c.stats().failures.load(), 0u);
}

TEST(HttpClient, PostAndPutSendBodyAndContentType) {
  Peer peer([](const httplib::Request& q, httplib::Response& r, int) {
    r.set_content(
        q.method + "|" + q.get_header_value("Content-Type") + "|" + q.get_header_value("X-Extra") + "|" + q.body,
        "text/plain");
  });
  HttpClient c(options({peer.base()}));

  HttpRequest post;
  post.method = "POST";
  post.path = "/ws/v1/cluster/apps/new-application";
  post.body = "{\"a\":1}";
  post.headers = {"X-Extra: yes"};
  auto r = c.send(post);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->body, "POST|application/json|yes|{\"a\":1}");

  HttpRequest put;
  put.method = "PUT";
  put.path = "/ws/v1/cluster/apps/app_1/state";
  put.body = "state=KILLED";
  put.content_type = "text/plain";
  r = c.send(put);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->body, "PUT|text/plain||state=KILLED");
  EXPECT_EQ(peer.last().get_header_value("Accept"), "application/json");
}

TEST(HttpClient, SimpleAuthAppendsEscapedUserName) {
  Peer peer(ok_handler);
  auto o = options({peer.base()});
  o.auth = HttpAuth::Simple;
  o.user = "yarn admin&x=1";
  HttpClient c(o);

  auto r = c.send(get("/ws/v1/cluster/nodes"));
  ASSERT_TRUE(r.ok()) << r.error().str();
  auto q = peer.last();
  EXPECT_EQ(q.target, "/ws/v1/cluster/nodes?user.name=yarn%20admin%26x%3D1");
  EXPECT_EQ(q.get_param_value("user.name"), "yarn admin&x=1");
  EXPECT_FALSE(q.has_param("x"));

  r = c.send(get("/ws/v1/cluster/apps?states=RUNNING"));
  ASSERT_TRUE(r.ok()) << r.error().str();
  q = peer.last();
  EXPECT_EQ(q.target, "/ws/v1/cluster/apps?states=RUNNING&user.name=yarn%20admin%26x%3D1");
  EXPECT_EQ(q.get_param_value("states"), "RUNNING");
  EXPECT_EQ(q.get_param_value("user.name"), "yarn admin&x=1");
}

TEST(HttpClient, SimpleAuthWithoutUserIsEINVAL) {
  Peer peer(ok_handler);
  auto o = options({peer.base()});
  o.auth = HttpAuth::Simple;
  HttpClient c(o);
  auto r = c.send(get("/x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EINVAL);
  EXPECT_EQ(peer.hits(), 0);
}

TEST(HttpClient, KerberosAddsNoUserNameAndReturnsUnansweredChallenge) {
  // No ticket in the credential cache: curl cannot answer the Negotiate
  // challenge, and the 401 comes back as an answer. An empty cache and
  // configuration: nothing may go to a KDC from a unit test.
  ScopedEnv ccache("KRB5CCNAME", "FILE:/nonexistent/khagent-test-ccache");
  ScopedEnv conf("KRB5_CONFIG", "/dev/null");
  Peer peer([](const httplib::Request&, httplib::Response& r, int) {
    r.status = 401;
    r.set_header("WWW-Authenticate", "Negotiate");
    r.set_content("authentication required", "text/plain");
  });
  auto o = options({peer.base()});
  o.auth = HttpAuth::Kerberos;
  o.user = "ignored";
  HttpClient c(o);
  auto r = c.send(get("/ws/v1/cluster/info"));
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->body, "authentication required");
  EXPECT_FALSE(peer.last().has_param("user.name"));
}

TEST(HttpClient, FailsOverFromRefusedPortAndSticksToTheLiveOne) {
  Peer live(ok_handler);
  const std::string dead = refused_base();
  HttpClient c(options({dead, live.base()}));
  EXPECT_EQ(c.current(), dead);

  auto r = c.send(get("/ws/v1/cluster/info"));
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->base_url, live.base());
  EXPECT_EQ(c.current(), live.base());
  EXPECT_EQ(live.hits(), 1);
  EXPECT_EQ(c.stats().requests.load(), 2u);
  EXPECT_EQ(c.stats().failovers.load(), 1u);

  // Sticky: the next request goes straight to the live one.
  r = c.send(get("/ws/v1/cluster/info"));
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(live.hits(), 2);
  EXPECT_EQ(c.stats().requests.load(), 3u);
  EXPECT_EQ(c.stats().failovers.load(), 1u);
  EXPECT_EQ(c.stats().failures.load(), 0u);
}

TEST(HttpClient, FailsOverFromStoppedServerBackToFirst) {
  Peer a(ok_handler);
  Peer b(ok_handler);
  HttpClient c(options({a.base(), b.base()}));
  ASSERT_TRUE(c.send(get("/x")).ok());
  EXPECT_EQ(c.current(), a.base());
  a.stop();
  auto r = c.send(get("/x"));
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->base_url, b.base());
  EXPECT_EQ(c.current(), b.base());
  EXPECT_EQ(b.hits(), 1);
}

TEST(HttpClient, StandbyRedirectMovesToNextBaseUrl) {
  Peer standby([](const httplib::Request&, httplib::Response& r, int) {
    r.status = 307;
    r.set_header("Location", "http://127.0.0.1:1/elsewhere");  // not a configured base
    r.set_content("This is standby RM", "text/plain");
  });
  Peer active(ok_handler);
  HttpClient c(options({standby.base(), active.base()}));
  auto r = c.send(get("/ws/v1/cluster/nodes"));
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->base_url, active.base());
  EXPECT_EQ(standby.hits(), 1);
  EXPECT_EQ(active.hits(), 1);
  EXPECT_EQ(c.stats().failovers.load(), 1u);
}

TEST(HttpClient, RedirectToAConfiguredBaseUrlGoesThereNext) {
  Peer active(ok_handler);
  Peer other(ok_handler);
  const std::string target = active.base() + "/ws/v1/cluster/nodes";
  Peer standby([target](const httplib::Request&, httplib::Response& r, int) {
    r.status = 307;
    r.set_header("Location", target);
  });
  // In list order the next one would be `other`; the Location names `active`.
  HttpClient c(options({standby.base(), other.base(), active.base()}));
  auto r = c.send(get("/ws/v1/cluster/nodes"));
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->base_url, active.base());
  EXPECT_EQ(other.hits(), 0);
  EXPECT_EQ(active.hits(), 1);
  EXPECT_EQ(c.current(), active.base());

  // Sticky to the active one from now on.
  ASSERT_TRUE(c.send(get("/ws/v1/cluster/nodes")).ok());
  EXPECT_EQ(standby.hits(), 1);
  EXPECT_EQ(active.hits(), 2);
  EXPECT_EQ(other.hits(), 0);
}

TEST(HttpClient, RedirectMatchNeedsAWholeBaseUrl) {
  // "http://127.0.0.1:<port>" is a prefix of "http://127.0.0.1:<port>0/...", but
  // not the same base: the list order applies.
  Peer b(ok_handler);
  Peer c_peer(ok_handler);
  const std::string near_miss = c_peer.base() + "0/ws";
  Peer standby([near_miss](const httplib::Request&, httplib::Response& r, int) {
    r.status = 307;
    r.set_header("Location", near_miss);
  });
  HttpClient c(options({standby.base(), b.base(), c_peer.base()}));
  auto r = c.send(get("/ws"));
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->base_url, b.base());
  EXPECT_EQ(c_peer.hits(), 0);
}

TEST(HttpClient, ServerErrorIsRetriedAfterDoublingBackoff) {
  Peer peer([](const httplib::Request&, httplib::Response& r, int hit) {
    if (hit <= 2) {
      r.status = hit == 1 ? 500 : 503;
      r.set_content("busy", "text/plain");
      return;
    }
    r.set_content("done", "text/plain");
  });
  auto o = options({peer.base()});
  o.retries = 2;
  o.retry_backoff_ms = 100;  // then 200: at least 300 ms in all
  HttpClient c(o);
  auto t0 = Clock::now();
  auto r = c.send(get("/ws/v1/cluster/metrics"));
  long elapsed = ms_since(t0);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "done");
  EXPECT_GE(elapsed, 300);
  EXPECT_EQ(peer.hits(), 3);
  EXPECT_EQ(c.stats().requests.load(), 3u);
  EXPECT_EQ(c.stats().failovers.load(), 0u);  // one base URL: nowhere to move
  EXPECT_EQ(c.stats().failures.load(), 0u);
}

TEST(HttpClient, RetriesRunOutWithErrorNamingEachBaseUrl) {
  Peer redirecting([](const httplib::Request&, httplib::Response& r, int) {
    r.status = 307;
    r.set_header("Location", "http://127.0.0.1:1/standby");
  });
  Peer failing([](const httplib::Request&, httplib::Response& r, int) {
    r.status = 503;
    r.set_content("standby\nbusy " + std::string(300, 'x'), "text/plain");
  });
  const std::string dead = refused_base();
  auto o = options({redirecting.base(), failing.base(), dead});
  o.retries = 1;
  HttpClient c(o);
  auto r = c.send(get("/ws/v1/cluster/nodes"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ECONNREFUSED);  // the last attempt's failure
  const std::string& m = r.error().message;
  EXPECT_NE(m.find("GET /ws/v1/cluster/nodes"), std::string::npos) << m;
  EXPECT_NE(m.find(redirecting.base() + ": redirect to http://127.0.0.1:1/standby"), std::string::npos) << m;
  EXPECT_NE(m.find(failing.base() + ": HTTP 503: standby busy xxx"), std::string::npos) << m;
  EXPECT_EQ(m.find(std::string(201, 'x')), std::string::npos) << "body excerpt not capped: " << m;
  EXPECT_NE(m.find(dead + ": "), std::string::npos) << m;
  EXPECT_EQ(redirecting.hits(), 2);
  EXPECT_EQ(failing.hits(), 2);
  EXPECT_EQ(c.stats().requests.load(), 6u);
  EXPECT_EQ(c.stats().failovers.load(), 5u);  // 2 per round, 1 back to the first
  EXPECT_EQ(c.stats().failures.load(), 1u);
  EXPECT_EQ(c.current(), redirecting.base());  // nothing answered: unchanged
}

TEST(HttpClient, RedirectOnlyIsEPROTO) {
  Peer standby([](const httplib::Request&, httplib::Response& r, int) {
    r.status = 307;
    r.set_header("Location", "/elsewhere");
  });
  HttpClient c(options({standby.base()}));
  auto r = c.send(get("/ws"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EPROTO);
  // A relative Location is resolved against the request URL.
  EXPECT_NE(r.error().message.find("redirect to " + standby.base() + "/elsewhere"), std::string::npos)
      << r.error().message;
}

TEST(HttpClient, TimeoutIsETIMEDOUT) {
  Peer* self = nullptr;
  Peer slow([&self](const httplib::Request&, httplib::Response& r, int) {
    self->nap(1500ms);
    r.set_content("late", "text/plain");
  });
  self = &slow;
  auto o = options({slow.base()});
  o.timeout_ms = 200;
  HttpClient c(o);
  auto r = c.send(get("/ws"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ETIMEDOUT) << r.error().str();
  EXPECT_NE(r.error().message.find(slow.base()), std::string::npos) << r.error().message;
  EXPECT_EQ(c.stats().failures.load(), 1u);
}

TEST(HttpClient, ClientErrorsAreAnswersNotFailovers) {
  for (int status : {401, 403, 404}) {
    Peer first([status](const httplib::Request&, httplib::Response& r, int) {
      r.status = status;
      r.set_content("status " + std::to_string(status), "text/plain");
    });
    Peer second(ok_handler);
    HttpClient c(options({first.base(), second.base()}));
    auto r = c.send(get("/ws"));
    ASSERT_TRUE(r.ok()) << status << ": " << r.error().str();
    EXPECT_EQ(r->status, status);
    EXPECT_EQ(r->body, "status " + std::to_string(status));
    EXPECT_EQ(r->base_url, first.base());
    EXPECT_EQ(second.hits(), 0) << status;
    EXPECT_EQ(c.stats().failovers.load(), 0u);
    EXPECT_EQ(c.stats().failures.load(), 0u);
  }
}

TEST(HttpClient, OversizeBodyIsEFBIG) {
  // Announced by Content-Length.
  Peer big([](const httplib::Request&, httplib::Response& r, int) {
    r.set_content(std::string(64 * 1024, 'a'), "text/plain");
  });
  // Streamed without a length.
  Peer chunked([](const httplib::Request&, httplib::Response& r, int) {
    r.set_chunked_content_provider("text/plain", [](size_t offset, httplib::DataSink& sink) {
      if (offset >= 64 * 1024) {
        sink.done();
        return true;
      }
      std::string piece(4096, 'b');
      return sink.write(piece.data(), piece.size());
    });
  });
  Peer spare(ok_handler);
  for (Peer* p : {&big, &chunked}) {
    auto o = options({p->base(), spare.base()});
    o.max_body_bytes = 10000;
    HttpClient c(o);
    auto r = c.send(get("/ws"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().err, EFBIG) << r.error().str();
    EXPECT_EQ(spare.hits(), 0);  // another replica would send as much
    EXPECT_EQ(c.stats().failures.load(), 1u);
  }
  // At the cap exactly is fine.
  auto o = options({big.base()});
  o.max_body_bytes = 64 * 1024;
  HttpClient c(o);
  auto r = c.send(get("/ws"));
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->body.size(), 64u * 1024);
}

TEST(HttpClient, AbortCancelsALongRequest) {
  Peer* self = nullptr;
  Peer slow([&self](const httplib::Request&, httplib::Response& r, int) {
    self->nap(10s);
    r.set_content("late", "text/plain");
  });
  self = &slow;
  auto o = options({slow.base()});
  o.timeout_ms = 10000;
  HttpClient c(o);
  std::atomic<bool> abort{false};
  std::thread setter([&abort] {
    std::this_thread::sleep_for(100ms);
    abort = true;
  });
  auto t0 = Clock::now();
  auto r = c.send(get("/ws"), &abort);
  long elapsed = ms_since(t0);
  setter.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ECANCELED) << r.error().str();
  EXPECT_LT(elapsed, 5000);  // well before the 10 s timeout
  EXPECT_EQ(c.stats().failures.load(), 1u);
}

TEST(HttpClient, AbortCancelsTheBackoff) {
  auto o = options({refused_base()});
  o.retries = 3;
  o.retry_backoff_ms = 10000;
  HttpClient c(o);
  std::atomic<bool> abort{false};
  std::thread setter([&abort] {
    std::this_thread::sleep_for(100ms);
    abort = true;
  });
  auto t0 = Clock::now();
  auto r = c.send(get("/ws"), &abort);
  long elapsed = ms_since(t0);
  setter.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ECANCELED) << r.error().str();
  EXPECT_LT(elapsed, 5000);
  EXPECT_EQ(c.stats().requests.load(), 1u);  // the second round never started
}

TEST(HttpClient, AbortSetBeforehandSendsNothing) {
  Peer peer(ok_handler);
  HttpClient c(options({peer.base()}));
  std::atomic<bool> abort{true};
  auto r = c.send(get("/ws"), &abort);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ECANCELED);
  EXPECT_EQ(peer.hits(), 0);
}

TEST(HttpClient, EmptyBaseUrlsIsEINVAL) {
  HttpClient c(options({}));
  EXPECT_EQ(c.current(), "");
  auto r = c.send(get("/ws"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EINVAL);
  EXPECT_EQ(c.stats().requests.load(), 0u);
  EXPECT_EQ(c.stats().failures.load(), 1u);
}

TEST(HttpClient, BadRequestsAreEINVALAndSendNothing) {
  Peer peer(ok_handler);
  HttpClient c(options({peer.base()}));
  HttpRequest del = get("/ws");
  del.method = "DELETE";
  HttpRequest injected = get("/ws");
  injected.headers = {"X-A: 1\r\nX-B: 2"};
  HttpRequest bad_path = get("/ws\r\nHost: evil");
  for (const auto* q : {&del, &injected, &bad_path}) {
    auto r = c.send(*q);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().err, EINVAL) << r.error().str();
  }
  EXPECT_EQ(peer.hits(), 0);
  EXPECT_EQ(c.stats().failures.load(), 3u);
}

TEST(HttpClient, TrailingSlashOnBaseUrlIsDropped) {
  Peer peer(ok_handler);
  HttpClient c(options({peer.base() + "/"}));
  EXPECT_EQ(c.current(), peer.base());
  auto r = c.send(get("/ws/v1/cluster"));
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(peer.last().path, "/ws/v1/cluster");
  EXPECT_EQ(r->base_url, peer.base());
}
