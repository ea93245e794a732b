// Hardening of inputs besides the peers' JSON documents: the kubelet bearer
// token file (a regular file of bounded size, read without blocking), the
// NodeManager web address the RM gives (a plain host:port before it becomes
// a URL), the dry run's "would write" log (once per change, not every tick)
// and the kubelet's cpu_manager_state (bounded like a peer's JSON).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "khagent/actuate/actuator.h"
#include "khagent/app/yarn_downscaler.h"
#include "khagent/collect/kubelet_pods.h"
#include "khagent/collect/topology.h"
#include "khagent/collect/yarn_rest.h"
#include "test_util.h"
#include "yarn_emulator.h"

using namespace khagent;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Nothing listens on port 1: a fetch that gets past the token fails to
// connect, one that does not fails before any connection with EINVAL.
KubeletPodsOptions unreachable(const std::string& token_file) {
  KubeletPodsOptions o;
  o.url = "https://127.0.0.1:1/pods";
  o.token_file = token_file;
  o.timeout_ms = 2000;
  return o;
}

bool token_refused(const Result<PodMetaMap>& r) {
  return !r.ok() && r.error().err == EINVAL && contains(r.error().message, "token file");
}

// Cgroup files in memory (only what the dry run reads).
struct MemFs : CgroupFs {
  std::map<std::pair<std::string, CgroupFile>, std::string> files;
  int writes = 0;
  Result<std::string> read(const std::string& cg, CgroupFile f) override {
    auto it = files.find({cg, f});
    if (it == files.end()) return make_error(ENOENT, cg + " gone");
    return it->second;
  }
  Result<void> write(const std::string&, CgroupFile, const std::string&) override {
    writes++;
    return {};
  }
  bool exists(const std::string& cg) override {
    for (const auto& [k, _] : files)
      if (k.first == cg) return true;
    return false;
  }
};

}  // namespace

// ---- the bearer token file -------------------------------------------------------

TEST(HardeningToken, AFifoFailsTheFetchWithoutBlocking) {
  TempDir d;
  const std::string fifo = (d.path / "token").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  KubeletPodsClient client(unreachable(fifo));
  auto pending = std::async(std::launch::async, [&] { return client.fetch(); });
  if (pending.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // let a blocked open(2) through
    if (w >= 0) ::close(w);
    pending.wait();
    FAIL() << "reading the token blocked on a FIFO";
  }
  auto r = pending.get();
  EXPECT_TRUE(token_refused(r)) << (r.ok() ? "fetched" : r.error().str());
  EXPECT_TRUE(contains(r.error().message, "not a regular file")) << r.error().message;
}

TEST(HardeningToken, ADeviceFailsTheFetch) {
  KubeletPodsClient client(unreachable("/dev/zero"));  // would never end
  auto r = client.fetch();
  EXPECT_TRUE(token_refused(r)) << (r.ok() ? "fetched" : r.error().str());
  EXPECT_TRUE(contains(r.error().message, "not a regular file")) << r.error().message;
}

TEST(HardeningToken, AFileOver64KiBFailsTheFetch) {
  TempDir d;
  d.write("token", std::string(64 * 1024 + 1, 'a'));
  KubeletPodsClient client(unreachable((d.path / "token").string()));
  auto r = client.fetch();
  EXPECT_TRUE(token_refused(r)) << (r.ok() ? "fetched" : r.error().str());
  EXPECT_TRUE(contains(r.error().message, "larger than 64 KiB")) << r.error().message;
}

TEST(HardeningToken, A64KiBTokenBehindASymlinkIsRead) {
  // Projected service account tokens are reached through ..data symlinks.
  TempDir d;
  d.write("..data/token", std::string(64 * 1024 - 1, 'a') + "\n");
  fs::create_symlink("..data/token", d.path / "token");
  KubeletPodsClient client(unreachable((d.path / "token").string()));
  auto r = client.fetch();
  ASSERT_FALSE(r.ok());  // nothing listens
  EXPECT_FALSE(token_refused(r)) << r.error().str();
}

