// The memory lever from the files it reads to the files it writes: sizes in
// the configuration, the kernel's memory files, the budget rule, its split
// between offline parents and the values rendered for v2 and v1.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

#include "khagent/actuate/cgroup_writer.h"
#include "khagent/actuate/oom_order.h"
#include "khagent/collect/memory.h"
#include "khagent/config/config.h"
#include "khagent/policy/lever_table.h"
#include "khagent/policy/memory.h"
#include "khagent/signals/offline_memory.h"
#include "khagent/util/bytes.h"
#include "test_util.h"

using namespace khagent;

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = kMiB << 10;
constexpr uint64_t kS = 1'000'000'000;

std::string bytes_error(const std::string& s) {
  uint64_t b = 0;
  return parse_bytes(s, b);
}
uint64_t bytes_of(const std::string& s) {
  uint64_t b = 0;
  EXPECT_EQ(parse_bytes(s, b), "") << s;
  return b;
}

// The defaults without the kubelet's eviction threshold, which
// EvictionThresholdIsKeptFreeToo covers, so the arithmetic below stays short.
MemoryConfig cfg() {
  MemoryConfig c = default_config().memory;
  c.eviction_threshold_bytes = 0;
  return c;
}

}  // namespace

TEST(Bytes, UnitsAsKubernetesWritesThem) {
  EXPECT_EQ(bytes_of("4096"), 4096u);
  EXPECT_EQ(bytes_of("512Mi"), 512 * kMiB);
  EXPECT_EQ(bytes_of("3Gi"), 3 * kGiB);
  EXPECT_EQ(bytes_of("1G"), 1'000'000'000u);
  EXPECT_EQ(bytes_of("2Ki"), 2048u);
  EXPECT_NE(bytes_error(""), "");
  EXPECT_NE(bytes_error("-1Gi"), "");
  EXPECT_NE(bytes_error("1.5Gi"), "");
  EXPECT_NE(bytes_error("12GB"), "");
  EXPECT_NE(bytes_error("Mi"), "");
  EXPECT_NE(bytes_error("99999999999999999999"), "");
  EXPECT_NE(bytes_error("20000000Ti"), "") << "overflow";
  for (uint64_t v : {uint64_t{0}, uint64_t{4095}, 256 * kMiB, 3 * kGiB, kGiB + kMiB, uint64_t{1000}})
    EXPECT_EQ(bytes_of(format_bytes(v)), v) << format_bytes(v);
  EXPECT_EQ(format_bytes(256 * kMiB), "256Mi");
  EXPECT_EQ(mib_text(1536 * kMiB), "1536 MiB");
}

TEST(MemoryFiles, StatMeminfoAndPsi) {
  const char* stat = "anon 100\nfile 2000\ninactive_file 1500\nactive_file 500\ntotal_inactive_file 77\n";
  EXPECT_EQ(stat_value(stat, "inactive_file"), 1500u);
  EXPECT_EQ(stat_value(stat, "total_inactive_file"), 77u);
  EXPECT_EQ(stat_value(stat, "inactive"), std::nullopt) << "a prefix of a key is not the key";
  EXPECT_EQ(stat_value(stat, "shmem"), std::nullopt);

  auto m = parse_meminfo(
      "MemTotal:       24555520 kB\nMemFree:  10000000 kB\nMemAvailable:   20000000 kB\nInactive(anon): 5 kB\n"
      "Inactive(file):  4000000 kB\n");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m->limit, uint64_t{24555520} << 10);
  EXPECT_EQ(m->usage, uint64_t{14555520} << 10);
  EXPECT_EQ(m->working_set(), uint64_t{10555520} << 10) << "total - free - inactive file, as the kubelet counts it";
  m = parse_meminfo("MemTotal:       24555520 kB\nMemAvailable:   20000000 kB\n");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->working_set(), uint64_t{4555520} << 10) << "without Inactive(file): total - available";
  EXPECT_FALSE(parse_meminfo("MemTotal: 5 kB\n").ok());
  EXPECT_FALSE(parse_meminfo("MemFree: 5 kB\nInactive(file): 1 kB\n").ok());

  auto p = parse_psi(
      "some avg10=0.00 avg60=0.00 avg300=0.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=789\n");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->some_us, 123456u);
  EXPECT_EQ(p->full_us, 789u);
  p = parse_psi("some avg10=12.34 avg60=0.50 avg300=0.00 total=9\nfull avg10=0.07 avg60=0.00 avg300=0.00 total=1\n");
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->some_avg10, 12.34);
  EXPECT_DOUBLE_EQ(p->full_avg10, 0.07);
  p = parse_psi("some avg10=x avg60=0.00 avg300=0.00 total=1\n");
  ASSERT_TRUE(p.ok()) << "a bad avg10 is left at 0: the totals are what the agent reads";
  EXPECT_EQ(p->some_avg10, 0);
  EXPECT_EQ(p->some_us, 1u);
  EXPECT_FALSE(parse_psi("full avg10=0.00 total=1\n").ok());
  EXPECT_FALSE(parse_psi("some avg10=0.00\n").ok());
}

TEST(MemoryFiles, ZoneinfoHighWatermarksSummed) {
  const std::string zi =
      "Node 0, zone      DMA\n  per-node stats\n      nr_inactive_anon 10\npages free     3840\n        "
      "boost    0\n        min      10\n        low      12\n        high     15\n        spanned  4095\n"
      "Node 0, zone    DMA32\n  pages free     100\n        min      500\n        low      600\n        high     "
      "700\n  pagesets\n    cpu: 0\n              high:  378\n              batch: 63\n"
      "Node 0, zone  Movable\n  pages free     0\n        min      0\n        low      0\n        high     0\n";
  EXPECT_EQ(parse_zoneinfo_high(zi), 715u) << "the zones' high, not the pagesets' \"high:\"";
  EXPECT_FALSE(parse_zoneinfo_high("Node 0, zone DMA\n  pages free 1\n").has_value());
}

TEST(MemoryFiles, ReaderOnV2AndV1Trees) {
  TempDir t;
  t.write("proc/meminfo", "MemTotal: 4194304 kB\nMemAvailable: 1048576 kB\n");
  t.write("v2/node/memory.current", "2147483648\n");
  t.write("v2/node/memory.stat", "anon 1\ninactive_file 536870912\n");
  t.write("v2/node/memory.max", "3221225472\n");
  t.write("v2/node/yarn/memory.current", "1073741824\n");
  t.write("v2/node/yarn/memory.stat", "inactive_file 268435456\n");
  t.write("v2/node/yarn/memory.max", "max\n");
  t.write("v1/yarn/memory.usage_in_bytes", "1073741824\n");
  t.write("v1/yarn/memory.stat", "inactive_file 1\ntotal_inactive_file 268435456\n");
  t.write("v1/yarn/memory.limit_in_bytes", "9223372036854771712\n");

  MemoryReader v2((t.path / "v2").string(), false, (t.path / "proc").string());
  auto y = v2.cgroup("/node/yarn");
  ASSERT_TRUE(y.ok()) << y.error().str();
  EXPECT_EQ(y->working_set(), 768 * kMiB);
  EXPECT_FALSE(y->limit.has_value());
  auto whole = v2.node("");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole->limit, 4 * kGiB);
  EXPECT_EQ(whole->working_set(), 3 * kGiB);
  auto node = v2.node("/node");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(*node->limit, 3 * kGiB) << "the node cgroup's limit is the capacity";
  EXPECT_EQ(node->working_set(), 1536 * kMiB);
  EXPECT_EQ(v2.cgroup("/gone").error().err, ENOENT);

  MemoryReader v1((t.path / "v1").string(), true, (t.path / "proc").string());
  auto y1 = v1.cgroup("/yarn");
  ASSERT_TRUE(y1.ok()) << y1.error().str();
  EXPECT_EQ(y1->working_set(), 768 * kMiB) << "v1 counts the hierarchy's inactive file pages";
  EXPECT_FALSE(y1->limit.has_value()) << "v1 prints no limit as a huge number";
}

