// What the controller needs to know about each online pod in the last
// tick: its waits, the part its own quota caused and the part spent behind
// offline work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "khagent/model/histogram.h"
#include "khagent/signals/workload.h"

namespace khagent {

struct OnlinePodLoad {
  std::string uid;
  std::string path;
  uint64_t waits = 0;
  uint64_t wait_ns = 0;
  uint64_t throttled_wait_ns = 0;  // wait because its own quota throttled it
  uint64_t offline_wait_ns = 0;    // wait while offline cgroups held the CPU
  uint64_t stolen_wait_ns = 0;     // wait while its CPU stalled (counted in none of the above)
  double wait_p99_us = 0;
  WaitHistogram hist{};            // its waits by duration
  uint64_t throttled_periods = 0;  // the most CFS periods the kernel throttled one of its cgroups in
  uint64_t throttled_ns = 0;       // how long they were throttled (the kernel's clock)
};

// Every online pod, and the online cgroups outside pods (configured by path
// rules) as one more entry, "(online cgroups outside pods)", with what the
// online class had beyond its pods.
std::vector<OnlinePodLoad> online_loads(const NodeSignals& node);

}  // namespace khagent
