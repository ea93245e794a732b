// Config loader bounds and validation gaps: regular files only (no FIFO
// blocking `config check`, no device read without end), a size cap, errno
// text in the message, bounded alias use and override merging, finite
// durations, http(s) only for the kubelet URL and a warning when its bearer
// token would go over plain http.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <future>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "khagent/collect/kubelet_pods.h"
#include "khagent/config/config.h"
#include "test_util.h"

using namespace khagent;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class LogCapture {
 public:
  LogCapture() : prev_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_));
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(prev_); }
  std::string text() {
    spdlog::default_logger()->flush();
    return out_.str();
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> prev_;
};

std::string write(const TempDir& d, const std::string& name, const std::string& text) {
  d.write(name, text);
  return (d.path / name).string();
}

}  // namespace

// ---- the file --------------------------------------------------------------------

TEST(HardeningConfigFile, AFifoIsRefusedWithoutBlocking) {
  TempDir d;
  const std::string fifo = (d.path / "khagent.yaml").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto pending = std::async(std::launch::async, [&] { return load_config_file(fifo, {}); });
  if (pending.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    // Let the blocked open(2) through (a writer comes and goes) before failing.
    int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
    pending.wait();
    FAIL() << "load_config_file blocked on a FIFO";
  }
  auto r = pending.get();
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, "FIFO")) << r.error().message;
  EXPECT_TRUE(contains(r.error().message, "not a regular file")) << r.error().message;
}

TEST(HardeningConfigFile, DevicesAreRefused) {
  // /dev/null ends at once (/dev/zero would not); both are character devices.
  for (const char* dev : {"/dev/null", "/dev/zero"}) {
    auto r = load_config_file(dev, {});
    ASSERT_FALSE(r.ok()) << dev;
    EXPECT_EQ(r.error().err, EINVAL);
    EXPECT_TRUE(contains(r.error().message, "character device")) << r.error().message;
  }
}

TEST(HardeningConfigFile, ALargeFileIsRefused) {
  TempDir d;
  std::string text = "dry_run: true\n";
  while (text.size() <= (size_t{1} << 20)) text += "# padding padding padding padding padding padding\n";
  auto r = load_config_file(write(d, "big.yaml", text), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EFBIG);
  EXPECT_TRUE(contains(r.error().message, "larger than 1024 KiB")) << r.error().message;
  // Just under the cap still loads.
  text.resize((size_t{1} << 20) - 100);
  text = text.substr(0, text.rfind('\n') + 1);
  auto ok = load_config_file(write(d, "ok.yaml", text), {});
  EXPECT_TRUE(ok.ok()) << ok.error().message;
}

TEST(HardeningConfigFile, TheErrorSaysWhy) {
  TempDir d;
  const std::string missing = (d.path / "nope.yaml").string();
  auto r = load_config_file(missing, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ENOENT);
  EXPECT_TRUE(contains(r.error().message, missing + ": No such file or directory")) << r.error().message;

  auto dir = load_config_file(d.path.string(), {});
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.error().err, EISDIR);
  EXPECT_TRUE(contains(dir.error().message, "directory")) << dir.error().message;
}

TEST(HardeningConfigFile, AliasUseIsBounded) {
  TempDir d;
  // More than 1000 aliases.
  std::string many = "offline:\n  targets:\n    - &t /a\n";
  for (int i = 0; i < 1001; ++i) many += "    - *t\n";
  auto r = load_config_file(write(d, "many.yaml", many), {});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, "YAML aliases")) << r.error().message;

  // Few aliases, standing for 10^9 nodes ("billion laughs").
  std::string laughs = "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i < 9; ++i) {
    std::string prev = "*a" + std::to_string(i - 1);
    laughs += "x" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) laughs += (k ? ", " : "") + prev;
    laughs += "]\n";
  }
  r = load_config_file(write(d, "laughs.yaml", laughs), {});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, "aliases expanded")) << r.error().message;

  // A few aliases stay fine.
  auto ok = load_config_file(
      write(d, "ok.yaml",
            "nodes:\n  - match: {name: a*}\n    set: &s {dry_run: true}\n  - match: {name: b*}\n    set: *s\n"),
      {"a1", {}});
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_TRUE(ok->dry_run);
}

