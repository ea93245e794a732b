// Run-queue wait histogram maths over the kernel's log-linear buckets.
#pragma once

#include <array>
#include <cstdint>

#include "khagent/abi/runq.h"

namespace khagent {

using WaitHistogram = std::array<uint64_t, KH_HIST_BUCKETS>;

// Bucket index of a wait of `ns` nanoseconds (same function as the BPF side).
uint32_t hist_bucket(uint64_t ns);
// Lower bound (inclusive) and upper bound (exclusive) of bucket `b`, in ns.
uint64_t hist_bucket_low(uint32_t b);
uint64_t hist_bucket_high(uint32_t b);
// Value reported for bucket `b`: its midpoint (bucket 0: half its width).
double hist_bucket_value(uint32_t b);

// The q-quantile (0 < q <= 1) of the waits in `h`, in ns; 0 if empty.
double hist_quantile(const WaitHistogram& h, double q);
uint64_t hist_count(const WaitHistogram& h);

}  // namespace khagent