// A stall at a group's own limit is the group's: the pod or one of its
// containers within max(limit / 32, 4 MiB) of memory.max or memory.high
// (v1: memory.limit_in_bytes).
TEST(MemoryFiles, AtItsOwnLimitThePodOrAContainer) {
  TempDir t;
  auto v2cg = [&](const std::string& p, uint64_t cur, const std::string& max, const std::string& high) {
    t.write("v2" + p + "/memory.current", std::to_string(cur) + "\n");
    t.write("v2" + p + "/memory.max", max + "\n");
    t.write("v2" + p + "/memory.high", high + "\n");
  };
  v2cg("/pod", 700 * kMiB, "max", "max");
  v2cg("/pod/c1", 200 * kMiB, std::to_string(512 * kMiB), "max");
  v2cg("/pod/c2", 500 * kMiB, "max", "max");
  MemoryReader v2((t.path / "v2").string(), false);
  auto r = v2.at_own_limit("/pod", "");
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(*r, "") << "no limit on the pod, containers well under theirs";
  v2cg("/pod/c1", 497 * kMiB, std::to_string(512 * kMiB), "max");  // 15 MiB under: within 512/32 = 16
  EXPECT_EQ(*v2.at_own_limit("/pod", ""), "/pod/c1: 497 MiB of 512 MiB");
  v2cg("/pod/c1", 200 * kMiB, std::to_string(512 * kMiB), "max");
  v2cg("/pod/c2", 500 * kMiB, "max", std::to_string(503 * kMiB));  // memory.high counts too (MemoryQoS)
  EXPECT_EQ(*v2.at_own_limit("/pod", ""), "/pod/c2: 500 MiB of 503 MiB");
  v2cg("/pod", 700 * kMiB, std::to_string(720 * kMiB), "max");  // the pod's own, within 22 MiB
  EXPECT_EQ(*v2.at_own_limit("/pod", ""), "/pod: 700 MiB of 720 MiB");
  v2cg("/small", 61 * kMiB, std::to_string(64 * kMiB), "max");  // a small group: 4 MiB at least
  EXPECT_EQ(*v2.at_own_limit("/small", ""), "/small: 61 MiB of 64 MiB");
  EXPECT_EQ(v2.at_own_limit("/gone", "").error().err, ENOENT);
  // The levels above the pod up to the node: kubepods' limit is online's own.
  v2cg("/node", 3000 * kMiB, std::to_string(3072 * kMiB), "max");
  v2cg("/node/kube", 2000 * kMiB, std::to_string(2048 * kMiB), "max");
  v2cg("/node/kube/pod", 100 * kMiB, "max", "max");
  EXPECT_EQ(*v2.at_own_limit("/node/kube/pod", "/node"), "/node/kube: 2000 MiB of 2048 MiB");
  EXPECT_EQ(*v2.at_own_limit("/node/kube/pod", "/node/kube"), "") << "the node's own limit is not the pod's";
  EXPECT_EQ(*v2.at_own_limit("/node/kube/pod", ""), "/node/kube: 2000 MiB of 2048 MiB");
  v2cg("/node/kube", 1000 * kMiB, std::to_string(2048 * kMiB), "max");
  EXPECT_EQ(*v2.at_own_limit("/node/kube/pod", ""), "/node: 3000 MiB of 3072 MiB") << "up to the root without a node";

  t.write("v1/pod/memory.usage_in_bytes", std::to_string(300 * kMiB) + "\n");
  t.write("v1/pod/memory.limit_in_bytes", "9223372036854771712\n");
  MemoryReader v1((t.path / "v1").string(), true);
  EXPECT_EQ(*v1.at_own_limit("/pod", ""), "") << "v1 prints no limit as a huge number";
  t.write("v1/pod/memory.limit_in_bytes", std::to_string(308 * kMiB) + "\n");
  EXPECT_EQ(*v1.at_own_limit("/pod", ""), "/pod: 300 MiB of 308 MiB");
}

