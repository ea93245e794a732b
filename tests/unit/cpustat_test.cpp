#include <gtest/gtest.h>

#include "khagent/collect/cpustat.h"
#include "test_util.h"

using namespace khagent;

TEST(CpuStat, ParsesFlatKeyed) {
  auto kv = parse_flat_keyed("usage_usec 100\nnr_periods 5\nnr_throttled 3\nthrottled_usec 42\nbad\nx y\n");
  EXPECT_EQ(kv.at("usage_usec"), 100u);
  EXPECT_EQ(kv.at("nr_throttled"), 3u);
  EXPECT_EQ(kv.at("throttled_usec"), 42u);
  EXPECT_EQ(kv.count("bad"), 0u);
  EXPECT_EQ(kv.count("x"), 0u);
}

TEST(CpuStat, FindsV1CpuPath) {
  EXPECT_EQ(v1_cpu_path("12:pids:/a\n4:cpu,cpuacct:/kubepods/pod1\n0::/x\n"), "/kubepods/pod1");
  EXPECT_EQ(v1_cpu_path("3:cpu:/grp\n"), "/grp");
  EXPECT_FALSE(v1_cpu_path("5:cpuset:/a\n6:cpuacct:/b\n0::/x\n").has_value());
}

TEST(CpuStat, ReadsV2CpuStat) {
  TempDir t;
  t.write("v2/pod/cpu.stat", "usage_usec 10\nnr_periods 9\nnr_throttled 4\nthrottled_usec 1500\n");
  CpuStatThrottleReader r((t.path / "v2").string(), "", (t.path / "proc").string());
  auto c = r.read(1, "/pod");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->events, 4u);
  EXPECT_EQ(c->throttled_ns, 1500000u);
}

TEST(CpuStat, FallsBackToV1ThroughATask) {
  TempDir t;
  // v2 cpu.stat without the cpu controller: no throttling keys.
  t.write("v2/job/cpu.stat", "usage_usec 10\n");
  t.write("v2/job/cgroup.procs", "999\n123\n");
  t.write("proc/123/cgroup", "4:cpu,cpuacct:/limited\n0::/job\n");
  t.write("v1/limited/cpu.stat", "nr_periods 10\nnr_throttled 7\nthrottled_time 123456789\n");
  CpuStatThrottleReader r((t.path / "v2").string(), (t.path / "v1").string(), (t.path / "proc").string());
  auto c = r.read(2, "/job");  // pid 999 has no /proc entry: the next one is used
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->events, 7u);
  EXPECT_EQ(c->throttled_ns, 123456789u);
}

TEST(CpuStat, NothingToReadIsNullopt) {
  TempDir t;
  t.write("v2/empty/cgroup.procs", "");
  CpuStatThrottleReader r((t.path / "v2").string(), (t.path / "v1").string(), (t.path / "proc").string());
  EXPECT_FALSE(r.read(3, "/empty").has_value());
  EXPECT_FALSE(r.read(4, "/missing").has_value());
}

TEST(CpuStat, SharedV1FileIsReadOncePerRound) {
  TempDir t;
  t.write("v2/cgroup.controllers", "memory pids\n");
  for (const char* cg : {"a", "b"}) {
    t.write(std::string("v2/") + cg + "/cgroup.procs", "7\n");
  }
  t.write("proc/7/cgroup", "4:cpu,cpuacct:/shared\n");
  t.write("v1/shared/cpu.stat", "nr_throttled 1\nthrottled_time 10\n");
  CpuStatThrottleReader r((t.path / "v2").string(), (t.path / "v1").string(), (t.path / "proc").string());
  r.new_round();
  EXPECT_EQ(r.read(5, "/a")->events, 1u);
  t.write("v1/shared/cpu.stat", "nr_throttled 2\nthrottled_time 20\n");
  EXPECT_EQ(r.read(6, "/b")->events, 1u);  // same round: the value read for /a
  r.new_round();
  EXPECT_EQ(r.read(6, "/b")->events, 2u);
}

TEST(CpuStat, HybridHostSkipsV2CpuStat) {
  TempDir t;
  // No cpu controller on v2: a v2 cpu.stat (made up here) is not consulted.
  t.write("v2/cgroup.controllers", "memory\n");
  t.write("v2/job/cpu.stat", "nr_throttled 99\nthrottled_usec 99\n");
  t.write("v2/job/cgroup.procs", "8\n");
  t.write("proc/8/cgroup", "3:cpu:/lim\n");
  t.write("v1/lim/cpu.stat", "nr_throttled 5\nthrottled_time 50\n");
  CpuStatThrottleReader r((t.path / "v2").string(), (t.path / "v1").string(), (t.path / "proc").string());
  EXPECT_EQ(r.read(2, "/job")->events, 5u);
}