TEST(HardeningToken, ADirectoryIsStillNoToken) {
  TempDir d;
  fs::create_directory(d.path / "token");
  KubeletPodsClient client(unreachable((d.path / "token").string()));
  auto r = client.fetch();
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(token_refused(r)) << r.error().str();
}

// ---- the NodeManager web address from the RM -------------------------------------

TEST(HardeningNmAddress, OnlyPlainHostPortIsAccepted) {
  for (const char* ok :
       {"worker1.example.com:8042", "worker_1:8042", "10.0.0.7:8042", "[::1]:8042", "[fe80::1:2]:1", "h:65535"}) {
    EXPECT_TRUE(yarn_http_address_ok(ok)) << ok;
  }
  for (const char* bad : {"",
                          "worker1",
                          ":8042",
                          "h:",
                          "h:0",
                          "h:65536",
                          "h:99999999999",
                          "h:80x",
                          "vm:1/../../evil?x=",
                          "h:8042/",
                          "h/x:8042",
                          "h:8042?a=1",
                          "h:8042#f",
                          "user@evil:8042",
                          "user:pw@evil:8042",
                          "h :8042",
                          "h:8042\r\nX: y",
                          "h\t:1",
                          "h%2f:8042",
                          "h\\x:1",
                          "[::1:8042",
                          "[]:1",
                          "[::g]:1",
                          "http://h:8042"}) {
    EXPECT_FALSE(yarn_http_address_ok(bad)) << bad;
  }
  EXPECT_FALSE(yarn_http_address_ok(std::string(400, 'a') + ":1"));
}

TEST(HardeningNmAddress, ADownscalerDoesNotBuildAUrlFromAHostileAddress) {
  yarntest::YarnEmulator emu;
  emu.add_this_node("worker1.example.com:45454", "worker1.example.com", {8, 16384});
  auto node = emu.node("worker1.example.com:45454");
  ASSERT_TRUE(node);
  node->http_address = emu.nm_address() + "/../../evil?x=";
  emu.add_node(*node);

  YarnConfig c;
  c.enabled = true;
  c.rm_urls = emu.rm_urls();
  c.auth = HttpAuth::None;
  c.request_timeout_ms = 1500;
  c.connect_timeout_ms = 500;
  c.retries = 0;
  TempDir mount;
  YarnDownscaler ds(c, false, mount.path.string(), {"worker1"});
  YarnOffer o;
  o.now_ns = 1'000'000'000'000ULL;
  o.budget_cores = 4;
  ds.round(o);
  YarnStatus st = ds.status();
  EXPECT_TRUE(contains(st.last_error, "not a plain host:port")) << st.last_error;
  EXPECT_TRUE(contains(st.last_error, "yarn.nm_url")) << st.last_error;
  EXPECT_TRUE(emu.requests(yarntest::Srv::NM).empty());
  EXPECT_TRUE(emu.rm_posts().empty());
}

// ---- dry run ---------------------------------------------------------------------

