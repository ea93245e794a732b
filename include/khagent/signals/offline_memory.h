// The memory policy's input for one tick: the node's capacity and working
// set, and the offline parents' working sets.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "khagent/collect/memory.h"

namespace khagent {

// What the node uses this tick, working sets (usage less inactive page
// cache, as the kubelet counts them), in bytes.
struct MemoryInput {
  uint64_t capacity = 0;      // the node's memory (or the node cgroup's limit); 0: unknown
  uint64_t node_used = 0;     // everyone's working set, offline included
  uint64_t offline_used = 0;  // the offline parents' working sets
  uint64_t now_ns = 0;
};

struct MemorySignals {
  MemoryInput input;
  std::map<std::string, uint64_t> used;  // working set of each parent read
  std::vector<std::string> problems;     // files that could not be read, one line each
};

// Reads each offline parent (paths in the memory hierarchy, the same
// relative paths as in the cgroup2 mount) and the node. A parent missing
// from the memory hierarchy is left out of `used` (and of the lever) with
// a problem line; a node that cannot be read leaves input.capacity 0.
MemorySignals offline_memory(const MemoryReader& r, const std::string& node_cgroup,
                             const std::vector<std::string>& parents, uint64_t now_ns);

}  // namespace khagent