TEST(HardeningConfigFile, OverrideMergingIsBounded) {
  TempDir d;
  // Over 1000 entries in nodes (20k took minutes when they matched).
  std::string many = "nodes:\n";
  for (int i = 0; i < 1001; ++i) many += "  - match: {name: n" + std::to_string(i) + "}\n    set: {dry_run: true}\n";
  auto r = load_config_file(write(d, "many.yaml", many), {"n1", {}});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, "more than 1000 entries in nodes")) << r.error().message;

  // Many overrides that apply, over a large document: each merge costs the
  // whole document, refused before the first.
  std::string heavy = "offline:\n  targets:\n";
  for (int i = 0; i < 40000; ++i) heavy += "    - /t" + std::to_string(i) + "\n";
  heavy += "nodes:\n";
  for (int i = 0; i < 60; ++i) heavy += "  - match: {labels: {pool: colo}}\n    set: {dry_run: true}\n";
  auto t0 = std::chrono::steady_clock::now();
  r = load_config_file(write(d, "heavy.yaml", heavy), {"n1", {{"pool", "colo"}}});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, "60 entries of nodes apply to this node")) << r.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  // The same file on a node they do not apply to loads.
  auto other = load_config_file((d.path / "heavy.yaml").string(), {"n2", {{"pool", "web"}}});
  EXPECT_TRUE(other.ok()) << other.error().message;
}

// ---- validation --------------------------------------------------------------------

TEST(HardeningConfigValidate, AnOverflowingDurationIsRefused) {
  // 10^300 hours overflows to +inf microseconds.
  std::string huge = "online: {wait_p99_target: 1" + std::string(300, '0') + "h}\n";
  auto r = load_config_text(huge, "t.yaml", {});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, "online.wait_p99_target")) << r.error().message;
  r = load_config_text("online: {wait_p99_target: 2h}\n", "t.yaml", {});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, "at most 1m")) << r.error().message;
  Config c = default_config();
  c.online.wait_p99_target_us = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(validate_config(c).ok());
  EXPECT_TRUE(load_config_text("online: {wait_p99_target: 50ms}\n", "t.yaml", {}).ok());
}

TEST(HardeningConfigValidate, TheKubeletUrlMustBeHttpOrHttps) {
  for (const char* bad : {"file:///etc/passwd", "gopher://127.0.0.1:70/", "127.0.0.1:10250/pods", "dict://x/",
                          "https://", "http://a b/pods"}) {
    auto r = load_config_text(std::string("kubelet_pods_url: \"") + bad + "\"\n", "t.yaml", {});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(contains(r.error().message, "kubelet_pods_url")) << r.error().message;
  }
  for (const char* good : {"https://127.0.0.1:10250/pods", "http://127.0.0.1:10255/pods", "HTTPS://node:10250/pods"}) {
    auto r = load_config_text(std::string("kubelet_pods_url: \"") + good + "\"\n", "t.yaml", {});
    EXPECT_TRUE(r.ok()) << good << ": " << r.error().message;
  }
  // The client refuses other schemes on its own too.
  KubeletPodsOptions o;
  o.url = "file:///etc/hostname";
  o.token_file = "";
  auto f = KubeletPodsClient(o).fetch();
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().err, EINVAL);
}

TEST(HardeningKubelet, ABearerTokenOverPlainHttpIsWarnedAbout) {
  TempDir d;
  d.write("token", "secret\n");
  KubeletPodsOptions o;
  o.token_file = (d.path / "token").string();
  {
    LogCapture log;
    o.url = "http://127.0.0.1:10255/pods";
    KubeletPodsClient client(o);
    EXPECT_TRUE(contains(log.text(), "clear text")) << log.text();
    EXPECT_FALSE(contains(log.text(), "secret")) << log.text();
  }
  {
    LogCapture log;
    o.url = "https://127.0.0.1:10250/pods";
    KubeletPodsClient client(o);
    EXPECT_FALSE(contains(log.text(), "clear text")) << log.text();
  }
  {
    LogCapture log;  // no token: nothing to leak
    o.url = "http://127.0.0.1:10255/pods";
    o.token_file = (d.path / "none").string();
    KubeletPodsClient client(o);
    EXPECT_FALSE(contains(log.text(), "clear text")) << log.text();
  }
}
