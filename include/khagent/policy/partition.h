// The offline/online CPU partition (pure; no I/O).
#pragma once

#include <string>

#include "khagent/util/cpuset.h"

namespace khagent {

struct PartitionInput {
  Topology topo;
  double offline_budget_cores = 0;  // from the controller
  double online_demand_cores = 0;   // CPUs the online side must keep (usage + headroom)
  CpuSet reserved;                  // never offline (system / kubelet reserved)
  CpuSet exclusive;                 // static-policy exclusive CPUs: never offline
};

struct Partition {
  CpuSet offline;    // for offline cgroups' cpuset.cpus (empty: no partition possible)
  CpuSet online;     // the rest of the node's CPUs
  std::string note;  // why offline got less than asked, if it did
};

// Gives offline whole physical cores (SMT siblings are never split between
// online and offline), preferring the highest-numbered cores within one NUMA
// node (the node that can hold all of them; otherwise the fewest nodes),
// never reserved or exclusive CPUs, and leaves the online side at least
// ceil(online_demand_cores) CPUs. Offline gets enough whole cores to hold its
// budget (rounded up), at least one core when the budget is positive and a
// core can be spared. Deterministic: the same input gives the same output.
Partition partition_cpus(const PartitionInput& in);

}  // namespace khagent
