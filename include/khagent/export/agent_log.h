// The agent's log lines about what it did and what it saw between ticks:
// each cgroup write with its outcome, and the waits still going on past
// the fast path's threshold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "khagent/abi/runq.h"
#include "khagent/actuate/actuator.h"
#include "khagent/actuate/oom_order.h"
#include "khagent/collect/cgroupfs.h"
#include "khagent/export/metrics.h"
#include "khagent/policy/controller.h"
#include "khagent/policy/targets.h"
#include "khagent/util/log_limit.h"

namespace khagent {

// Logs each record that changed something, with `why`: writes at info, a
// dry run's would-be write once until it changes, failures at warn once a
// minute per cgroup, file and outcome.
void log_actions(const std::vector<ActionRecord>& recs, const std::string& why, LogLimiter& limit, uint64_t now_ns);
// The same for the records of `levers` only (a controller's).
void log_actions(const std::vector<ActionRecord>& recs, std::span<const Lever> levers, const std::string& why,
                 LogLimiter& limit, uint64_t now_ns);

// Logs the records of a restore (`unchanged_too`: those that found the
// original in place as well); how many were rejected.
size_t log_restore(const std::vector<ActionRecord>& recs, bool unchanged_too);

// The OOM order's changes: offline processes raised to go first, and put
// back at the end.
void log_oom_raised(const std::vector<OomChange>& raised);
void log_oom_restored(const std::vector<OomChange>& back);

// The budget line of a tick: the decision, the usage and the targets.
std::string budget_line(const Decision& d, const ControllerInput& in, const std::vector<OfflineTarget>& targets);

// The fast path's reaction times (first over-threshold wait to the cgroup
// write), for the summary at the end.
struct ReactionTimes {
  uint64_t count = 0;
  double sum_ms = 0, max_ms = 0;
  void add(double ms) {
    count++;
    sum_ms += ms;
    if (ms > max_ms) max_ms = ms;
  }
  std::string summary() const;  // "" when none
  // For the writes of a wake-up at `woke_ns`: when they moved the CPU budget
  // and `first_event_ns` is the wait that woke it, the reaction, counted
  // here and in `metrics` (may be null); else the time since the wake-up.
  // A note for their log lines.
  std::string note(const std::vector<ActionRecord>& recs, uint64_t first_event_ns, uint64_t woke_ns, uint64_t now_ns,
                   Metrics* metrics);
};

// One line for the waits still going on past the threshold (`ongoing` of
// them), naming the longest, where it waits and who holds its CPU.
// `name_of` turns a cgroup id into a path.
std::string describe_ongoing_waits(const kh_wait_event& longest, size_t ongoing,
                                   const std::function<std::string(uint64_t)>& name_of);
// Logs that line, the cgroups named by `index`.
void log_ongoing_waits(const kh_wait_event& longest, size_t ongoing, const CgroupIndex& index);

}  // namespace khagent
