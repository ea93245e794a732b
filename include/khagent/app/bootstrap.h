// The start-up every measuring command shares (run, observe, top): the
// checks that the machine can run khagent, its cgroup mounts, the node's
// CPUs and cgroup backend (run), the BPF programs loaded and a collector
// over their maps. A failure is logged
// once and carries the command's exit code.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "khagent/actuate/cgroup_writer.h"
#include "khagent/collect/bpf_maps.h"
#include "khagent/collect/cgroupfs.h"
#include "khagent/collect/collector.h"
#include "khagent/collect/cpustat.h"
#include "khagent/collect/snapshot.h"
#include "khagent/collect/topology.h"
#include "khagent/config/config.h"
#include "khagent/loader/runq_loader.h"

namespace khagent {

// Each step returns the exit code of its failure, already logged (2: the
// machine or the options cannot run khagent; 1: it failed), or nothing.

// preflight() and find_mounts().
std::optional<int> checked_mounts(Mounts& out);

struct NodeSetup {
  Topology topo;
  CgroupBackend backend = CgroupBackend::V2;
  bool idle_supported = true;  // the kernel has cpu.idle
  bool memory = false;         // a memory controller the backend writes (asked for, and found)
  bool memory_v2 = false;      // and it is cgroup v2's (memory.max, memory.reclaim)
  bool io = false;             // an IO limit the backend writes (asked for, and found)
};

// Reads the CPU topology and finds where cgroups are written (pure v1 hosts
// are refused), and logs both.
// `memory`: the memory lever is asked for (found or not, said in the log).
// `io`: the IO limit is asked for (io.enabled and io.limit).
std::optional<int> setup_node(const Mounts& m, bool memory, bool io, NodeSetup& out);

// Where a snapshot reads the node: the memory controller of the backend
// (`memory`: it has one), the v1 cpu hierarchy on a hybrid host.
NodeReadRoots node_read_roots(const CgroupRoots& roots, CgroupBackend b, bool memory,
                              const std::string& cpu_manager_state);

// PSI triggers on online pods' memory.pressure for the memory
// controller's cut between ticks; none without memory.stall_window.
std::unique_ptr<PsiTriggers> psi_triggers(const MemoryConfig& cfg, const CgroupRoots& roots);

struct Measuring {
  std::unique_ptr<RunqBpf> bpf;
  std::unique_ptr<BpfMapSource> maps;
  std::unique_ptr<CgroupIndex> index;
  std::unique_ptr<CpuStatThrottleReader> cpu_stat;
  std::unique_ptr<Collector> collector;
};

// Loads the BPF programs with `lo` (the cpu controller's hierarchy taken
// from `m`) and builds the collector over their maps. `rescan`: walk the
// cgroup tree now (viewers; the agent resolves ids as they come).
std::optional<int> start_measuring(const Mounts& m, LoaderOptions lo, bool rescan, Measuring& out);

}  // namespace khagent
