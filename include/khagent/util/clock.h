// Clock readings in nanoseconds, for every stage. Monotonic time
// (CLOCK_MONOTONIC) is what ticks, grace periods, retries and rate limits
// are measured in; it is also the clock BPF's bpf_ktime_get_ns() reads.
#pragma once

#include <time.h>

#include <cstdint>

namespace khagent {

// `c`'s current time in nanoseconds.
inline uint64_t clock_ns(clockid_t c) {
  timespec ts{};
  clock_gettime(c, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// CLOCK_MONOTONIC in nanoseconds.
inline uint64_t mono_ns() { return clock_ns(CLOCK_MONOTONIC); }

}  // namespace khagent
