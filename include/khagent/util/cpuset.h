// CPU sets and the node's CPU topology as plain data.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "khagent/util/result.h"

namespace khagent {

using CpuSet = std::set<int>;

// "0-3,8,10-11" <-> {0,1,2,3,8,10,11}. Whitespace and a trailing newline are
// accepted, "" is the empty set; anything else malformed (reversed ranges,
// junk, negative numbers) is an error, and so are CPU numbers above 65536
// and lists whose ranges name more than 131074 CPUs in all (ERANGE).
Result<CpuSet> parse_cpu_list(const std::string& text);
std::string format_cpu_list(const CpuSet& cpus);

struct CpuInfo {
  int id = 0;
  int core = 0;  // physical core, unique across packages (SMT siblings share it)
  int node = 0;  // NUMA node
};

struct Topology {
  std::vector<CpuInfo> cpus;     // online CPUs, sorted by id
  int threads_per_core() const;  // max siblings of any core (1 without SMT)
  CpuSet all() const;
};

}  // namespace khagent
