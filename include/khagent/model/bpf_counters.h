// Names of the BPF side's own counters (enum kh_counter), as metrics labels
// and in `status`.
#pragma once

#include <array>

#include "khagent/abi/runq.h"

namespace khagent {

static_assert(KH_NR_COUNTERS == 10, "new BPF counter: name it in kBpfCounterNames");
inline constexpr std::array<const char*, KH_NR_COUNTERS> kBpfCounterNames = {
    "switches",   "wakeups", "storage_miss",   "ring_overflow", "stats_full",
    "pairs_full", "events",  "events_dropped", "removals_lost", "reclaim_full"};

}  // namespace khagent
