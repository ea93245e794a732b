#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "khagent/collect/topology.h"
#include "test_util.h"

using namespace khagent;

namespace {

// One CPU's sysfs topology attributes under <root>/cpu.
void add_cpu(const TempDir& t, int id, int core, int package) {
  const std::string dir = "cpu/cpu" + std::to_string(id) + "/topology/";
  t.write(dir + "core_id", std::to_string(core) + "\n");
  t.write(dir + "physical_package_id", std::to_string(package) + "\n");
}

std::string cpu_dir(const TempDir& t) { return (t.path / "cpu").string(); }
std::string node_dir(const TempDir& t) { return (t.path / "node").string(); }

// CPU id -> core, and the set of distinct cores.
std::map<int, int> cores_of(const Topology& topo) {
  std::map<int, int> m;
  for (const auto& c : topo.cpus) m[c.id] = c.core;
  return m;
}

std::map<int, int> nodes_of(const Topology& topo) {
  std::map<int, int> m;
  for (const auto& c : topo.cpus) m[c.id] = c.node;
  return m;
}

}  // namespace

TEST(Topology, SmtSiblingsShareACore) {
  // Real x86 numbering: CPUs 0-3 are the first threads of cores 0-3, 4-7 the
  // second threads. No node directory: everything on node 0.
  TempDir t;
  t.write("cpu/online", "0-7\n");
  for (int cpu = 0; cpu < 8; cpu++) add_cpu(t, cpu, cpu % 4, 0);
  auto topo = read_topology(cpu_dir(t), node_dir(t));
  ASSERT_TRUE(topo.ok()) << topo.error().str();
  ASSERT_EQ(topo->cpus.size(), 8u);
  for (size_t i = 0; i < 8; i++) EXPECT_EQ(topo->cpus[i].id, static_cast<int>(i));
  auto core = cores_of(*topo);
  for (int cpu = 0; cpu < 4; cpu++) {
    EXPECT_EQ(core[cpu], core[cpu + 4]) << "cpu" << cpu;
    for (int other = 0; other < 4; other++) {
      if (other != cpu) {
        EXPECT_NE(core[cpu], core[other]);
      }
    }
  }
  EXPECT_EQ(topo->threads_per_core(), 2);
  for (const auto& c : topo->cpus) EXPECT_EQ(c.node, 0);
  EXPECT_EQ(format_cpu_list(topo->all()), "0-7");
}

TEST(Topology, SmtOffIsOneThreadPerCore) {
  TempDir t;
  t.write("cpu/online", "0-3");
  for (int cpu = 0; cpu < 4; cpu++) add_cpu(t, cpu, cpu, 0);
  auto topo = read_topology(cpu_dir(t), node_dir(t));
  ASSERT_TRUE(topo.ok()) << topo.error().str();
  ASSERT_EQ(topo->cpus.size(), 4u);
  EXPECT_EQ(topo->threads_per_core(), 1);
  auto core = cores_of(*topo);
  EXPECT_EQ(core.size(), 4u);
  EXPECT_EQ(std::set<int>({core[0], core[1], core[2], core[3]}).size(), 4u);
}

TEST(Topology, TwoPackagesTwoNumaNodes) {
  // Two sockets, one NUMA node each, SMT on. core_id restarts at 0 in each
  // package, so the package must make cores unique. Node lists interleave
  // the way x86 numbers them: first threads 0-3, second threads 4-7.
  TempDir t;
  t.write("cpu/online", "0-7\n");
  for (int cpu : {0, 1, 4, 5}) add_cpu(t, cpu, cpu % 2, 0);
  for (int cpu : {2, 3, 6, 7}) add_cpu(t, cpu, cpu % 2, 1);
  t.write("node/node0/cpulist", "0-1,4-5\n");
  t.write("node/node1/cpulist", "2-3,6-7\n");
  // Other node directory entries are not nodes.
  t.write("node/online", "0-1\n");
  t.write("node/possible", "0-3\n");
  t.write("node/has_cpu", "0-1\n");
  t.write("node/power/uevent", "");
  auto topo = read_topology(cpu_dir(t), node_dir(t));
  ASSERT_TRUE(topo.ok()) << topo.error().str();
  ASSERT_EQ(topo->cpus.size(), 8u);

  auto core = cores_of(*topo);
  EXPECT_EQ(core[0], core[4]);
  EXPECT_EQ(core[2], core[6]);
  EXPECT_NE(core[0], core[2]);  // same core_id, different package
  EXPECT_NE(core[1], core[3]);
  std::set<int> distinct;
  for (auto [cpu, c] : core) distinct.insert(c);
  EXPECT_EQ(distinct.size(), 4u);
  EXPECT_EQ(topo->threads_per_core(), 2);

  auto node = nodes_of(*topo);
  for (int cpu : {0, 1, 4, 5}) EXPECT_EQ(node[cpu], 0) << "cpu" << cpu;
  for (int cpu : {2, 3, 6, 7}) EXPECT_EQ(node[cpu], 1) << "cpu" << cpu;
}

