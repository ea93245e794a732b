// The memory controller: the offline memory budget (policy/memory.h) from
// the node's memory, online pods' stall and the offline parents' use, as
// the memory lever of the lever table; the node's memory critical state
// for YARN's last resort; offline processes first in the OOM order. Cuts
// at once between ticks when an online pod's PSI trigger fires.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "khagent/policy/memory.h"
#include "khagent/signals/offline_memory.h"
#include "khagent/util/result.h"

namespace khagent {

struct MemoryReport {
  bool tick = true;      // false: a PSI trigger woke the agent between ticks
  bool decided = false;  // the node's memory was known and a budget decided
  MemoryInput input;
  MemoryDecision decision;
  std::vector<MemoryProblem> problems;
  // At a tick: OOM kills and refaults, online pods' stall, and no online
  // pod's memory.pressure readable (the stall cut is off).
  MemoryEvents events;
  std::optional<MemoryStall> stall;
  bool stall_unreadable = false;
  // The node's memory became critical, or stopped being so, at this step.
  bool critical_began = false;
  bool critical_ended = false;
  bool yarn_last_resort = false;  // YARN may kill a container for it
  // The backstop (memory.max, v2) asked of each YARN root this step.
  std::map<std::string, uint64_t> backstops;
  // YARN roots left without one: a memory.max khagent did not write is there.
  std::map<std::string, uint64_t> backstop_foreign;
};

}  // namespace khagent
