// The ladder above the base lever (cpu.idle): rungs climbed one at a time
// while an online pod stays in breach, each step checked against the
// online waits behind offline in the window before it and undone when it
// did not help, and stepped down after a calm period. Pure, no files.
//
// Measured on a real 6.18 kernel (docs/controller.md): cpu.idle on the
// offline side gave the best online tail and left offline all the spare
// CPU; a quota alone made the tail worse (after each unthrottle the offline
// group runs ahead of online wakers); a cpuset split helped but halved
// offline. So cpu.idle is the base lever, always on, and the others are
// rungs, used only when they are seen to help.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "khagent/config/config.h"
#include "khagent/policy/controller.h"

namespace khagent {

struct LadderInput {
  uint64_t now_ns = 0;
  bool breach = false;           // an online pod in breach this tick (or a fast-path event)
  double offline_wait_rate = 0;  // online waits behind offline, ns per second, this tick
  // Online waits through CPU stalls (cause stolen), ns per second, this
  // tick: not in offline_wait_rate, never a reason to step; logged.
  double stolen_wait_rate = 0;
  bool can_cpuset = true;  // a partition can be made on this node
};

enum class LadderAction { Hold, Escalate, Kept, Undone, Relaxed, Skipped };
const char* ladder_action_name(LadderAction a);

struct LadderState {
  std::vector<Lever> active;     // rungs in force, in the order they were added
  uint64_t breach_since_ns = 0;  // 0: not in breach
  uint64_t last_breach_ns = 0;
  uint64_t last_step_ns = 0;
  bool verifying = false;                           // a step waits for its verdict
  double before_rate = 0;                           // offline wait rate over the window before the step
  std::deque<std::pair<uint64_t, double>> history;  // (time, rate), one verify window
  std::map<Lever, uint64_t> blocked_until;          // no retry of an undone rung before
};

struct LadderDecision {
  size_t level = 0;  // rungs in force after this step
  bool changed = false;
  LadderAction action = LadderAction::Hold;
  std::optional<Lever> lever;  // the rung stepped onto, off or checked
  double before_rate = 0;      // for a verdict: ns/s behind offline before and after
  double after_rate = 0;
  std::string reason;
};

// The ladder's input after a controller step: a breach this tick (a pod's
// verdict, or `fast_breaches` fast-path events since the last tick) and the
// rate of online waits behind offline over the tick.
LadderInput ladder_input(const Decision& d, const ControllerInput& in, uint64_t fast_breaches, uint64_t tick_ns,
                         bool can_cpuset);

LadderDecision ladder_step(const LadderInput& in, const LadderConfig& cfg, LadderState& st);
// Whether `lever` is among the rungs in force.
bool lever_on(const LadderState& st, Lever lever);

}  // namespace khagent