TEST(MemoryFiles, OomKillsAndRefaultsOnV2AndV1) {
  TempDir t;
  auto group = [&](const std::string& dir, bool v1, uint64_t kills, uint64_t refaults) {
    t.write(dir + (v1 ? "/memory.usage_in_bytes" : "/memory.current"), "4096\n");
    t.write(dir + (v1 ? "/memory.limit_in_bytes" : "/memory.max"), "max\n");
    t.write(dir + "/memory.stat",
            v1 ? "workingset_refault_file 1\ntotal_workingset_refault_anon 0\n"
                 "total_workingset_refault_file " +
                     std::to_string(refaults) + "\n"
               : "workingset_refault_anon 2\nworkingset_refault_file " + std::to_string(refaults - 2) + "\n");
    t.write(dir + (v1 ? "/memory.oom_control" : "/memory.events"),
            v1 ? "oom_kill_disable 0\nunder_oom 0\noom_kill " + std::to_string(kills) + "\n"
               : "low 0\nhigh 5\nmax 1\noom 1\noom_kill " + std::to_string(kills) + "\n");
  };
  group("v2/pod", false, 1, 100);
  MemoryReader v2((t.path / "v2").string(), false, (t.path / "proc").string());
  EXPECT_EQ(v2.cgroup("/pod")->refaults, 100u) << "anon and file refaults";
  EXPECT_EQ(v2.cgroup("/pod")->refaults_file, 98u) << "and the page cache among them";
  EXPECT_EQ(*v2.oom_kills("/pod"), 1u) << "v2 counts the subtree in the parent";
  // v1 counts each group's own kills: the pod's are in its containers.
  group("v1/pod", true, 0, 50);
  group("v1/pod/c1", true, 2, 10);
  group("v1/pod/c2", true, 1, 10);
  MemoryReader v1((t.path / "v1").string(), true, (t.path / "proc").string());
  EXPECT_EQ(v1.cgroup("/pod")->refaults, 50u) << "the hierarchical total_ form";
  EXPECT_EQ(v1.cgroup("/pod")->refaults_file, 50u) << "total_workingset_refault_file, not the group's own";
  EXPECT_EQ(*v1.oom_kills("/pod"), 3u);
  EXPECT_FALSE(v1.oom_kills("/gone").ok());

  // The meter: deltas, the first reading only starts a count. It reads
  // through each tick's snapshot.
  const auto v2r = real_node_reads({"", "", (t.path / "v2").string(), false, "", (t.path / "proc").string()});
  const auto v1r = real_node_reads({"", "", (t.path / "v1").string(), true, "", (t.path / "proc").string()});
  auto snap = [](const std::unique_ptr<NodeReads>& r) { return TickSnapshot(*r, 0); };
  MemoryEventMeter meter;
  auto e = meter.step(snap(v2r), {"/pod"}, {});
  EXPECT_EQ(e.online_oom_kills, 0u);
  group("v2/pod", false, 3, 160);
  group("v2/yarn", false, 0, 10);
  e = meter.step(snap(v2r), {"/pod"}, {"/yarn", "/gone"});
  EXPECT_EQ(e.online_oom_kills, 2u);
  EXPECT_EQ(e.online_refaults, 60u);
  ASSERT_EQ(e.online_killed.size(), 1u);
  EXPECT_EQ(e.online_killed[0], (std::pair<std::string, uint64_t>{"/pod", 2}));
  EXPECT_EQ(e.offline_refaults, 0u) << "the parent's first reading";
  group("v2/yarn", false, 1, 30);
  e = meter.step(snap(v2r), {"/pod"}, {"/yarn"});
  EXPECT_EQ(e.online_oom_kills, 0u);
  EXPECT_EQ(e.offline_oom_kills, 1u);
  EXPECT_EQ(e.offline_refaults, 20u);

  // The page cache meter: file refaults only, in bytes, and the pods'
  // inactive page cache; a pod listed twice counts once.
  FileRefaultMeter files(4096);
  t.write("v2/pod/memory.stat", "inactive_file 8192\nworkingset_refault_anon 2\nworkingset_refault_file 100\n");
  FileRefaults f = files.step(snap(v2r), {"/pod", "/pod"});
  EXPECT_TRUE(f.known);
  EXPECT_EQ(f.bytes, 0u) << "the first reading";
  EXPECT_EQ(f.inactive_file, 8192u) << "counted once";
  t.write("v2/pod/memory.stat", "inactive_file 4096\nworkingset_refault_anon 50\nworkingset_refault_file 110\n");
  f = files.step(snap(v2r), {"/pod", "/gone"});
  EXPECT_EQ(f.bytes, 10u * 4096) << "file refaults, not anon";
  EXPECT_EQ(f.inactive_file, 4096u);
  t.write("v2/pod/memory.stat", "inactive_file 0\n");
  f = files.step(snap(v2r), {"/pod"});
  EXPECT_FALSE(f.known) << "no workingset_refault_file in this memory.stat";
  EXPECT_EQ(f.bytes, 0u);

  // v1: a removed group hides no kill elsewhere, a new one counts from 0.
  MemoryEventMeter m1;
  m1.step(snap(v1r), {"/pod"}, {});
  std::filesystem::remove_all(t.path / "v1/pod/c2");  // took its 1 kill with it
  group("v1/pod/c1", true, 3, 10);                    // one more
  group("v1/pod/c3", true, 1, 10);                    // new, with one
  e = m1.step(snap(v1r), {"/pod"}, {});
  EXPECT_EQ(e.online_oom_kills, 2u);

  // Kernels before 5.9: one workingset_refault.
  t.write("v2/old/memory.current", "4096\n");
  t.write("v2/old/memory.max", "max\n");
  t.write("v2/old/memory.stat", "workingset_refault 42\n");
  EXPECT_EQ(v2.cgroup("/old")->refaults, 42u);
  t.write("v2/old/memory.stat", "anon 1\n");
  EXPECT_FALSE(v2.cgroup("/old")->refaults.has_value()) << "none in this kernel's memory.stat";
}

TEST(MemoryBudget, FirstTakesTheCeilingThenCutsAtOnceAndGrowsSlowly) {
  MemoryConfig c = cfg();  // reserve 256Mi or 5%, grow 64Mi/s, deadband 32Mi
  MemoryState st;
  // 3 GiB node, online and system 1.5 GiB, offline 0.5 GiB: the reserve is 256 MiB.
  MemoryInput in{3 * kGiB, 2 * kGiB, 512 * kMiB, 1 * kS, 0, {}};
  auto d = memory_step(in, c, st);
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.reserve, 256 * kMiB);
  EXPECT_EQ(d.ceiling, 3 * kGiB - 256 * kMiB - 1536 * kMiB);
  EXPECT_EQ(d.budget, d.ceiling);
  EXPECT_NE(d.reason.find("first budget"), std::string::npos) << d.reason;

  // Online grows by 512 MiB: the budget is cut the same tick.
  in = {3 * kGiB, 2560 * kMiB, 512 * kMiB, 1 * kS + kS / 5, 0, {}};
  d = memory_step(in, c, st);
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.budget, 3 * kGiB - 256 * kMiB - 2 * kGiB);
  EXPECT_NE(d.reason.find("cut"), std::string::npos) << d.reason;

  // Online shrinks back: the budget grows by at most 64 MiB per second.
  const uint64_t low = d.budget;
  in = {3 * kGiB, 2 * kGiB, 512 * kMiB, 1 * kS + kS / 5 + kS / 5, 0, {}};
  d = memory_step(in, c, st);
  EXPECT_FALSE(d.changed) << "12.8 MiB of growth is within the deadband";
  EXPECT_EQ(d.budget, low);
  in.now_ns += kS;  // 1.2 s since the cut
  d = memory_step(in, c, st);
  EXPECT_TRUE(d.changed);
  EXPECT_GT(d.budget, low);
  EXPECT_LE(d.budget, low + 77 * kMiB);
  EXPECT_GE(d.budget, low + 76 * kMiB);
  EXPECT_NE(d.reason.find("growing"), std::string::npos) << d.reason;
  in.now_ns += 60 * kS;
  d = memory_step(in, c, st);
  EXPECT_EQ(d.budget, d.ceiling) << "never above the ceiling";

  // Small moves of the ceiling are not applied.
  in.node_used += 8 * kMiB;
  in.now_ns += kS;
  d = memory_step(in, c, st);
  EXPECT_FALSE(d.changed);
  EXPECT_GT(d.budget, d.ceiling) << "8 MiB under the deadband: kept";
}

TEST(MemoryBudget, AfterASteadySpellAHigherCeilingIsStillApproachedSlowly) {
  MemoryConfig c = cfg();
  MemoryState st;
  MemoryInput in{3 * kGiB, 2 * kGiB, 512 * kMiB, kS, 0, {}};
  const uint64_t start = memory_step(in, c, st).budget;
  for (int i = 0; i < 3000; i++) {  // ten minutes of 200 ms ticks, nothing moving
    in.now_ns += kS / 5;
    EXPECT_FALSE(memory_step(in, c, st).changed);
  }
  in.node_used -= 1 * kGiB;  // online frees 1 GiB
  in.now_ns += kS / 5;
  auto d = memory_step(in, c, st);
  EXPECT_FALSE(d.changed) << "12.8 MiB of growth so far: within the deadband";
  in.now_ns += 2 * kS / 5;
  d = memory_step(in, c, st);
  EXPECT_TRUE(d.changed);
  EXPECT_LE(d.budget, start + 39 * kMiB) << "0.6 s at 64 MiB/s, not the whole 1 GiB at once";
}