TEST(Topology, MissingNodeDirectoryIsNodeZero) {
  TempDir t;
  t.write("cpu/online", "0-1");
  add_cpu(t, 0, 0, 0);
  add_cpu(t, 1, 1, 0);
  auto topo = read_topology(cpu_dir(t), (t.path / "no-such-dir").string());
  ASSERT_TRUE(topo.ok()) << topo.error().str();
  ASSERT_EQ(topo->cpus.size(), 2u);
  for (const auto& c : topo->cpus) EXPECT_EQ(c.node, 0);
}

TEST(Topology, OfflineCpusAreLeftOut) {
  // CPU 3 is offline: it keeps its cpu3 directory but has no topology, and
  // is not in `online`. Its sibling 7 is still online, alone on its core.
  TempDir t;
  t.write("cpu/online", "0-2,4-7\n");
  for (int cpu = 0; cpu < 8; cpu++) {
    if (cpu != 3) add_cpu(t, cpu, cpu % 4, 0);
  }
  t.write("cpu/cpu3/online", "0\n");
  t.write("node/node0/cpulist", "0-2,4-7\n");
  auto topo = read_topology(cpu_dir(t), node_dir(t));
  ASSERT_TRUE(topo.ok()) << topo.error().str();
  EXPECT_EQ(format_cpu_list(topo->all()), "0-2,4-7");
  EXPECT_EQ(topo->threads_per_core(), 2);
  auto core = cores_of(*topo);
  EXPECT_EQ(core.count(3), 0u);
  EXPECT_EQ(core[2], core[6]);
  for (int cpu = 0; cpu < 7; cpu++) {
    if (cpu != 3) {
      EXPECT_NE(core[7], core[cpu]) << "cpu" << cpu;
    }
  }
}

TEST(Topology, PackageMinusOneIsOnePackage) {
  // Older arm64 kernels report physical_package_id -1.
  TempDir t;
  t.write("cpu/online", "0-1");
  add_cpu(t, 0, 0, -1);
  add_cpu(t, 1, 1, -1);
  auto topo = read_topology(cpu_dir(t), node_dir(t));
  ASSERT_TRUE(topo.ok()) << topo.error().str();
  EXPECT_NE(topo->cpus[0].core, topo->cpus[1].core);
}

TEST(Topology, ErrorsNameWhatIsWrong) {
  {
    TempDir t;  // no online file
    auto topo = read_topology(cpu_dir(t), node_dir(t));
    ASSERT_FALSE(topo.ok());
    EXPECT_EQ(topo.error().err, ENOENT);
    EXPECT_NE(topo.error().message.find("online"), std::string::npos) << topo.error().str();
  }
  {
    TempDir t;
    t.write("cpu/online", "0-x\n");
    auto topo = read_topology(cpu_dir(t), node_dir(t));
    ASSERT_FALSE(topo.ok());
    EXPECT_EQ(topo.error().err, EINVAL);
  }
  {
    TempDir t;  // an online CPU without topology
    t.write("cpu/online", "0-1");
    add_cpu(t, 0, 0, 0);
    auto topo = read_topology(cpu_dir(t), node_dir(t));
    ASSERT_FALSE(topo.ok());
    EXPECT_NE(topo.error().message.find("cpu1/topology/core_id"), std::string::npos) << topo.error().str();
  }
  {
    TempDir t;
    t.write("cpu/online", "0");
    t.write("cpu/cpu0/topology/core_id", "zero\n");
    t.write("cpu/cpu0/topology/physical_package_id", "0\n");
    auto topo = read_topology(cpu_dir(t), node_dir(t));
    ASSERT_FALSE(topo.ok());
    EXPECT_EQ(topo.error().err, EINVAL);
    EXPECT_NE(topo.error().message.find("zero"), std::string::npos) << topo.error().str();
  }
  {
    TempDir t;
    t.write("cpu/online", "0");
    add_cpu(t, 0, 0, 0);
    t.write("node/node0/cpulist", "3-1\n");
    auto topo = read_topology(cpu_dir(t), node_dir(t));
    ASSERT_FALSE(topo.ok());
    EXPECT_NE(topo.error().message.find("node0/cpulist"), std::string::npos) << topo.error().str();
  }
}

