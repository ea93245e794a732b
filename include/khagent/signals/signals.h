// The signals stage: per-cgroup percentiles, CPU share and top aggressors
// computed from a collector Sample.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "khagent/collect/sample.h"

namespace khagent {

struct AggressorSignal {
  uint64_t id = 0;
  std::string path;  // "" if the aggressor is not a known cgroup
  uint64_t wait_ns_total = 0;
  uint64_t wait_ns_interval = 0;
};

struct CgroupSignals {
  uint64_t id = 0;
  std::string path;
  CgroupCounters total;
  CgroupCounters interval;
  ThrottleCounters throttle_total;
  ThrottleCounters throttle_interval;
  ReclaimCounters reclaim_total;  // its tasks' direct memory reclaim
  ReclaimCounters reclaim_interval;
  double wait_p50_us = 0;  // over the last interval
  double wait_p99_us = 0;
  double cpu_pct = 0;  // of one CPU, over the last interval
  // By total wait caused, largest first; never the containers of the same
  // pod (app, sidecar, pause share the pod's CPU).
  std::vector<AggressorSignal> top_aggressors;
};

struct Signals {
  uint64_t ts_ns = 0;
  uint64_t interval_ns = 0;
  ThrottleSource throttle_source = ThrottleSource::None;
  std::vector<CgroupSignals> cgroups;
  std::array<uint64_t, KH_NR_COUNTERS> bpf_counters{};
  // The CPUs' stall detectors: since load, and this interval (all CPUs).
  StallCounters stall_total;
  uint64_t stall_interval_ns = 0;
  uint64_t stall_interval_count = 0;
};

Signals compute_signals(const Sample& s, size_t top_aggressors = 3);

}  // namespace khagent
