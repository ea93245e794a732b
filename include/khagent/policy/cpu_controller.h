// The CPU controller: the offline CPU budget (policy/controller.h), the
// ladder of rungs above cpu.idle (policy/ladder.h), the cpuset partition
// and the fast path between ticks, as the idle, weight, cpuset and quota
// levers of the lever table.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "khagent/model/lever.h"
#include "khagent/policy/controller.h"
#include "khagent/policy/ladder.h"
#include "khagent/policy/targets.h"

namespace khagent {

struct CpuReport {
  bool tick = true;    // false: a fast-path step between ticks
  bool first = false;  // the first tick
  ControllerInput input;
  Decision decision;
  std::optional<LadderDecision> ladder;          // at a tick
  std::vector<std::pair<Lever, bool>> in_force;  // at a tick: each lever, and whether it is in force
  std::vector<OfflineTarget> targets;            // at a tick
  // The cpuset partition could not be made: the kubelet's CPU manager state
  // could not be read (why).
  std::optional<std::string> partition_skipped;
  std::string partition_note;  // why offline got fewer CPUs than asked
};

}  // namespace khagent