TEST(MemoryBudget, NothingLeftMeansZeroAndTheShareOfABigNode) {
  MemoryConfig c = cfg();
  MemoryState st;
  auto d = memory_step({3 * kGiB, 3 * kGiB, 0, kS, 0, {}}, c, st);
  EXPECT_EQ(d.budget, 0u) << "online and system hold everything";
  MemoryInput big, small;
  big.capacity = 24 * kGiB;
  small.capacity = 1 * kGiB;
  EXPECT_EQ(memory_reserve(big, c), static_cast<uint64_t>(24.0 * kGiB * 0.05));
  EXPECT_EQ(memory_reserve(small, c), 256 * kMiB);
  // Budget 0 still leaves each parent min_offline, as the lever splits it.
  EXPECT_EQ(memory_share(0, 100 * kMiB, 100 * kMiB, 1, c), c.min_offline_bytes);
}

TEST(MemoryBudget, EvictionThresholdIsKeptFreeToo) {
  MemoryConfig c = default_config().memory;
  EXPECT_EQ(c.eviction_threshold_bytes, 100 * kMiB) << "the kubelet's default evictionHard memory.available";
  MemoryState st;
  // 3 GiB node, online and system 1.5 GiB, offline 0.5 GiB.
  auto d = memory_step({3 * kGiB, 2 * kGiB, 512 * kMiB, kS, 0, {}}, c, st);
  EXPECT_EQ(d.eviction, 100 * kMiB);
  EXPECT_EQ(d.ceiling, 3 * kGiB - 100 * kMiB - 256 * kMiB - 1536 * kMiB);
  EXPECT_NE(d.reason.find("kubelet eviction threshold 100 MiB"), std::string::npos) << d.reason;
  // The node counts as short once less than twice the reserve is free above
  // the threshold: 600 MiB free is short with it (500 < 512), not without.
  st = {};
  d = memory_step({3 * kGiB, 3 * kGiB - 600 * kMiB, 1 * kGiB, kS, 0.5, {}}, c, st);
  EXPECT_TRUE(d.stalled) << d.reason;
  MemoryConfig none = c;
  none.eviction_threshold_bytes = 0;
  st = {};
  d = memory_step({3 * kGiB, 3 * kGiB - 600 * kMiB, 1 * kGiB, kS, 0.5, {}}, none, st);
  EXPECT_FALSE(d.stalled) << d.reason;
}

TEST(MemoryBudget, CriticalWhenLessThanHalfTheReserveIsFree) {
  MemoryConfig c = default_config().memory;  // eviction 100Mi, reserve 256Mi
  MemoryState st;
  auto d = memory_step({3 * kGiB, 3 * kGiB - 300 * kMiB, 1 * kGiB, kS, 0, {}}, c, st);
  EXPECT_FALSE(d.critical) << "200 MiB free above the threshold: short, not critical";
  d = memory_step({3 * kGiB, 3 * kGiB - 220 * kMiB, 1 * kGiB, 2 * kS, 0, {}}, c, st);
  EXPECT_EQ(d.critical.value_or(""),
            "120 MiB free above the eviction threshold, under half the 256 MiB reserve; offline holds 1024 MiB");
  d = memory_step({3 * kGiB, 3 * kGiB - 220 * kMiB, 0, 3 * kS, 0, {}}, c, st);
  EXPECT_FALSE(d.critical) << "offline holds nothing: no offline to take it from";
}

TEST(MemoryBudget, SplitBetweenParents) {
  MemoryConfig c = cfg();
  // One parent: the whole budget.
  EXPECT_EQ(memory_share(2 * kGiB, 100 * kMiB, 100 * kMiB, 1, c), 2 * kGiB);
  // Two parents with room: each keeps its use and gets half the room.
  EXPECT_EQ(memory_share(2 * kGiB, 1 * kGiB, 1536 * kMiB, 2, c), 1 * kGiB + 256 * kMiB);
  EXPECT_EQ(memory_share(2 * kGiB, 512 * kMiB, 1536 * kMiB, 2, c), 512 * kMiB + 256 * kMiB);
  // Over the budget: scaled down in proportion to use, never under min_offline.
  EXPECT_EQ(memory_share(1 * kGiB, 1 * kGiB, 2 * kGiB, 2, c), 512 * kMiB);
  EXPECT_EQ(memory_share(1 * kGiB, 100 * kMiB, 4 * kGiB, 2, c), c.min_offline_bytes);
  EXPECT_EQ(memory_share(2 * kGiB + 12345, 0, 0, 1, c), 2 * kGiB) << "rounded down to MiB";
}

TEST(MemoryLever, OnTheOfflineParentsOnlyWithABudget) {
  Config c = default_config();
  LeverInput in;
  TargetCandidates tc;
  tc.yarn_roots = {"/hadoop-yarn"};
  tc.besteffort_qos = {"/kubepods.slice/kubepods-besteffort.slice"};
  tc.besteffort_pods = {"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice"};
  in.targets = select_targets(tc, c.offline);
  for (auto& t : in.targets) {
    t.memory_known = t.kind != TargetKind::BestEffortPod;
    t.memory_used = t.kind == TargetKind::YarnRoot ? 1 * kGiB : 512 * kMiB;
  }
  auto memory_writes = [&] {
    std::vector<std::pair<std::string, MemoryLimit>> out;
    for (const auto& s : lever_writes(in, c))
      if (const auto* m = std::get_if<MemoryLimit>(&s.value)) out.emplace_back(s.cgroup, *m);
    return out;
  };
  EXPECT_TRUE(memory_writes().empty()) << "no budget: nothing written";
  in.memory_budget = 2 * kGiB;
  auto w = memory_writes();
  ASSERT_EQ(w.size(), 2u) << "the YARN root and the BestEffort QoS cgroup, never a pod";
  EXPECT_EQ(w[0].first, "/hadoop-yarn");
  EXPECT_EQ(w[0].second.bytes, 1 * kGiB + 256 * kMiB);
  EXPECT_EQ(w[1].second.bytes, 512 * kMiB + 256 * kMiB);
  in.budget_only = true;
  EXPECT_TRUE(memory_writes().empty()) << "the CPU fast path leaves memory alone";
  in.budget_only = false;
  in.targets[0].memory_known = false;  // the YARN root is not in the memory hierarchy
  w = memory_writes();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].second.bytes, 2 * kGiB) << "the one parent left gets the budget";
  c.memory.enabled = false;
  EXPECT_TRUE(memory_writes().empty());
  EXPECT_EQ(lever_spec(Lever::Memory).knob, Knob::Memory);
  EXPECT_FALSE(lever_is_rung(Lever::Memory));
}

