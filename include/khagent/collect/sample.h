// Plain data the collector hands to the signals stage.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "khagent/abi/runq.h"
#include "khagent/signals/histogram.h"

namespace khagent {

enum class ThrottleSource { Fentry, CpuStat, None };
const char* throttle_source_name(ThrottleSource s);

// Counters of one cgroup, summed over CPUs.
struct CgroupCounters {
  uint64_t wait_ns = 0;
  uint64_t waits = 0;
  uint64_t cpu_ns = 0;
  uint64_t preemptions = 0;
  std::array<uint64_t, KH_NR_WAIT_CAUSES> cause_ns{};
  WaitHistogram hist{};
};

struct ThrottleCounters {
  uint64_t events = 0;
  uint64_t throttled_ns = 0;
};

struct CgroupSample {
  uint64_t id = 0;
  std::string path;              // relative to the cgroup2 mount, "/" for its root
  CgroupCounters total;          // since the agent started watching it
  CgroupCounters interval;       // during the last interval
  ThrottleCounters throttle_total;
  ThrottleCounters throttle_interval;
};

struct PairSample {
  uint64_t victim = 0;
  uint64_t aggressor = 0;
  uint64_t wait_ns_total = 0;
  uint64_t count_total = 0;
  uint64_t wait_ns_interval = 0;
};

struct Sample {
  uint64_t ts_ns = 0;        // CLOCK_REALTIME at the end of the interval
  uint64_t interval_ns = 0;  // length of the interval (0 for the first sample)
  ThrottleSource throttle_source = ThrottleSource::None;
  std::vector<CgroupSample> cgroups;
  std::vector<PairSample> pairs;
  std::array<uint64_t, KH_NR_COUNTERS> bpf_counters{};
};

}  // namespace khagent
