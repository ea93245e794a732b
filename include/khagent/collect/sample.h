// Plain data the collector hands to the signals stage.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "khagent/abi/runq.h"
#include "khagent/model/histogram.h"
#include "khagent/model/runq_maps.h"

namespace khagent {

// Counters of one cgroup, summed over CPUs.
struct CgroupCounters {
  uint64_t wait_ns = 0;
  uint64_t waits = 0;
  uint64_t cpu_ns = 0;
  uint64_t preemptions = 0;
  std::array<uint64_t, KH_NR_WAIT_CAUSES> cause_ns{};
  WaitHistogram hist{};
};

// Whether a counter went backwards (entry deleted and created again).
inline bool counters_went_back(const CgroupCounters& now, const CgroupCounters& before) {
  return now.waits < before.waits || now.wait_ns < before.wait_ns || now.cpu_ns < before.cpu_ns ||
         now.preemptions < before.preemptions;
}

// Per-field delta of cumulative counters into d, which holds zeros; after
// counters went back, counts from zero. The histogram moves only with the
// wait count (each wait is counted in both at once), so it is compared only
// then: most moved cgroups of a big node ran without waiting, and the
// histogram is most of the counters.
inline void counters_delta_into(CgroupCounters& d, const CgroupCounters& now, const CgroupCounters& before) {
  if (counters_went_back(now, before)) {
    d = now;
    return;
  }
  auto sub = [](uint64_t a, uint64_t b) { return a >= b ? a - b : 0; };
  d.wait_ns = now.wait_ns - before.wait_ns;
  d.waits = now.waits - before.waits;
  d.cpu_ns = now.cpu_ns - before.cpu_ns;
  d.preemptions = now.preemptions - before.preemptions;
  for (size_t i = 0; i < d.cause_ns.size(); i++) d.cause_ns[i] = sub(now.cause_ns[i], before.cause_ns[i]);
  if (d.waits)
    for (size_t i = 0; i < d.hist.size(); i++) d.hist[i] = sub(now.hist[i], before.hist[i]);
}

// Makes last the reading the next delta starts from. The histogram is taken
// only when the wait count moved: the BPF side adds a wait's bucket after
// its count, so a reading can have the count and not yet the bucket, which
// then shows at the next wait, not lost.
inline void counters_advance(CgroupCounters& last, const CgroupCounters& now) {
  if (now.waits != last.waits || counters_went_back(now, last)) {
    last = now;
    return;
  }
  last.wait_ns = now.wait_ns;
  last.cpu_ns = now.cpu_ns;
  last.preemptions = now.preemptions;
  last.cause_ns = now.cause_ns;
}

inline CgroupCounters counters_delta(const CgroupCounters& now, const CgroupCounters& before) {
  CgroupCounters d;
  counters_delta_into(d, now, before);
  return d;
}

// Whether an interval's counters hold anything. The collector leaves an
// interval's histogram empty when none of these moved, so this is exact for
// its samples.
inline bool counters_moved(const CgroupCounters& d) { return d.waits || d.wait_ns || d.cpu_ns || d.preemptions; }

inline void counters_add(CgroupCounters& into, const CgroupCounters& d) {
  into.wait_ns += d.wait_ns;
  into.waits += d.waits;
  into.cpu_ns += d.cpu_ns;
  into.preemptions += d.preemptions;
  for (size_t i = 0; i < d.cause_ns.size(); i++) into.cause_ns[i] += d.cause_ns[i];
  for (size_t i = 0; i < d.hist.size(); i++) into.hist[i] += d.hist[i];
}

struct ThrottleCounters {
  uint64_t events = 0;
  uint64_t throttled_ns = 0;
};

// Direct memory reclaim by a cgroup's tasks, by enum kh_reclaim_kind (the
// node ran short, or a memory cgroup's limit): time (ns), reclaims, pages.
struct ReclaimCounters {
  std::array<uint64_t, KH_NR_RECLAIM_KINDS> ns{};
  std::array<uint64_t, KH_NR_RECLAIM_KINDS> count{};
  std::array<uint64_t, KH_NR_RECLAIM_KINDS> pages{};
  uint64_t total_ns() const {
    uint64_t t = 0;
    for (auto v : ns) t += v;
    return t;
  }
  bool any() const {
    for (size_t k = 0; k < ns.size(); k++)
      if (ns[k] || count[k] || pages[k]) return true;
    return false;
  }
};

// now - before, field by field; `now` itself where a counter went back (the
// entry was deleted and made again).
inline ReclaimCounters reclaim_delta(const ReclaimCounters& now, const ReclaimCounters& before) {
  for (size_t k = 0; k < now.ns.size(); k++)
    if (now.ns[k] < before.ns[k] || now.count[k] < before.count[k] || now.pages[k] < before.pages[k]) return now;
  ReclaimCounters d;
  for (size_t k = 0; k < now.ns.size(); k++) {
    d.ns[k] = now.ns[k] - before.ns[k];
    d.count[k] = now.count[k] - before.count[k];
    d.pages[k] = now.pages[k] - before.pages[k];
  }
  return d;
}

inline void reclaim_add(ReclaimCounters& into, const ReclaimCounters& d) {
  for (size_t k = 0; k < d.ns.size(); k++) {
    into.ns[k] += d.ns[k];
    into.count[k] += d.count[k];
    into.pages[k] += d.pages[k];
  }
}

// A cgroup's path, relative to the cgroup2 mount ("/" for its root). The
// collector names each cgroup once and every sample shares that string:
// copying a path into each sample every tick was a sixth of the agent's
// tick at thousands of cgroups.
class CgroupPath {
 public:
  CgroupPath() = default;
  CgroupPath(std::string p) : p_(std::make_shared<const std::string>(std::move(p))) {}  // NOLINT: implicit
  CgroupPath(const char* p) : CgroupPath(std::string(p)) {}                             // NOLINT: implicit
  const std::string& str() const {
    static const std::string kEmpty;
    return p_ ? *p_ : kEmpty;
  }
  operator const std::string&() const { return str(); }  // NOLINT: implicit, reads as the string
  bool empty() const { return str().empty(); }
  friend bool operator==(const CgroupPath& a, const std::string& b) { return a.str() == b; }
  friend std::ostream& operator<<(std::ostream& o, const CgroupPath& p) { return o << p.str(); }