TEST(MemoryReserve, SizedFromOnlineGrowthAndTheWatermarksOnceMeasured) {
  MemoryConfig c;  // at most max(256 MiB, 5%); at least 64 MiB once measured
  MemoryInput in;
  in.capacity = 24 * kGiB;
  bool measured = true;
  const uint64_t fixed = static_cast<uint64_t>(24.0 * kGiB * 0.05);
  EXPECT_EQ(memory_reserve(in, c, &measured), fixed) << "nothing measured yet: the fixed rule";
  EXPECT_FALSE(measured);
  in.online_growth = 10 * kMiB;
  in.watermark_high = 90 * kMiB;
  EXPECT_EQ(memory_reserve(in, c, &measured), 90 * kMiB) << "the watermarks";
  EXPECT_TRUE(measured);
  in.online_growth = 300 * kMiB + 1;
  EXPECT_EQ(memory_reserve(in, c), 301 * kMiB) << "the largest growth in a second, rounded up";
  in.online_growth = 0;
  in.watermark_high = 0;
  EXPECT_EQ(memory_reserve(in, c), 64 * kMiB) << "never under memory.reserve_min";
  in.online_growth = 4 * kGiB;
  EXPECT_EQ(memory_reserve(in, c, &measured), fixed) << "never over the fixed rule";
  EXPECT_FALSE(measured);
  c.reserve_min_bytes = 2 * kGiB;  // at least the fixed rule: measuring is off
  in.online_growth = 0;
  EXPECT_EQ(memory_reserve(in, c), fixed);
}

TEST(MemoryReserve, OnlineGrowthIsTheLargestRiseInASecondOverFiveMinutes) {
  OnlineGrowth g;
  const uint64_t tick = kS / 5;
  uint64_t now = kS;
  EXPECT_FALSE(g.step(now, 1 * kGiB).has_value()) << "not known in the first 30 s";
  for (int i = 0; i < 149; i++) g.step(now += tick, 1 * kGiB);
  EXPECT_EQ(g.step(now += tick, 1 * kGiB), 0u) << "30 s of a steady working set";
  // 200 MiB in 0.4 s, then steady.
  g.step(now += tick, 1 * kGiB + 100 * kMiB);
  EXPECT_EQ(g.step(now += tick, 1 * kGiB + 200 * kMiB), 200 * kMiB);
  // Then a rise of 10 MiB a tick (50 MiB/s): its first ticks still have the
  // steady reading of before the burst within their second (230 MiB in the
  // second that ends 3 ticks later); after that, a second holds 50 MiB.
  uint64_t ws = 1 * kGiB + 200 * kMiB;
  for (int i = 0; i < 50; i++) g.step(now += tick, ws += 10 * kMiB);
  EXPECT_EQ(g.step(now += tick, ws), 230 * kMiB) << "the burst's second is still the most";
  // Five minutes later all of it has aged out.
  for (int i = 0; i < 1510; i++) g.step(now += tick, ws);
  EXPECT_EQ(g.step(now += tick, ws), 0u);
  EXPECT_EQ(g.step(now += tick, ws - 500 * kMiB), 0u) << "a fall is no growth";
}

TEST(MemoryBudget, OnlineCacheRefaultedLatelyCountsAsOnlinesAndHalvesOverTheHalfLife) {
  RefaultCredit c;
  const uint64_t half = 600 * kS;
  uint64_t now = kS;
  EXPECT_EQ(c.step(now, 0, 500 * kMiB, half), 0u);
  EXPECT_EQ(c.step(now += kS / 5, 40 * kMiB, 500 * kMiB, half), 40 * kMiB);
  EXPECT_EQ(c.step(now += kS / 5, 40 * kMiB, 500 * kMiB, half), 79 * kMiB)
      << "refaults add up (the first decayed a little), rounded down to MiB";
  EXPECT_EQ(c.step(now += half, 0, 500 * kMiB, half), 39 * kMiB) << "half of it a half-life later";
  EXPECT_EQ(c.step(now += kS, 900 * kMiB, 500 * kMiB, half), 500 * kMiB) << "never over online's inactive cache";
  EXPECT_EQ(c.step(now += kS / 5, 0, 100 * kMiB, half), 100 * kMiB) << "which caps the sum too";
  EXPECT_EQ(c.step(now += kS / 5, 0, 1000 * kMiB, half), 99 * kMiB) << "and it does not come back";
  EXPECT_EQ(c.step(now += kS / 5, 50 * kMiB, 1000 * kMiB, 0), 0u) << "0: not counted";

  // In the budget: counted with online's working set.
  MemoryConfig cfg;
  cfg.reserve_bytes = 256 * kMiB;
  cfg.eviction_threshold_bytes = 0;
  MemoryInput in;
  in.capacity = 3 * kGiB;
  in.node_used = 1536 * kMiB;
  in.offline_used = 512 * kMiB;
  in.now_ns = kS;
  MemoryState st;
  EXPECT_EQ(memory_step(in, cfg, st).budget, 3 * kGiB - 256 * kMiB - 1024 * kMiB);
  in.online_refault_credit = 100 * kMiB;
  in.now_ns += kS;
  MemoryDecision d = memory_step(in, cfg, st);
  EXPECT_EQ(d.budget, 3 * kGiB - 256 * kMiB - 1124 * kMiB) << "cut by the credit at once";
  EXPECT_NE(d.reason.find("(with 100 MiB of online page cache refaulted lately)"), std::string::npos) << d.reason;
}

TEST(MemoryBackstop, HalfTheReserveAboveTheLimitAndNeverBelowWhatTheRootHolds) {
  const uint64_t reserve = 256 * kMiB;
  // A root under its limit: the limit plus half the reserve, whatever came before.
  EXPECT_EQ(memory_backstop(1 * kGiB, reserve, 500 * kMiB, std::nullopt), 1 * kGiB + 128 * kMiB);
  EXPECT_EQ(memory_backstop(1 * kGiB, reserve, 500 * kMiB, 3 * kGiB), 1 * kGiB + 128 * kMiB) << "a cut";
  EXPECT_EQ(memory_backstop(2 * kGiB, reserve, 500 * kMiB, 1 * kGiB), 2 * kGiB + 128 * kMiB) << "a rise";
  // The first backstop of a root over it holds it where it is: nothing is killed for a start.
  EXPECT_EQ(memory_backstop(1 * kGiB, reserve, 2 * kGiB, std::nullopt), 2 * kGiB + kBackstopSlack);
  // A cut of the budget while the root holds more: held at its use, not lower.
  EXPECT_EQ(memory_backstop(512 * kMiB, reserve, 2 * kGiB, 3 * kGiB), 2 * kGiB + kBackstopSlack);
  // Growth past the backstop is what it stops: it does not follow the use up.
  EXPECT_EQ(memory_backstop(512 * kMiB, reserve, 2 * kGiB + 10 * kMiB, 2 * kGiB + kBackstopSlack),
            2 * kGiB + kBackstopSlack);
  // A root over the last backstop (its write failed): held at its use, never below it.
  EXPECT_EQ(memory_backstop(512 * kMiB, reserve, 3 * kGiB, 2 * kGiB), 3 * kGiB + kBackstopSlack);
  // As the root's use falls (memory.high reclaims its cache), it follows down to the target.
  EXPECT_EQ(memory_backstop(512 * kMiB, reserve, 1 * kGiB, 2 * kGiB + kBackstopSlack), 1 * kGiB + kBackstopSlack);
  EXPECT_EQ(memory_backstop(512 * kMiB, reserve, 100 * kMiB, 1 * kGiB + kBackstopSlack), 640 * kMiB);
  EXPECT_EQ(memory_backstop(1 * kGiB + 1, 0, 0, std::nullopt), 1 * kGiB + kMiB) << "rounded up to MiB";
}