// A pod's (or QoS root's) cgroup has no task of its own: on a hybrid host
// its v1 cpu cgroup is found through a container below it with a task,
// where both hierarchies have the same shape below the pod.
TEST(CpuStat, ATasklessCgroupMapsToV1ThroughADescendant) {
  TempDir t;
  t.write("v2/cgroup.controllers", "cpuset memory pids\n");
  t.write("v2/kubepods/pod1/cgroup.procs", "");
  t.write("v2/kubepods/pod1/c0/cgroup.procs", "");  // a container with no task: skipped
  t.write("v2/kubepods/pod1/c1/cgroup.procs", "42\n");
  t.write("proc/42/cgroup", "5:cpu,cpuacct:/k8s/kubepods/pod1/c1\n0::/kubepods/pod1/c1\n");
  t.write("v1/k8s/kubepods/pod1/cpu.stat", "nr_periods 10\nnr_throttled 4\nthrottled_time 123456\n");
  CpuStatThrottleReader r((t.path / "v2").string(), (t.path / "v1").string(), (t.path / "proc").string());
  auto pod = r.read(7, "/kubepods/pod1");
  ASSERT_TRUE(pod.has_value());
  EXPECT_EQ(pod->events, 4u);
  EXPECT_EQ(pod->throttled_ns, 123456u);

  // Shaped differently below it: no guess.
  t.write("v2/other/cgroup.procs", "");
  t.write("v2/other/x/cgroup.procs", "43\n");
  t.write("proc/43/cgroup", "5:cpu,cpuacct:/elsewhere/y\n");
  t.write("v1/elsewhere/cpu.stat", "nr_periods 10\nnr_throttled 4\nthrottled_time 1\n");
  EXPECT_FALSE(r.read(8, "/other").has_value());
}

// A pod's quota, as the kubelet wrote it: v2 cpu.max, or the v1 pair at the
// same path on a hybrid host.
TEST(CpuQuotaRead, V2CpuMaxOrTheV1PairAtTheSamePath) {
  EXPECT_EQ(parse_cpu_max("20000 100000\n"), (CpuQuota{20000, 100000}));
  EXPECT_EQ(parse_cpu_max("max 100000\n"), (CpuQuota{std::nullopt, 100000}));
  EXPECT_FALSE(parse_cpu_max("20000").has_value());
  EXPECT_FALSE(parse_cpu_max("x 100000").has_value());
  EXPECT_FALSE(parse_cpu_max("1 0").has_value());
  EXPECT_EQ(parse_v1_cfs("-1\n", "100000\n"), (CpuQuota{std::nullopt, 100000}));
  EXPECT_EQ(parse_v1_cfs("50000\n", "100000\n"), (CpuQuota{50000, 100000}));
  EXPECT_FALSE(parse_v1_cfs("", "100000").has_value());

  TempDir t;
  t.write("v2/a/cpu.max", "30000 100000\n");
  t.write("v2/b/cgroup.procs", "");  // v2 without the cpu controller: no cpu.max
  t.write("v1/b/cpu.cfs_quota_us", "20000\n");
  t.write("v1/b/cpu.cfs_period_us", "100000\n");
  const std::string v2 = (t.path / "v2").string(), v1 = (t.path / "v1").string();
  EXPECT_EQ(read_cpu_quota(v2, v1, "/a"), (CpuQuota{30000, 100000}));
  EXPECT_EQ(read_cpu_quota(v2, v1, "/b"), (CpuQuota{20000, 100000}));
  EXPECT_FALSE(read_cpu_quota(v2, "", "/b").has_value()) << "pure v2 without cpu.max";
  EXPECT_FALSE(read_cpu_quota(v2, v1, "/missing").has_value());
}

TEST(CpuQuotaRead, BurstFromWhereTheQuotaIs) {
  TempDir t;
  t.write("v2/a/cpu.max", "30000 100000\n");
  t.write("v2/a/cpu.max.burst", "15000\n");
  t.write("v2/old/cpu.max", "30000 100000\n");  // a kernel before 5.14: no burst file
  t.write("v2/b/cgroup.procs", "");
  t.write("v1/b/cpu.cfs_burst_us", "0\n");
  const std::string v2 = (t.path / "v2").string(), v1 = (t.path / "v1").string();
  EXPECT_EQ(read_cpu_burst(v2, v1, "/a"), 15000u);
  EXPECT_EQ(read_cpu_burst(v2, v1, "/b"), 0u);
  EXPECT_FALSE(read_cpu_burst(v2, v1, "/old").has_value());
  EXPECT_FALSE(read_cpu_burst(v2, "", "/b").has_value());
}