TEST(CpuManagerState, ParsesStaticWithEntries) {
  auto st = parse_cpu_manager_state(R"({
    "policyName": "static",
    "defaultCpuSet": "0,5-7",
    "entries": {
      "6b3c1a2e-pod-a": {"app": "1-2", "sidecar": "3"},
      "9f00d1c4-pod-b": {"db": "4"}
    },
    "checksum": 1234567890
  })");
  ASSERT_TRUE(st.ok()) << st.error().str();
  EXPECT_EQ(st->policy, "static");
  EXPECT_EQ(format_cpu_list(st->default_set), "0,5-7");
  EXPECT_EQ(format_cpu_list(st->exclusive), "1-4");
}

TEST(CpuManagerState, ParsesNone) {
  auto st = parse_cpu_manager_state(R"({"policyName":"none","defaultCpuSet":"","checksum":1353318690})");
  ASSERT_TRUE(st.ok()) << st.error().str();
  EXPECT_EQ(st->policy, "none");
  EXPECT_TRUE(st->default_set.empty());
  EXPECT_TRUE(st->exclusive.empty());
}

TEST(CpuManagerState, ParsesCheckpointV1Entries) {
  // kubelet < 1.18: container id -> cpu list.
  auto st = parse_cpu_manager_state(
      R"({"policyName":"static","defaultCpuSet":"0-1","entries":{"abc123":"2-3"},"checksum":1})");
  ASSERT_TRUE(st.ok()) << st.error().str();
  EXPECT_EQ(format_cpu_list(st->exclusive), "2-3");
}

TEST(CpuManagerState, MalformedIsEinvalWithReason) {
  struct Case {
    const char* json;
    const char* says;
  };
  const Case cases[] = {
      {R"({"policyName":"static",)", "malformed JSON"},
      {"", "malformed JSON"},
      {R"(["static"])", "not a JSON object"},
      {R"({"defaultCpuSet":"0-3"})", "policyName"},
      {R"({"policyName":"static","defaultCpuSet":"3-1"})", "defaultCpuSet"},
      {R"({"policyName":"static","defaultCpuSet":7})", "defaultCpuSet"},
      {R"({"policyName":"static","defaultCpuSet":"0","entries":[]})", "entries"},
      {R"({"policyName":"static","defaultCpuSet":"0","entries":{"pod-a":{"app":"1-x"}}})",
       R"(entries["pod-a"]["app"])"},
      {R"({"policyName":"static","defaultCpuSet":"0","entries":{"pod-a":{"app":5}}})", R"(entries["pod-a"]["app"])"},
      {R"({"policyName":"static","defaultCpuSet":"0","entries":{"pod-a":7}})", R"(entries["pod-a"])"},
  };
  for (const auto& c : cases) {
    auto st = parse_cpu_manager_state(c.json);
    ASSERT_FALSE(st.ok()) << c.json;
    EXPECT_EQ(st.error().err, EINVAL) << c.json;
    EXPECT_NE(st.error().message.find(c.says), std::string::npos) << c.json << " -> " << st.error().str();
  }
}

TEST(CpuManagerState, MissingFileIsPolicyNone) {
  TempDir t;
  auto st = read_cpu_manager_state((t.path / "cpu_manager_state").string());
  ASSERT_TRUE(st.ok()) << st.error().str();
  EXPECT_EQ(st->policy, "none");
  EXPECT_TRUE(st->default_set.empty());
  EXPECT_TRUE(st->exclusive.empty());
}

TEST(CpuManagerState, ReadsFile) {
  TempDir t;
  t.write("cpu_manager_state",
          R"({"policyName":"static","defaultCpuSet":"0-1,6-7","entries":{"p":{"c":"2-5"}},"checksum":9})");
  auto st = read_cpu_manager_state((t.path / "cpu_manager_state").string());
  ASSERT_TRUE(st.ok()) << st.error().str();
  EXPECT_EQ(st->policy, "static");
  EXPECT_EQ(format_cpu_list(st->exclusive), "2-5");
}

TEST(CpuManagerState, UnreadableOrMalformedFileIsAnError) {
  TempDir t;
  // A directory where the file should be: present but unreadable.
  std::filesystem::create_directories(t.path / "state-dir");
  auto dir = read_cpu_manager_state((t.path / "state-dir").string());
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.error().err, EISDIR);

  t.write("bad", "{not json");
  const std::string bad = (t.path / "bad").string();
  auto st = read_cpu_manager_state(bad);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().err, EINVAL);
  EXPECT_NE(st.error().message.find(bad), std::string::npos) << st.error().str();
}