TEST(MemoryLever, TheBackstopOnYarnRootsOnlyOnV2) {
  Config c = default_config();
  LeverInput in;
  TargetCandidates tc;
  tc.yarn_roots = {"/hadoop-yarn"};
  tc.besteffort_qos = {"/kubepods.slice/kubepods-besteffort.slice"};
  in.targets = select_targets(tc, c.offline);
  for (auto& t : in.targets) t.memory_known = true;
  in.memory_budget = 2 * kGiB;
  in.memory_backstops = {{"/hadoop-yarn", 1200 * kMiB}, {"/kubepods.slice/kubepods-besteffort.slice", kGiB}};
  auto backstops = [&] {
    std::vector<std::pair<std::string, MemoryMax>> out;
    for (const auto& s : lever_writes(in, c))
      if (const auto* m = std::get_if<MemoryMax>(&s.value)) {
        out.emplace_back(s.cgroup, *m);
        EXPECT_EQ(s.lever, Lever::Backstop);
      }
    return out;
  };
  EXPECT_TRUE(backstops().empty()) << "a hybrid host's v1 limit is hard already";
  in.memory_v2 = true;
  auto w = backstops();
  ASSERT_EQ(w.size(), 1u) << "never on the BestEffort QoS cgroup, the kubelet's";
  EXPECT_EQ(w[0].first, "/hadoop-yarn");
  EXPECT_EQ(w[0].second.bytes, 1200 * kMiB);
  c.memory.backstop = false;
  EXPECT_TRUE(backstops().empty());
  c.memory.backstop = true;
  in.memory_budget.reset();
  EXPECT_TRUE(backstops().empty()) << "no budget, no backstop";
}

TEST(MemoryLever, SignalsSumTheParentsAndSkipMissingOnes) {
  TempDir t;
  t.write("proc/meminfo", "MemTotal: 4194304 kB\nMemAvailable: 2097152 kB\n");
  t.write("root/hadoop-yarn/memory.current", "1073741824\n");
  t.write("root/hadoop-yarn/memory.stat", "inactive_file 0\n");
  t.write("root/hadoop-yarn/memory.max", "max\n");
  const auto r = real_node_reads({"", "", (t.path / "root").string(), false, "", (t.path / "proc").string()});
  auto s = offline_memory(TickSnapshot(*r, 5), "", {"/hadoop-yarn", "/batch"});
  EXPECT_EQ(s.used, (std::map<std::string, uint64_t>{{"/hadoop-yarn", 1 * kGiB}})) << "/batch is not there";
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].what, "offline /batch");
  EXPECT_EQ(s.input.offline_used, 1 * kGiB);
  EXPECT_EQ(s.input.capacity, 4 * kGiB);
  EXPECT_EQ(s.input.node_used, 2 * kGiB);
  EXPECT_EQ(s.input.now_ns, 5u);
}

TEST(MemoryLever, RenderedAsTheKernelKeepsIt) {
  const uint64_t page = static_cast<uint64_t>(::getpagesize());
  auto v2 = render(CgroupBackend::V2, {"/y", MemoryLimit{1 * kGiB + 100}}, {});
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(v2->file, CgroupFile::MemoryHigh);
  EXPECT_EQ(v2->value, std::to_string((kGiB + 100) / page * page));
  auto v1 = render(CgroupBackend::V1Hybrid, {"/y", MemoryLimit{1 * kGiB}}, {});
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(v1->file, CgroupFile::V1MemoryLimit);
  EXPECT_EQ(v1->value, std::to_string(kGiB));
  EXPECT_EQ(render(CgroupBackend::V2, {"/y", MemoryLimit{}}, {})->value, "max");
  EXPECT_EQ(render(CgroupBackend::V1Hybrid, {"/y", MemoryLimit{}}, {})->value, "-1");
  EXPECT_FALSE(render(CgroupBackend::V2, {"/y", MemoryLimit{100}}, {}).ok()) << "under a page";
  EXPECT_EQ(hierarchy_of(CgroupFile::V1MemoryLimit), Hierarchy::MemoryV1);
  EXPECT_EQ(kernel_files(CgroupFile::V1MemoryLimit), std::vector<std::string>{"memory.limit_in_bytes"});

  EXPECT_TRUE(validate_cgroup_value(CgroupFile::MemoryHigh, "max", {}).ok());
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::MemoryHigh, "1073741824", {}).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::MemoryHigh, "-1", {}).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::MemoryHigh, "1G", {}).ok());
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::V1MemoryLimit, "-1", {}).ok());
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::V1MemoryLimit, "9223372036854771712", {}).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::V1MemoryLimit, "max", {}).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::V1MemoryLimit, "0", {}).ok());
  EXPECT_EQ(normalize_cgroup_value(CgroupFile::V1MemoryLimit, "9223372036854771712\n"), "-1");
  EXPECT_EQ(normalize_cgroup_value(CgroupFile::V1MemoryLimit, "1073741824"), "1073741824");
}

TEST(MemoryConfig, ParsedCheckedAndPrintedBack) {
  auto c = load_config_text(R"(
memory:
  enabled: false
  node_cgroup: /khagent-bench-node
  reserve: 300Mi
  reserve_share: 0.1
  min_offline: 128Mi
  grow_per_second: 1Gi
  deadband: 4Mi
)",
                            "test", {});
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_FALSE(c->memory.enabled);
  EXPECT_EQ(c->memory.node_cgroup, "/khagent-bench-node");
  EXPECT_EQ(c->memory.reserve_bytes, 300 * kMiB);
  EXPECT_DOUBLE_EQ(c->memory.reserve_share, 0.1);
  EXPECT_EQ(c->memory.min_offline_bytes, 128 * kMiB);
  EXPECT_EQ(c->memory.grow_per_second_bytes, kGiB);
  EXPECT_EQ(c->memory.deadband_bytes, 4 * kMiB);
  auto back = load_config_text(config_to_yaml(*c), "printed", {});
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->memory.reserve_bytes, 300 * kMiB);
  EXPECT_EQ(back->memory.node_cgroup, "/khagent-bench-node");

  for (const char* bad : {"memory: {reserve: 1.5Gi}", "memory: {reserve_share: 0.95}", "memory: {min_offline: 1Ki}",
                          "memory: {grow_per_second: 0}", "memory: {node_cgroup: ../x}", "memory: {reserve: [1]}",
                          "memory: {stall_window: 100ms}", "memory: {stall_window: 11s}", "memory: {limit: 1Gi}"}) {
    auto r = load_config_text(bad, "test", {});
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find("memory"), std::string::npos) << r.error().message;
    }
  }
}

