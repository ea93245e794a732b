#include "khagent/policy/partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

namespace khagent {

namespace {

struct Core {
  int id = 0;    // CpuInfo::core
  int node = 0;  // NUMA node of its lowest CPU (siblings share a node in practice)
  CpuSet cpus;
};

// Cores in the order offline takes them: highest-numbered first (by lowest
// CPU id, which is what appears in cpu lists), core id breaking ties.
bool takes_before(const Core* a, const Core* b) {
  if (*a->cpus.begin() != *b->cpus.begin()) return *a->cpus.begin() > *b->cpus.begin();
  return a->id > b->id;
}

// ceil() of a core count that forgives float noise from the controller
// (4.0000000001 cores is 4 CPUs, not 5); <= 0 and NaN are 0, and absurd values
// are capped so the conversion cannot overflow.
int64_t ceil_count(double x) {
  if (!(x > 0)) return 0;
  x = std::min(x, 1e12);
  return std::max<int64_t>(0, static_cast<int64_t>(std::ceil(x - 1e-6)));
}

// 6 -> "6.0", 0.25 -> "0.25", 1.5 -> "1.5".
std::string fmt_cores(double x) {
  std::string s = fmt::format("{:.2f}", x);
  auto dot = s.find('.');
  if (dot != std::string::npos) {
    while (s.size() > dot + 2 && s.back() == '0') s.pop_back();
  }
  return s;
}

// "1 CPU", "4 CPUs".
std::string count_of(int64_t n, const char* noun) { return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s"); }

struct Pick {
  CpuSet cpus;
  int cores = 0;
};

// Takes cores in `order`, skipping any that would push offline past `room`
// CPUs, until offline holds at least `want` CPUs.
Pick pick(const std::vector<const Core*>& order, int64_t want, int64_t room) {
  Pick p;
  for (const Core* c : order) {
    if (static_cast<int64_t>(p.cpus.size()) >= want) break;
    if (static_cast<int64_t>(p.cpus.size() + c->cpus.size()) > room) continue;
    p.cpus.insert(c->cpus.begin(), c->cpus.end());
    p.cores++;
  }
  return p;
}

// The machine's cores, by core id, each with its CPUs and the NUMA node of its lowest CPU.
std::map<int, Core> group_cores(const Topology& topo) {
  std::map<int, Core> cores;
  for (const auto& cpu : topo.cpus) {
    Core& c = cores[cpu.core];
    c.id = cpu.core;
    if (c.cpus.empty() || cpu.id < *c.cpus.begin()) c.node = cpu.node;
    c.cpus.insert(cpu.id);
  }
  return cores;
}

// The cores offline may take, by node in taking order, and the CPUs that kept the others out.
struct Eligible {
  std::map<int, std::vector<const Core*>> by_node;
  int64_t reserved = 0, exclusive = 0, blocked_siblings = 0;
};

// A core is eligible only if none of its CPUs is reserved or exclusive.
Eligible eligible_cores(const std::map<int, Core>& cores, const PartitionInput& in) {
  // Offline sharing a core with them would contend through the siblings.
  Eligible el;
  for (const auto& [id, core] : cores) {
    int64_t r = 0, e = 0;
    for (int cpu : core.cpus) {
      if (in.reserved.count(cpu)) r++;
      else if (in.exclusive.count(cpu)) e++;
    }
    el.reserved += r;
    el.exclusive += e;
    if (r + e == 0) {
      el.by_node[core.node].push_back(&core);
    } else {
      el.blocked_siblings += static_cast<int64_t>(core.cpus.size()) - r - e;
    }
  }
  for (auto& [node, list] : el.by_node) std::sort(list.begin(), list.end(), takes_before);
  return el;
}

// Nodes with the most eligible cores first, the highest node id on ties.
std::vector<int> node_order(std::map<int, std::vector<const Core*>>& eligible) {
  std::vector<int> nodes;
  nodes.reserve(eligible.size());
  for (const auto& [node, list] : eligible) nodes.push_back(node);
  std::sort(nodes.begin(), nodes.end(), [&](int a, int b) {
    if (eligible[a].size() != eligible[b].size()) return eligible[a].size() > eligible[b].size();
    return a > b;
  });
  return nodes;
}

// The most offline can get, spread over nodes in that order (which also uses the fewest nodes); then the first
// node, in the same order, that can hold that much alone gets all of it.
Pick best_pick(std::map<int, std::vector<const Core*>>& eligible, const std::vector<int>& nodes, int64_t want,
               int64_t room) {
  std::vector<const Core*> across;
  for (int node : nodes) across.insert(across.end(), eligible[node].begin(), eligible[node].end());
  Pick best = pick(across, want, room);
  const int64_t goal = std::min<int64_t>(want, static_cast<int64_t>(best.cpus.size()));
  if (goal > 0) {
    for (int node : nodes) {
      Pick p = pick(eligible[node], want, room);
      if (static_cast<int64_t>(p.cpus.size()) >= goal) {
        best = std::move(p);
        break;
      }
    }
  }
  return best;
}

// Why offline got fewer CPUs than its budget: online's demand, reserved and exclusive CPUs, their siblings, SMT.
std::string shortfall_note(const PartitionInput& in, const Eligible& el, int64_t want, int64_t demand, int64_t n,
                           int cores, int64_t cpus) {
  const int tpc = in.topo.threads_per_core();
  std::string why = fmt::format("online demand {} of {} CPUs", demand, n);
  if (el.reserved) why += fmt::format("; {} reserved", el.reserved);
  if (el.exclusive) why += fmt::format("; {} exclusive", el.exclusive);
  if (el.blocked_siblings) why += "; " + count_of(el.blocked_siblings, "sibling") + " of those";
  if (tpc > 1) why += fmt::format("; {} threads per core", tpc);
  // Cores needed at full SMT: ceil(budget / threads_per_core).
  return fmt::format("offline budget {} cores needs {}, only {} ({}) can be spared ({})",
                     fmt_cores(in.offline_budget_cores), count_of((want + tpc - 1) / tpc, "core"), cores,
                     count_of(cpus, "CPU"), why);
}

}  // namespace

Partition partition_cpus(const PartitionInput& in) {
  Partition out;
  const CpuSet all = in.topo.all();
  const int64_t n = static_cast<int64_t>(all.size());
  // Offline's budget in CPUs. Taking whole cores until at least this many
  // CPUs are offline is ceil(budget / threads_per_core) cores on a uniform
  // SMT machine, and still holds the budget when some cores have fewer
  // threads (a sibling offlined, hybrid CPUs).
  const int64_t want = ceil_count(in.offline_budget_cores);
  if (want == 0) {
    out.online = all;
    out.note = "offline budget " + fmt_cores(in.offline_budget_cores) + " cores: no offline CPUs";
    return out;
  }
  const int64_t demand = ceil_count(in.online_demand_cores);
  const int64_t room = std::max<int64_t>(0, n - demand);  // CPUs online can spare

  const std::map<int, Core> cores = group_cores(in.topo);
  Eligible el = eligible_cores(cores, in);
  const std::vector<int> nodes = node_order(el.by_node);
  Pick best = best_pick(el.by_node, nodes, want, room);

  out.offline = std::move(best.cpus);
  for (int cpu : all) {
    if (!out.offline.count(cpu)) out.online.insert(cpu);
  }

  if (static_cast<int64_t>(out.offline.size()) < want)
    out.note = shortfall_note(in, el, want, demand, n, best.cores, static_cast<int64_t>(out.offline.size()));
  return out;
}

}  // namespace khagent
