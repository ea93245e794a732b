#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>

#include "khagent/policy/partition.h"

using namespace khagent;

namespace {

// x86-style numbering: the first threads of all cores, then the second
// threads (core c = CPUs c and c + cores). Cores are split evenly over
// `nodes` NUMA nodes in order.
Topology smt_topo(int cores, int nodes = 1, int threads = 2) {
  Topology t;
  for (int th = 0; th < threads; th++) {
    for (int c = 0; c < cores; c++) t.cpus.push_back({th * cores + c, c, c / (cores / nodes)});
  }
  std::sort(t.cpus.begin(), t.cpus.end(), [](const CpuInfo& a, const CpuInfo& b) { return a.id < b.id; });
  return t;
}

Topology nosmt_topo(int cpus, int nodes = 1) { return smt_topo(cpus, nodes, 1); }

// Two sockets without SMT whose CPUs alternate: even on node 0, odd on node 1.
Topology interleaved_topo(int cpus) {
  Topology t;
  for (int c = 0; c < cpus; c++) t.cpus.push_back({c, c, c % 2});
  return t;
}

// SMT with CPU 7 offline: core 3 is left with CPU 3 alone.
Topology smt_missing_sibling() {
  Topology t = smt_topo(4);
  t.cpus.pop_back();
  return t;
}

CpuSet cpus(const std::string& list) {
  auto r = parse_cpu_list(list);
  EXPECT_TRUE(r.ok()) << list;
  return r.ok() ? *r : CpuSet{};
}

std::string fmt(const CpuSet& s) { return format_cpu_list(s); }

struct Scenario {
  std::string name;
  Topology topo;
  double budget = 0;
  double demand = 0;
  std::string reserved;
  std::string exclusive;
  std::optional<std::string> offline;  // exact expected offline list, if given
  std::string note;                    // "" expects no note; else a substring of it
};

std::ostream& operator<<(std::ostream& os, const Scenario& s) { return os << s.name; }

PartitionInput input_of(const Scenario& s) {
  PartitionInput in;
  in.topo = s.topo;
  in.offline_budget_cores = s.budget;
  in.online_demand_cores = s.demand;
  in.reserved = cpus(s.reserved);
  in.exclusive = cpus(s.exclusive);
  return in;
}

// Cores -> whole CPUs as partition_cpus rounds them: up, but forgiving
// float noise (4.0000000001 is 4).
size_t ceil_cpus(double cores) { return cores > 0 ? static_cast<size_t>(std::ceil(cores - 1e-6)) : 0; }

// The properties every partition must have, whatever the scenario.
void check_invariants(const PartitionInput& in, const Partition& p) {
  const CpuSet all = in.topo.all();

  // offline and online are disjoint and cover the node.
  CpuSet both;
  std::set_intersection(p.offline.begin(), p.offline.end(), p.online.begin(), p.online.end(),
                        std::inserter(both, both.end()));
  EXPECT_TRUE(both.empty()) << "in both: " << fmt(both);
  CpuSet all_of_them = p.offline;
  all_of_them.insert(p.online.begin(), p.online.end());
  EXPECT_EQ(fmt(all_of_them), fmt(all));

  // Never a reserved or exclusive CPU.
  for (int c : p.offline) {
    EXPECT_EQ(in.reserved.count(c), 0u) << "reserved cpu " << c << " offline";
    EXPECT_EQ(in.exclusive.count(c), 0u) << "exclusive cpu " << c << " offline";
  }

  // No physical core split between the sides.
  std::map<int, CpuSet> core_cpus;
  std::map<int, int> node_of;
  for (const auto& c : in.topo.cpus) {
    core_cpus[c.core].insert(c.id);
    node_of[c.id] = c.node;
  }
  for (const auto& [core, members] : core_cpus) {
    size_t off = 0;
    for (int c : members) off += p.offline.count(c);
    EXPECT_TRUE(off == 0 || off == members.size())
        << "core " << core << " split: " << fmt(members) << " vs offline " << fmt(p.offline);
  }

  // Online keeps its demand (all CPUs when the demand is more than the node).
  const size_t demand = ceil_cpus(in.online_demand_cores);
  EXPECT_GE(p.online.size(), std::min(demand, all.size()));

  // Enough cores for the budget unless the note says why not, and never a
  // whole core more than needed.
  const size_t want = ceil_cpus(in.offline_budget_cores);
  if (want == 0) {
    EXPECT_TRUE(p.offline.empty());
    EXPECT_FALSE(p.note.empty());
  } else if (p.note.empty()) {
    EXPECT_GE(p.offline.size(), want);
  } else {
    EXPECT_LT(p.offline.size(), want);
  }
  if (!p.offline.empty()) {
    EXPECT_LT(p.offline.size(), want + static_cast<size_t>(in.topo.threads_per_core()));
  }

  // One NUMA node whenever some node's eligible cores could hold it.
  std::set<int> offline_nodes;
  for (int c : p.offline) offline_nodes.insert(node_of[c]);
  if (offline_nodes.size() > 1) {
    std::map<int, size_t> eligible_cpus;  // by node
    for (const auto& [core, members] : core_cpus) {
      bool ok = std::none_of(members.begin(), members.end(),
                             [&](int c) { return in.reserved.count(c) || in.exclusive.count(c); });
      if (ok) eligible_cpus[node_of[*members.begin()]] += members.size();
    }
    for (auto [node, n] : eligible_cpus) {
      EXPECT_LT(n, p.offline.size()) << "offline " << fmt(p.offline) << " spans nodes, but node " << node
                                     << " alone has " << n << " eligible CPUs";
    }
  }

  // Deterministic, and independent of the order of topo.cpus.
  Partition again = partition_cpus(in);
  EXPECT_EQ(fmt(again.offline), fmt(p.offline));
  EXPECT_EQ(again.note, p.note);
  PartitionInput reversed = in;
  std::reverse(reversed.topo.cpus.begin(), reversed.topo.cpus.end());
  EXPECT_EQ(fmt(partition_cpus(reversed).offline), fmt(p.offline));
}

class PartitionScenario : public ::testing::TestWithParam<Scenario> {};

TEST_P(PartitionScenario, Holds) {
  const Scenario& s = GetParam();
  PartitionInput in = input_of(s);
  Partition p = partition_cpus(in);
  SCOPED_TRACE("offline=" + fmt(p.offline) + " online=" + fmt(p.online) + " note='" + p.note + "'");
  check_invariants(in, p);
  if (s.offline) {
    EXPECT_EQ(fmt(p.offline), *s.offline);
  }
  if (s.note.empty()) {
    EXPECT_EQ(p.note, "");
  } else {
    EXPECT_NE(p.note.find(s.note), std::string::npos);
  }
}

// Topologies: smt_topo(4) = 8 CPUs, cores {0,4} {1,5} {2,6} {3,7};
// smt_topo(8, 2) = 16 CPUs, node 0 cores 0-3 = CPUs 0-3,8-11, node 1 cores
// 4-7 = CPUs 4-7,12-15.
const Scenario kScenarios[] = {
    // SMT on, one node: whole cores, highest-numbered first.
    {"SmtBudget4", smt_topo(4), 4, 0, "", "", "2-3,6-7", ""},
    {"SmtBudgetRoundsUpToCores", smt_topo(4), 3, 0, "", "", "2-3,6-7", ""},
    {"SmtSmallBudgetIsOneCore", smt_topo(4), 0.3, 0, "", "", "3,7", ""},
    {"SmtFloatNoiseDoesNotAddACore", smt_topo(4), 4.0000000001, 0, "", "", "2-3,6-7", ""},
    // SMT off.
    {"NoSmtBudget", nosmt_topo(8), 2.5, 0, "", "", "5-7", ""},
    {"NoSmtDemandLeavesOne", nosmt_topo(8), 4, 7, "", "", "7", "only 1 (1 CPU)"},
    // Budget 0 and below.
    {"BudgetZero", smt_topo(4), 0, 0, "", "", "", "no offline CPUs"},
    {"BudgetNegative", smt_topo(4), -2, 0, "", "", "", "no offline CPUs"},
    {"BudgetNaN", smt_topo(4), std::nan(""), 0, "", "", "", "no offline CPUs"},
    // Reserved CPUs and their siblings stay online.
    {"SmtReservedCpu0", smt_topo(4), 2, 0, "0", "", "3,7", ""},
    {"SmtReservedBlocksSibling", smt_topo(4), 8, 0, "0", "", "1-3,5-7", "1 sibling of those"},
    {"ReservedOutsideTopologyIgnored", nosmt_topo(4), 1, 0, "99", "", "3", ""},
    // Static-policy exclusive CPUs.
    {"SmtExclusiveHighCores", smt_topo(4), 4, 0, "", "3,7", "1-2,5-6", ""},
    {"SmtExclusiveAndReserved", smt_topo(8), 6, 0, "0,8", "1-2,9-10", "5-7,13-15", ""},
    {"ExclusiveHalfCoreBlocksIt", smt_topo(4), 2, 0, "", "7", "2,6", ""},
    // Budget larger than what can be spared.
    {"BudgetLargerThanNode", smt_topo(4), 100, 0, "0", "", "1-3,5-7", "needs 50 cores, only 3 (6 CPUs)"},
    {"EverythingPinned", smt_topo(4), 2, 0, "0-1,4-5", "2-3,6-7", "", "only 0 (0 CPUs)"},
    // Online demand leaving no room.
    {"DemandTakesAll", smt_topo(4), 2, 8, "", "", "", "online demand 8 of 8 CPUs"},
    {"DemandAboveNode", smt_topo(4), 2, 20, "", "", "", "online demand 20 of 8 CPUs"},
    {"DemandRoundsUp", nosmt_topo(4), 1, 3.2, "", "", "", "online demand 4 of 4"},
    {"DemandLeavesLessThanACore", smt_topo(4), 2, 7, "", "", "", "only 0"},
    {"DemandLeavesOddRoom", smt_topo(4), 4, 5, "", "", "3,7", "needs 2 cores, only 1 (2 CPUs)"},
    // Two NUMA nodes: one node when it fits, tie -> the highest node.
    {"NumaTieTakesHighestNode", smt_topo(8, 2), 4, 0, "", "", "6-7,14-15", ""},
    {"NumaMostEligibleNodeWins", smt_topo(8, 2), 4, 0, "", "4-5,12-13", "2-3,10-11", ""},
    {"NumaExactFitOnANode", smt_topo(8, 2), 8, 0, "", "", "4-7,12-15", ""},
    {"NumaSpillsToNextNode", smt_topo(8, 2), 12, 0, "", "", "2-7,10-15", ""},
    {"NumaSpillsAroundReserved", smt_topo(8, 2), 12, 0, "0,8", "4,12", "1-3,5-7,9-11,13-15", ""},
    {"NumaCappedBudgetStillOneNode", smt_topo(8, 2), 10, 10, "", "7,15", "1-3,9-11", "only 3 (6 CPUs)"},
    {"NumaInterleavedNumbering", interleaved_topo(8), 2, 0, "", "", "5,7", ""},
    {"NumaInterleavedSpill", interleaved_topo(8), 6, 0, "", "", "1,3-7", ""},
    {"NumaFourNodes", smt_topo(8, 4), 4, 0, "", "", "6-7,14-15", ""},
    // A core left with one thread (sibling offline): cores are added until
    // the budget's CPUs are covered.
    {"MissingSiblingCoversBudget", smt_missing_sibling(), 4, 0, "", "", "1-3,5-6", ""},
    // Nothing at all.
    {"EmptyTopology", Topology{}, 2, 0, "", "", "", "only 0"},
};

INSTANTIATE_TEST_SUITE_P(Partition, PartitionScenario, ::testing::ValuesIn(kScenarios),
                         [](const auto& info) { return info.param.name; });

}  // namespace