TEST(MemoryStall, OnlineCgroupsPsiBetweenTwoReadings) {
  TempDir t;
  auto psi = [&](const std::string& cg, uint64_t some, uint64_t full) {
    t.write("unified" + cg + "/memory.pressure",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=" + std::to_string(some) +
                "\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=" + std::to_string(full) + "\n");
  };
  psi("/pod-a", 1000, 500);
  psi("/pod-b", 0, 0);
  const auto r = real_node_reads({(t.path / "unified").string(), "", "", false, "", "/proc"});
  auto at = [&](uint64_t ns) { return TickSnapshot(*r, ns); };
  MemoryStallMeter meter;
  auto s = meter.step(at(kS), {"/pod-a", "/pod-b", "/gone"});
  EXPECT_EQ(s.some_us, 0u) << "the first reading only starts the count";
  EXPECT_EQ(s.unreadable, 1u);
  psi("/pod-a", 1000 + 50'000, 500 + 20'000);  // 50 ms of 200
  psi("/pod-b", 10'000, 0);                    // 10 ms
  s = meter.step(at(kS + kS / 5), {"/pod-a", "/pod-b"});
  EXPECT_EQ(s.some_us, 60'000u);
  EXPECT_EQ(s.full_us, 20'000u);
  EXPECT_DOUBLE_EQ(s.max_share, 0.25);
  EXPECT_EQ(s.worst, "/pod-a");
  ASSERT_EQ(s.shares.size(), 2u) << "every stalled cgroup, the most stalled first";
  EXPECT_EQ(s.shares[0].first, "/pod-a");
  EXPECT_EQ(s.shares[1].first, "/pod-b");
  EXPECT_DOUBLE_EQ(s.shares[1].second, 0.05);
  // A cgroup that left and came back starts again.
  s = meter.step(at(kS + 2 * kS / 5), {"/pod-b"});
  psi("/pod-a", 900'000, 0);
  s = meter.step(at(kS + 3 * kS / 5), {"/pod-a", "/pod-b"});
  EXPECT_EQ(s.some_us, 0u);
}

TEST(MemoryBudget, AnOnlineStallCutsOfflineBelowWhatItHolds) {
  MemoryConfig c = cfg();  // stall limit 5%, cut 10%
  MemoryState st;
  // A roomy node (1 GiB free, the reserve 256 MiB): a pod stalling against
  // its own limit is not offline's doing.
  MemoryInput in{3 * kGiB, 2 * kGiB, 1 * kGiB, kS, 0.3, {}};
  auto d = memory_step(in, c, st);
  EXPECT_EQ(d.budget, 3 * kGiB - 256 * kMiB - 1 * kGiB);
  EXPECT_FALSE(d.stalled);
  // A node short of memory (256 MiB free, under twice the reserve).
  st = {};
  in = {3 * kGiB, 2816 * kMiB, 1 * kGiB, kS, 0, {}};
  d = memory_step(in, c, st);
  EXPECT_EQ(d.budget, 3 * kGiB - 256 * kMiB - 1792 * kMiB);
  EXPECT_FALSE(d.stalled);
  in.now_ns += kS / 5;
  in.online_stall_share = 0.04;
  d = memory_step(in, c, st);
  EXPECT_FALSE(d.changed) << "under the stall limit";
  in.now_ns += kS / 5;
  in.online_stall_share = 0.3;
  d = memory_step(in, c, st);
  EXPECT_TRUE(d.changed);
  EXPECT_TRUE(d.stalled);
  EXPECT_EQ(d.budget, 921 * kMiB) << "90% of the 1 GiB offline holds, in whole MiB";
  EXPECT_NE(d.reason.find("stalled on memory 30%"), std::string::npos) << d.reason;
  // At most one cut a second.
  in.now_ns += kS / 5;
  in.offline_used = 921 * kMiB;  // the kernel took the 103 MiB from offline
  in.node_used -= 103 * kMiB;
  d = memory_step(in, c, st);
  EXPECT_EQ(d.budget, 921 * kMiB);
  EXPECT_FALSE(d.stalled);
  // The stall gone, the budget grows back slowly.
  in.now_ns += kS;
  in.online_stall_share = 0;
  d = memory_step(in, c, st);
  EXPECT_LE(d.budget, 921 * kMiB + 77 * kMiB) << "1.2 s at 64 MiB/s since the cut";
  EXPECT_GT(d.budget, 921 * kMiB);
}

TEST(MemoryBudget, APsiTriggerBetweenTicksCutsLikeAStalledTick) {
  MemoryConfig c = cfg();  // stall limit 5% of a 1 s window, cut 10%
  MemoryState st;
  // A node short of memory (256 MiB free).
  MemoryInput in{3 * kGiB, 2816 * kMiB, 1 * kGiB, kS, 0, {}};
  auto d = memory_step(in, c, st);
  EXPECT_FALSE(d.stalled);
  in.now_ns += kS / 3;
  in.stall_trigger = "/kubepods/burstable/pod-a";
  d = memory_step(in, c, st);
  EXPECT_TRUE(d.changed);
  EXPECT_TRUE(d.stalled) << "the trigger says the stall; no share is read between ticks";
  EXPECT_EQ(d.budget, 921 * kMiB);
  EXPECT_NE(d.reason.find("PSI trigger fired: online /kubepods/burstable/pod-a stalled on memory past its threshold"),
            std::string::npos)
      << d.reason;
  // A trigger on a roomy node is a pod against its own limit: no cut.
  st = {};
  in = {3 * kGiB, 2 * kGiB, 1 * kGiB, kS, 0, "/kubepods/burstable/pod-a"};
  d = memory_step(in, c, st);
  EXPECT_FALSE(d.stalled);
  EXPECT_EQ(d.budget, 3 * kGiB - 256 * kMiB - 1 * kGiB);
}

// Online tasks that reclaimed for the node (the page allocator ran short)
// show the node short whatever the working sets say: a stall then cuts on a
// node the arithmetic calls roomy. Reclaim at a cgroup limit does not (it
// may be the pod's own limit).
TEST(MemoryBudget, OnlineReclaimForTheNodeCutsOnARoomyNode) {
  MemoryConfig c;
  MemoryState st;
  MemoryInput in{3 * kGiB, 2 * kGiB, 1 * kGiB, kS, 0.3, {}};
  in.online_memcg_reclaim_ns = 200'000'000;
  auto d = memory_step(in, c, st);
  EXPECT_FALSE(d.stalled) << "reclaim at a cgroup limit on a roomy node: " << d.reason;
  st = {};
  in.interval_ns = kS;
  in.online_node_reclaim_ns = 49'000'000;  // under 5% of the interval: a moment of it
  d = memory_step(in, c, st);
  EXPECT_FALSE(d.stalled) << d.reason;
  st = {};
  in.online_node_reclaim_ns = 50'000'000;
  d = memory_step(in, c, st);
  EXPECT_TRUE(d.stalled) << d.reason;
  EXPECT_EQ(d.budget, 921 * kMiB) << "90% of the 1 GiB offline holds";
  EXPECT_NE(d.reason.find("online paid 250.0 ms in direct reclaim: 50.0 ms for the node, 200.0 ms at cgroup limits"),
            std::string::npos)
      << d.reason;
  // No stall, no cut, however much reclaim.
  st = {};
  in.online_stall_share = 0;
  d = memory_step(in, c, st);
  EXPECT_FALSE(d.stalled);
}

// A node full by use, page cache included, where the working sets leave
// room: a stalled pod not at its own limit stalls at the node's (offline's
// cache was not free fast enough), and offline is cut; a pod at its own
// limit is not helped by it.
TEST(MemoryBudget, AStallInANodeFullOfCacheCutsUnlessThePodIsAtItsOwnLimit) {
  MemoryConfig c = cfg();  // reserve 256 MiB, stall limit 5%, cut 10%
  MemoryState st;
  // 3 GiB node, working sets 2 GiB (roomy), in use 2.9 GiB with the cache.
  MemoryInput in{3 * kGiB, 2 * kGiB, 1 * kGiB, kS, 0.3, {}};
  in.node_usage = 2970 * kMiB;
  in.stall_own_limit = "/pod-a: 500 MiB of 512 MiB";
  auto d = memory_step(in, c, st);
  EXPECT_FALSE(d.stalled) << "the pod's own limit: " << d.reason;
  st = {};
  in.stall_own_limit.reset();
  in.node_usage = 2 * kGiB + 512 * kMiB;  // 512 MiB unused: twice the reserve
  d = memory_step(in, c, st);
  EXPECT_FALSE(d.stalled) << "room left even counting the cache: " << d.reason;
  st = {};
  in.node_usage = 2970 * kMiB;
  d = memory_step(in, c, st);
  EXPECT_TRUE(d.stalled) << d.reason;
  EXPECT_EQ(d.budget, 921 * kMiB) << "90% of the 1 GiB offline holds";
  EXPECT_NE(d.reason.find("the node is full: 102 MiB unused of 3072 MiB"), std::string::npos) << d.reason;
  // Offline's page cache known: the cut is 10% of all it holds, not of its
  // working set (a streamer's cache is nearly all inactive).
  st = {};
  in.offline_usage = 1400 * kMiB;
  d = memory_step(in, c, st);
  EXPECT_EQ(d.budget, 1260 * kMiB);
  EXPECT_NE(d.reason.find("offline held 1400 MiB (working set 1024 MiB), cut by 10% to 1260 MiB"), std::string::npos)
      << d.reason;
  // A second cut a second later, smaller than the deadband: made all the same.
  in.now_ns += kS;
  in.offline_usage = 1390 * kMiB;
  d = memory_step(in, c, st);
  EXPECT_TRUE(d.changed && d.stalled) << d.reason;
  EXPECT_EQ(d.budget, 1251 * kMiB);
  in.offline_usage = 0;
  // Offline holding more than its budget (at the min_offline floor): the
  // stall cut never raises the budget.
  {
    MemoryState held_st;
    MemoryInput h = in;
    h.stall_own_limit.reset();
    h.online_stall_share = 0;
    memory_step(h, c, held_st);  // the first budget: the ceiling
    held_st.budget = 500 * kMiB;
    h.now_ns += kS;
    h.online_stall_share = 0.3;
    h.offline_usage = 1000 * kMiB;  // 900 MiB after the cut: above the 500 in force
    auto hd = memory_step(h, c, held_st);
    EXPECT_FALSE(hd.stalled) << hd.reason;
    EXPECT_LE(hd.budget, 500 * kMiB) << hd.reason;
  }
  // Unknown use (a reader that has none): the working sets decide, as before.
  st = {};
  in.node_usage = 0;
  EXPECT_FALSE(memory_step(in, c, st).stalled);
  // The same through a PSI trigger between ticks.
  st = {};
  in = {3 * kGiB, 2 * kGiB, 1 * kGiB, kS, 0, "/pod-a"};
  in.node_usage = 2970 * kMiB;
  d = memory_step(in, c, st);
  EXPECT_TRUE(d.stalled) << d.reason;
  EXPECT_NE(d.reason.find("PSI trigger fired"), std::string::npos) << d.reason;
}

TEST(OomOrder, RaisesOfflineProcessesOnceAndPutsThemBack) {
  TempDir t;
  auto proc = [&](int pid, int adj, uint64_t start) {
    t.write("proc/" + std::to_string(pid) + "/oom_score_adj", std::to_string(adj) + "\n");
    std::string stat = std::to_string(pid) + " (java) S";
    for (int f = 4; f <= 21; f++) stat += " 0";
    t.write("proc/" + std::to_string(pid) + "/stat", stat + " " + std::to_string(start) + " 0 0\n");
  };
  auto adj_of = [&](int pid) {
    std::ifstream f(t.path / "proc" / std::to_string(pid) / "oom_score_adj");
    int v = -9999;
    f >> v;
    return v;
  };
  t.write("cg/hadoop-yarn/cgroup.procs", "");
  t.write("cg/hadoop-yarn/container_1/cgroup.procs", "101\n102\n");
  t.write("cg/hadoop-yarn/container_2/cgroup.procs", "103\n");
  t.write("cg/online/cgroup.procs", "201\n");
  proc(101, 0, 5000);
  proc(102, 1000, 5001);  // already first: left alone
  proc(103, -500, 5002);
  proc(201, 958, 6000);
  OomOrder o((t.path / "cg").string(), (t.path / "proc").string());
  auto changed = o.raise({"/hadoop-yarn"}, 1000);
  ASSERT_EQ(changed.size(), 2u);
  EXPECT_EQ(changed[0].pid, 101);
  EXPECT_EQ(changed[0].cgroup, "/hadoop-yarn/container_1");
  EXPECT_EQ(changed[1].from, -500);
  EXPECT_EQ(adj_of(101), 1000);
  EXPECT_EQ(adj_of(103), 1000);
  EXPECT_EQ(adj_of(201), 958) << "online is never touched";
  EXPECT_TRUE(o.raise({"/hadoop-yarn"}, 1000).empty()) << "each process once";
  // 103's pid is reused by another process in the same cgroup: not restored.
  proc(103, 1000, 9999);
  // 101 is missing from one walk (its container moved): still remembered.
  t.write("cg/hadoop-yarn/container_1/cgroup.procs", "102\n");
  EXPECT_TRUE(o.raise({"/hadoop-yarn"}, 1000).empty());
  EXPECT_EQ(o.raised(), 2u);
  // A process gone from /proc is forgotten.
  proc(104, 0, 7000);
  t.write("cg/hadoop-yarn/container_2/cgroup.procs", "103\n104\n");
  ASSERT_EQ(o.raise({"/hadoop-yarn"}, 1000).size(), 1u);
  std::filesystem::remove_all(t.path / "proc/104");
  t.write("cg/hadoop-yarn/container_2/cgroup.procs", "103\n");
  o.raise({"/hadoop-yarn"}, 1000);
  EXPECT_EQ(o.raised(), 2u) << "104 forgotten, 101 and 103 kept";
  auto back = o.restore();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].pid, 101);
  EXPECT_EQ(adj_of(101), 0);
  EXPECT_EQ(adj_of(103), 1000) << "the pid is another process now";
}
