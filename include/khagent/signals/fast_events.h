// The fast path's input: the over-threshold waits the kernel reported since
// the last poll (kh_wait_event), each with whether offline work held the
// CPU, and the longest of those still going on, for the log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "khagent/abi/runq.h"
#include "khagent/signals/workload.h"

namespace khagent {

// A single over-threshold wait reported by the kernel.
struct FastEvent {
  uint64_t cgroup_id = 0;
  uint64_t wait_ns = 0;
  uint64_t aggressor_ns = 0;       // how much of the wait that cgroup held the CPU
  bool aggressor_offline = false;  // the cgroup that held the CPU longest is offline
  bool throttled = false;          // the wait was the victim's own throttling
  bool ongoing = false;            // seen while it still went on (wait_ns: so far)
};

struct FastBatch {
  std::vector<FastEvent> events;
  uint64_t first_ts_ns = UINT64_MAX;     // the earliest event (reaction time is counted from it)
  size_t ongoing = 0;                    // waits still going on when seen
  std::optional<kh_wait_event> longest;  // the longest of those
};

FastBatch fast_batch(std::span<const kh_wait_event> events, const Classifier& classifier);

}  // namespace khagent
