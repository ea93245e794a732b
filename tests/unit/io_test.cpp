// Block IO: io.stat and v1 blkio parsing (collect/io), the per-tick deltas
// (signals/io) and the IO controller's judgement (policy/io_controller).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "khagent/collect/io.h"
#include "khagent/policy/io_controller.h"
#include "khagent/signals/io.h"

namespace khagent {
namespace {

constexpr uint64_t kMs = 1'000'000;

TEST(IoStat, ParsesV2Lines) {
  auto s = parse_io_stat(
      "254:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n"
      "253:0 rbytes=1 wbytes=0 rios=1 wios=0 dbytes=0 dios=0 cost.usage=9\n"
      "7:0\n");
  ASSERT_TRUE(s) << s.error().str();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ(s->at("254:0").wbytes, 8192u);
  EXPECT_EQ(s->at("254:0").wios, 2u);
  EXPECT_EQ(s->at("253:0").rbytes, 1u);
  EXPECT_EQ(s->at("7:0").rbytes, 0u);
  EXPECT_TRUE(parse_io_stat("")->empty());
  EXPECT_FALSE(parse_io_stat("sda rbytes=1\n"));
  EXPECT_FALSE(parse_io_stat("8:0 rbytes=x\n"));
}

TEST(IoStat, ParsesV1BlkioThrottleCounters) {
  auto s = parse_blkio_throttle(
      "254:0 Read 4096\n254:0 Write 1048576\n254:0 Sync 0\n254:0 Async 1052672\n254:0 Discard 0\n"
      "254:0 Total 1052672\nTotal 1052672\n",
      "254:0 Read 1\n254:0 Write 256\n254:0 Sync 0\n254:0 Async 257\n254:0 Discard 0\n254:0 Total 257\n"
      "Total 257\n");
  ASSERT_TRUE(s) << s.error().str();
  ASSERT_EQ(s->size(), 1u);
  EXPECT_EQ(s->at("254:0").rbytes, 4096u);
  EXPECT_EQ(s->at("254:0").wbytes, 1048576u);
  EXPECT_EQ(s->at("254:0").wios, 256u);
  EXPECT_TRUE(parse_blkio_throttle("Total 0\n", "Total 0\n")->empty());
  EXPECT_FALSE(parse_blkio_throttle("254:0 Read many\n", ""));
}

// The IO files of a node, as maps.
class IoReads : public NodeReads {
 public:
  std::map<std::string, PsiTotals> psi;
  std::map<std::string, IoStat> io;
  bool has_memory() const override { return false; }
  Result<MemoryUse> memory(const std::string&) const override { return make_error(ENOTSUP, "no"); }
  Result<MemoryUse> node_memory(const std::string&) const override { return make_error(ENOTSUP, "no"); }
  Result<std::map<std::string, uint64_t>> oom_kill_counts(const std::string&) const override {
    return make_error(ENOTSUP, "no");
  }
  Result<std::string> at_own_limit(const std::string&, const std::string&) const override { return std::string(); }
  Result<PsiTotals> memory_pressure(const std::string&) const override { return make_error(ENOENT, "no"); }
  Result<PsiTotals> io_pressure(const std::string& cg) const override {
    auto it = psi.find(cg);
    if (it == psi.end()) return make_error(ENOENT, cg + "/io.pressure");
    return it->second;
  }
  Result<IoStat> io_stat(const std::string& cg) const override {
    auto it = io.find(cg);
    if (it == io.end()) return make_error(ENOENT, cg + "/io.stat");
    return it->second;
  }
  std::optional<CpuQuota> cpu_quota(const std::string&) const override { return std::nullopt; }
  std::optional<uint64_t> cpu_burst(const std::string&) const override { return std::nullopt; }
  std::vector<std::string> children(const std::string&) const override { return {}; }
  Result<CpuManagerState> cpu_manager_state() const override { return CpuManagerState{}; }
};

TEST(IoSignals, DeltasPerPodAndPerOfflineDeviceMostBytesFirst) {
  IoReads r;
  IoTracker t;
  const std::vector<std::string> online = {"/kubepods/pod-a", "/kubepods/pod-gone"};
  const std::vector<std::string> offline = {"/hadoop-yarn", "/kubepods/besteffort"};
  r.psi["/kubepods/pod-a"] = {1000, 500, 0, 0};
  r.io["/kubepods/pod-a"] = {{"254:0", {100, 0, 1, 0}}};
  r.io["/hadoop-yarn"] = {{"254:0", {0, 1000, 0, 10}}, {"253:0", {0, 10, 0, 1}}};
  r.io["/kubepods/besteffort"] = {{"254:0", {0, 0, 0, 0}}};
  auto s = t.step(TickSnapshot(r, 1000 * kMs), online, offline);
  EXPECT_EQ(s.interval_ns, 0u);  // the first step: nothing to compare
  EXPECT_TRUE(s.offline.empty());
  ASSERT_EQ(s.unreadable.size(), 1u);
  EXPECT_NE(s.unreadable[0].find("pod-gone"), std::string::npos);

  r.psi["/kubepods/pod-a"] = {51000, 20500, 0, 0};  // 50 ms of 200
  r.io["/kubepods/pod-a"] = {{"254:0", {4196, 0, 2, 0}}};
  r.io["/hadoop-yarn"] = {{"254:0", {0, 1000 + (8 << 20), 0, 74}}, {"253:0", {0, 10, 0, 1}}};
  r.io["/kubepods/besteffort"] = {{"254:0", {1 << 20, 0, 256, 0}}};
  s = t.step(TickSnapshot(r, 1200 * kMs), online, offline);
  EXPECT_EQ(s.interval_ns, 200 * kMs);
  ASSERT_EQ(s.online.size(), 1u);
  EXPECT_EQ(s.online[0].some_us, 50000u);
  EXPECT_EQ(s.online[0].full_us, 20000u);
  EXPECT_DOUBLE_EQ(s.online[0].some_share, 0.25);
  EXPECT_EQ(s.online[0].devices.at("254:0").rbytes, 4096u);
  ASSERT_EQ(s.offline.size(), 2u);  // 253:0 did nothing this interval
  EXPECT_EQ(s.offline[0].cgroup, "/hadoop-yarn");
  EXPECT_EQ(s.offline[0].delta.wbytes, uint64_t{8} << 20);
  EXPECT_EQ(s.offline[1].cgroup, "/kubepods/besteffort");

  // A cgroup made again under the same path: counters start over.
  r.io["/hadoop-yarn"] = {{"254:0", {0, 4096, 0, 1}}};
  s = t.step(TickSnapshot(r, 1400 * kMs), online, offline);
  ASSERT_FALSE(s.offline.empty());
  EXPECT_EQ(s.offline[0].delta.wbytes, 4096u);
}

TEST(IoController, NamesTheOfflineCgroupOnTheStalledPodsDevice) {
  IoConfig cfg;
  cfg.stall_limit = 0.1;
  IoSignals s;
  s.interval_ns = 200 * kMs;
  IoPodStall calm{"/pod-calm", 1000, 0, 0.005, {}};
  IoPodStall hurt{"/pod-hurt", 60000, 30000, 0.3, {{"254:0", {4096, 0, 1, 0}}}};
  s.online = {calm, hurt};
  s.offline = {{"/hadoop-yarn", "253:0", {0, 100 << 20, 0, 100}},
               {"/kubepods/besteffort", "254:0", {0, 8 << 20, 0, 64}}};
  auto r = io_judge(s, cfg);
  ASSERT_TRUE(r.stalled);
  EXPECT_EQ(r.stalled->pod, "/pod-hurt");
  EXPECT_EQ(r.stalled_pods, 1u);
  ASSERT_TRUE(r.aggressor);
  EXPECT_EQ(r.aggressor->cgroup, "/kubepods/besteffort");  // not the bigger writer on another device
  EXPECT_TRUE(r.aggressor_on_pods_device);

  // Its devices unknown: the biggest writer anywhere.
  s.online[1].devices.clear();
  r = io_judge(s, cfg);
  ASSERT_TRUE(r.aggressor);
  EXPECT_EQ(r.aggressor->cgroup, "/hadoop-yarn");
  EXPECT_FALSE(r.aggressor_on_pods_device);

  // Nobody over the limit: nothing named.
  s.online[1].some_share = 0.05;
  r = io_judge(s, cfg);
  EXPECT_FALSE(r.stalled);
  EXPECT_FALSE(r.aggressor);
}

}  // namespace
}  // namespace khagent