 private:
  std::shared_ptr<const std::string> p_;
};

struct CgroupSample {
  uint64_t id = 0;
  CgroupPath path;
  CgroupCounters total;     // since the agent started watching it
  CgroupCounters interval;  // during the last interval
  ThrottleCounters throttle_total;
  ThrottleCounters throttle_interval;
  // Its tasks' direct memory reclaim in the interval (where the vmscan
  // tracepoints are attached).
  ReclaimCounters reclaim_interval;
  ReclaimCounters reclaim_total;  // since the maps were made (the agent's start)
  // An ancestor of tracked cgroups, listed for its own throttling only (no
  // map entries, no counters): not a member of any class or pod itself.
  bool ancestor = false;
};

struct PairSample {
  uint64_t victim = 0;
  uint64_t aggressor = 0;
  uint64_t wait_ns_total = 0;
  uint64_t count_total = 0;
  uint64_t wait_ns_interval = 0;
};

// What the CPUs' stall detectors saw (the stall_stats map, summed over
// CPUs; bpf/runq_stall.bpf.h): time in which a CPU ran nothing at all.
struct StallCounters {
  uint64_t stolen_ns = 0;
  uint64_t stalls = 0;
  uint64_t longest_ns = 0;   // the longest on any CPU (a maximum, not a sum)
  uint64_t ticks = 0;        // timer expiries
  uint32_t cpus_armed = 0;   // CPUs whose timer runs now (the others are idle, or failed)
  uint32_t cpus_failed = 0;  // CPUs whose timer the kernel refused
  int32_t err = 0;           // a refusal's negative errno
  bool available = false;    // the map is read (false: no detector)
};

struct Sample {
  uint64_t ts_ns = 0;        // CLOCK_REALTIME at the end of the interval
  uint64_t interval_ns = 0;  // length of the interval (0 for the first sample)
  ThrottleSource throttle_source = ThrottleSource::None;
  // Every cgroup with map entries (complete), or only those whose counters
  // or throttling moved in the interval and those named for the first time
  // (not complete: Collector::set_changes_only). Consumers that need the
  // idle ones too keep them from earlier samples until they are `removed`.
  // Either way also the ancestors of those cgroups whose own throttling
  // moved (a quota on a pod, a QoS or YARN root), with no counters of their
  // own: they have no map entries, since no task of theirs runs.
  std::vector<CgroupSample> cgroups;
  bool complete = true;
  std::vector<uint64_t> removed;  // cgroups the collector stopped tracking at this tick
  std::vector<PairSample> pairs;  // not complete: only those that moved
  std::array<uint64_t, KH_NR_COUNTERS> bpf_counters{};
  StallCounters stall_total;       // since the maps were loaded
  uint64_t stall_interval_ns = 0;  // stolen_ns in this interval, all CPUs
  uint64_t stall_interval_count = 0;
};

}  // namespace khagent