TEST(Partition, NoteExplainsShortfall) {
  PartitionInput in;
  in.topo = smt_topo(8);  // 16 CPUs
  in.offline_budget_cores = 6;
  in.online_demand_cores = 11;
  in.reserved = cpus("0,8");
  in.exclusive = cpus("1-2,9-10");
  Partition p = partition_cpus(in);
  EXPECT_EQ(fmt(p.offline), "6-7,14-15");
  EXPECT_EQ(fmt(p.online), "0-5,8-13");
  EXPECT_EQ(p.note,
            "offline budget 6.0 cores needs 3 cores, only 2 (4 CPUs) can be spared "
            "(online demand 11 of 16 CPUs; 2 reserved; 4 exclusive; 2 threads per core)");
}

TEST(Partition, BudgetZeroNote) {
  PartitionInput in;
  in.topo = nosmt_topo(4);
  Partition p = partition_cpus(in);
  EXPECT_TRUE(p.offline.empty());
  EXPECT_EQ(fmt(p.online), "0-3");
  EXPECT_EQ(p.note, "offline budget 0.0 cores: no offline CPUs");
}

TEST(Partition, FullBudgetHasNoNote) {
  PartitionInput in;
  in.topo = smt_topo(8, 2);
  in.offline_budget_cores = 2.5;
  in.online_demand_cores = 9.5;
  Partition p = partition_cpus(in);
  EXPECT_EQ(fmt(p.offline), "6-7,14-15");
  EXPECT_EQ(fmt(p.online), "0-5,8-13");
  EXPECT_EQ(p.note, "");
}
