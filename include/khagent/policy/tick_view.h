// What every controller sees: the node's fixed facts, one tick's (or one
// wake-up's) snapshot and signals, and the wake-ups between ticks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "khagent/collect/snapshot.h"
#include "khagent/collect/topology.h"
#include "khagent/model/cgroup_value.h"
#include "khagent/policy/targets.h"
#include "khagent/signals/fast_events.h"
#include "khagent/signals/workload.h"

namespace khagent {

// The node as found at start-up.
struct NodeFacts {
  Topology topo;
  bool idle_supported = true;     // the kernel has cpu.idle
  bool memory = false;            // a memory controller to read and write
  bool memory_v2 = false;         // it is cgroup v2's (memory.max, memory.reclaim), not a hybrid host's v1
  bool yarn_last_resort = false;  // YARN may kill a container when the node's memory is critical
  bool io = false;                // an IO limit to write: io.max (cgroup v2 with the io controller)
};

// One tick, or one wake-up between ticks (then `node` is the last tick's).
struct TickView {
  const TickSnapshot& snap;
  const NodeSignals& node;
  // This tick's offline targets, their CPU use filled in.
  const std::vector<OfflineTarget>& targets;
  // The online pods' cgroups.
  const std::vector<std::string>& online_pods;
  // Whether khagent wrote this knob of this cgroup (it holds the original in
  // its state file): a value there that khagent did not write is someone
  // else's.
  std::function<bool(const std::string& cgroup, Knob k)> ours;
  uint64_t now_ns = 0;
};

// Something that woke the loop between ticks.
struct Wakeup {
  uint64_t now_ns = 0;
  std::vector<FastEvent> waits;             // over-threshold waits of online tasks (the fast path)
  std::vector<std::string> memory_stalled;  // online cgroups whose PSI memory trigger fired
};

}  // namespace khagent
