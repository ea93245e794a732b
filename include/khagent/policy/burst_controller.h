// The online burst controller: CPU burst (cpu.max.burst, v1
// cpu.cfs_burst_us) for online pods whose waits are their own throttling,
// on the pod and on each of its containers, never over a burst someone
// else wrote.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace khagent {

// What the controller decided about one pod or cgroup, for the log.
struct BurstNote {
  enum class Kind {
    NotActed,        // self-throttled, but the lever is off or it is no pod's cgroup
    Given,           // self-throttled: burst given to the pod and its containers
    StillThrottled,  // self-throttled with its burst in place
    NoBurstFile,     // the kernel has no burst file (before 5.14)
    Foreign,         // a burst khagent did not write: left alone
  };
  Kind kind = Kind::Given;
  std::string path;
  std::string why;         // the verdict's reason (NotActed, Given, StillThrottled)
  bool lever_off = false;  // NotActed: online.burst_share is 0 (else: not a pod's cgroup)
  uint64_t burst_us = 0;   // Foreign: its burst
};

struct BurstReport {
  double share = 0;    // online.burst_share
  size_t pods = 0;     // pods given a burst
  size_t cgroups = 0;  // their cgroups with a quota, written this tick
  std::vector<BurstNote> notes;
};

}  // namespace khagent
