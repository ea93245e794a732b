// HttpClient over TLS: a CA bundle verifies the server, a missing one fails
// verification, insecure_skip_verify skips it. The server (httplib, built
// with OpenSSL by Debian) listens on 127.0.0.1 with a certificate made for
// this test by the openssl command.
#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "khagent/util/http_client.h"

using namespace khagent;
using namespace std::chrono_literals;

namespace {

class TlsPeer : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/khagent-tls-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    cert_ = dir_ + "/cert.pem";
    key_ = dir_ + "/key.pem";
    // A self-signed certificate for 127.0.0.1: it is its own CA bundle.
    std::string cmd =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
        "-addext subjectAltName=IP:127.0.0.1 -keyout " +
        key_ + " -out " + cert_ + " >/dev/null 2>&1";
    int rc = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << "openssl could not make a certificate: " << cmd;
    svr_ = std::make_unique<httplib::SSLServer>(cert_.c_str(), key_.c_str());
    ASSERT_TRUE(svr_->is_valid()) << "httplib could not load the certificate";
    svr_->Get("/ws/v1/cluster/info", [](const httplib::Request&, httplib::Response& r) {
      r.set_content("{\"clusterInfo\":{\"haState\":\"ACTIVE\"}}", "application/json");
    });
    port_ = svr_->bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { svr_->listen_after_bind(); });
    for (int i = 0; i < 2000 && !svr_->is_running(); i++) std::this_thread::sleep_for(1ms);
  }
  void TearDown() override {
    if (svr_) svr_->stop();
    if (thread_.joinable()) thread_.join();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  Result<HttpResponse> get(const std::string& ca, bool insecure) {
    HttpClientOptions o;
    o.base_urls = {"https://127.0.0.1:" + std::to_string(port_)};
    o.ca_file = ca;
    o.insecure_skip_verify = insecure;
    o.retries = 0;
    o.timeout_ms = 3000;
    HttpClient c(o);
    HttpRequest q;
    q.path = "/ws/v1/cluster/info";
    return c.send(q);
  }

  std::string dir_, cert_, key_;
  std::unique_ptr<httplib::SSLServer> svr_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace

TEST_F(TlsPeer, CaBundleVerifiesTheServer) {
  auto r = get(cert_, false);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("ACTIVE"), std::string::npos);
}

TEST_F(TlsPeer, UnknownIssuerFailsVerification) {
  auto r = get("", false);  // the system CAs do not know this certificate
  ASSERT_FALSE(r.ok()) << "a self-signed server was accepted without its CA";
  EXPECT_NE(r.error().message.find("127.0.0.1"), std::string::npos) << r.error().message;
}

TEST_F(TlsPeer, InsecureSkipVerifyAcceptsIt) {
  auto r = get("", true);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->status, 200);
}

TEST_F(TlsPeer, AMissingCaFileIsAnError) {
  auto r = get(dir_ + "/no-such-ca.pem", false);
  EXPECT_FALSE(r.ok());
}