TEST(HardeningDryRun, TheSameWouldBeWriteIsReportedOncePerChange) {
  TempDir t;
  MemFs f;
  f.files[{"/be", CgroupFile::CpuMax}] = "max 100000";
  StateStore st((t.path / "s.json").string());
  Actuator a(f, st, true, {0, 1, 2, 3});
  const uint64_t s = 1'000'000'000ULL;

  auto first = a.apply({{"/be", CgroupFile::CpuMax, "100000 100000"}}, 1 * s);
  ASSERT_EQ(first[0].outcome, ActionOutcome::DryRun);
  EXPECT_FALSE(first[0].repeat);
  for (uint64_t tick = 2; tick < 5; tick++) {
    auto again = a.apply({{"/be", CgroupFile::CpuMax, "100000 100000"}}, tick * s);
    ASSERT_EQ(again[0].outcome, ActionOutcome::DryRun);
    EXPECT_TRUE(again[0].repeat) << "tick " << tick;
  }
  // "100000" is "100000 100000" as the kernel shows it: the same change.
  EXPECT_TRUE(a.apply({{"/be", CgroupFile::CpuMax, "100000"}}, 5 * s)[0].repeat);
  // Another wanted value is a new change, reported once again.
  auto other = a.apply({{"/be", CgroupFile::CpuMax, "50000 100000"}}, 6 * s);
  EXPECT_FALSE(other[0].repeat);
  EXPECT_TRUE(a.apply({{"/be", CgroupFile::CpuMax, "50000 100000"}}, 7 * s)[0].repeat);
  // So is a change of what is there (someone else wrote the file).
  f.files[{"/be", CgroupFile::CpuMax}] = "200000 100000";
  EXPECT_FALSE(a.apply({{"/be", CgroupFile::CpuMax, "50000 100000"}}, 8 * s)[0].repeat);
  // Once the file holds the wanted value, a later difference is new again.
  f.files[{"/be", CgroupFile::CpuMax}] = "50000 100000";
  EXPECT_EQ(a.apply({{"/be", CgroupFile::CpuMax, "50000 100000"}}, 9 * s)[0].outcome, ActionOutcome::Unchanged);
  f.files[{"/be", CgroupFile::CpuMax}] = "200000 100000";
  EXPECT_FALSE(a.apply({{"/be", CgroupFile::CpuMax, "50000 100000"}}, 10 * s)[0].repeat);
  EXPECT_EQ(f.writes, 0);
  EXPECT_FALSE(fs::exists(t.path / "s.json"));
}

TEST(HardeningDryRun, ARestoreThatWouldBeDoneIsReportedOnce) {
  // A state file left by an earlier (real) run, then a dry run.
  TempDir t;
  const std::string path = (t.path / "s.json").string();
  {
    StateStore earlier(path);
    earlier.record("/be", CgroupFile::CpuIdle, "0");
    ASSERT_TRUE(earlier.save().ok());
  }
  MemFs f;
  f.files[{"/be", CgroupFile::CpuIdle}] = "1";
  StateStore st(path);
  ASSERT_TRUE(st.load().ok());
  Actuator a(f, st, true, {0, 1});
  auto r1 = a.restore_unwanted({});
  ASSERT_EQ(r1.size(), 1u);
  EXPECT_EQ(r1[0].outcome, ActionOutcome::DryRun);
  EXPECT_FALSE(r1[0].repeat);
  auto r2 = a.restore_unwanted({});
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_TRUE(r2[0].repeat);
  EXPECT_EQ(f.writes, 0);
}

// ---- the kubelet's cpu_manager_state --------------------------------------------

TEST(HardeningCpuManagerState, AFifoIsRefusedWithoutBlocking) {
  TempDir d;
  const std::string fifo = (d.path / "cpu_manager_state").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto pending = std::async(std::launch::async, [&] { return read_cpu_manager_state(fifo); });
  if (pending.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
    pending.wait();
    FAIL() << "reading cpu_manager_state blocked on a FIFO";
  }
  auto r = pending.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EINVAL);
  EXPECT_TRUE(contains(r.error().message, "not a regular file")) << r.error().message;
}

TEST(HardeningCpuManagerState, AFileOver4MiBIsRefused) {
  TempDir d;
  std::string big = R"({"policyName":"none","x":")" + std::string(4 << 20, 'a') + R"("})";
  d.write("cpu_manager_state", big);
  auto r = read_cpu_manager_state((d.path / "cpu_manager_state").string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EFBIG) << r.error().str();
}

TEST(HardeningCpuManagerState, DeepNestingIsRefusedBeforeItIsBuilt) {
  std::string deep = R"({"policyName":"static","entries":)" + std::string(100000, '[');
  auto r = parse_cpu_manager_state(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, E2BIG) << r.error().str();
  EXPECT_TRUE(contains(r.error().message, "cpu_manager_state")) << r.error().message;
  // A real one (three levels) still parses.
  auto ok = parse_cpu_manager_state(
      R"({"policyName":"static","defaultCpuSet":"0,5-7","entries":{"pod":{"app":"1-4"}},"checksum":1})");
  ASSERT_TRUE(ok.ok()) << ok.error().str();
  EXPECT_EQ(format_cpu_list(ok->exclusive), "1-4");
}
