// The online burst controller: CPU burst (cpu.max.burst, v1
// cpu.cfs_burst_us) for online pods whose waits are their own throttling,
// on the pod and on each of its containers, never over a burst someone
// else wrote.
//
// A pod is judged over a window of ticks (online.self_throttle_window), not
// one tick: a pod that answers a few requests a second has a few waits a
// tick, far under online.min_waits, and its long throttled waits were never
// judged at all. The window is judged once it holds min_waits waits, or 2
// CFS periods the kernel throttled the pod in (the kernel's count, not a
// sample).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace khagent {

// What the controller decided about one cgroup, for the log.
struct BurstNote {
  enum class Kind {
    NoBurstFile,  // the kernel has no burst file (before 5.14)
    Foreign,      // a burst khagent did not write: left alone
  };
  Kind kind = Kind::Foreign;
  std::string path;
  uint64_t burst_us = 0;  // Foreign: its burst
  std::string pod;        // the pod it belongs to
};

// One online pod as the controller sees it: its waits over the window, the
// verdict, and the burst in force or why none.
struct BurstPod {
  enum class Verdict {
    NoThrottling,      // no throttled wait in the window
    TooFew,            // throttled waits, too few to judge yet
    NotSelfThrottled,  // judged: its waits are not mostly its own throttling, or short
    SelfThrottled,     // judged: its waits are mostly its own throttling, over the target
  };
  enum class Burst {
    None,     // not self-throttled and never given one
    Given,    // given this tick
    InForce,  // given at an earlier tick (kept while the pod lives)
    Refused,  // self-throttled, but no burst: see refusal
  };
  enum class Refusal {
    None,
    LeverOff,     // online.burst_share is 0
    NotAPod,      // the online cgroups outside pods, summed: no one cgroup to write
    NoQuota,      // neither the pod nor a container has a quota: an ancestor's throttles it
    NoBurstFile,  // the kernel has no burst file
    Foreign,      // each cgroup with a quota has a burst khagent did not write
  };
  std::string path;
  // Over the window (ending at this tick).
  double window_s = 0;
  uint64_t waits = 0;
  uint64_t wait_ns = 0;
  uint64_t throttled_wait_ns = 0;  // wait because its own quota throttled it
  uint64_t throttled_periods = 0;  // CFS periods the kernel throttled it in
  double wait_p99_us = 0;
  Verdict verdict = Verdict::NoThrottling;
  std::string why;  // the verdict, with its figures
  Burst burst = Burst::None;
  Refusal refusal = Refusal::None;
  uint64_t burst_us = 0;  // in force: the largest of its cgroups' bursts
  size_t cgroups = 0;     // in force: its cgroups carrying it this tick
  // A refusal or a grant first seen this tick (logged once per pod); a pod
  // still self-throttled with its burst in place is logged once a minute.
  bool first = false;
};

// BurstPod::Refusal values (None included), for tables indexed by them.
constexpr size_t kNrBurstRefusals = static_cast<size_t>(BurstPod::Refusal::Foreign) + 1;

const char* verdict_name(BurstPod::Verdict v);
const char* refusal_name(BurstPod::Refusal r);  // a metric label: lever_off, not_a_pod, ...
// One line: the refusal, in words.
std::string refusal_text(BurstPod::Refusal r);

struct BurstReport {
  double share = 0;              // online.burst_share
  size_t pods = 0;               // pods with a burst in force
  size_t cgroups = 0;            // their cgroups with a quota, written this tick
  std::vector<BurstPod> online;  // every online pod, by path
  std::vector<BurstNote> notes;
};

}  // namespace khagent
