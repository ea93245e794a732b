// Block IO signals of a tick: how long each online pod's tasks stalled on
// IO (io.pressure), and what each offline cgroup read and wrote on each
// device (io.stat, or a hybrid host's v1 blkio counters), over the interval
// since the last tick.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "khagent/collect/io.h"
#include "khagent/collect/memory.h"
#include "khagent/collect/snapshot.h"

namespace khagent {

struct IoPodStall {
  std::string pod;
  uint64_t some_us = 0;   // some of its tasks stalled on IO, in the interval
  uint64_t full_us = 0;   // all of its runnable tasks did
  double some_share = 0;  // some_us over the interval
  IoStat devices;         // what it read and wrote per device in the interval (empty: unknown or none)
};

struct IoOfflineUse {
  std::string cgroup;
  std::string device;  // major:minor
  IoCounters delta;    // in the interval
};

struct IoSignals {
  uint64_t interval_ns = 0;             // 0: the first step, nothing to compare yet
  std::vector<IoPodStall> online;       // every online pod whose io.pressure could be read
  std::vector<IoOfflineUse> offline;    // each offline cgroup and device with IO in the interval, most bytes first
  std::vector<std::string> unreadable;  // "cgroup: why" of the files that could not be read
};

// Keeps the last totals; `step` turns a snapshot's totals into deltas. A
// counter that went backwards (a cgroup made again under the same path)
// starts over from what it shows now.
class IoTracker {
 public:
  IoSignals step(const TickSnapshot& snap, const std::vector<std::string>& online_pods,
                 const std::vector<std::string>& offline);

 private:
  uint64_t last_ns_ = 0;
  std::map<std::string, PsiTotals> psi_;
  std::map<std::string, IoStat> stat_;
};

// The time a pod stalled on IO per IO it completed in the interval (µs):
// for a pod with one IO in flight at a time, its mean IO latency; it grows
// with the queueing other cgroups' IO adds, where the stall share of an
// IO-bound pod stays high whatever its latency. A stall with no IO done
// counts as one IO.
double wait_per_io_us(const IoPodStall& p);

// The delta of `now` over `before` per device (a device missing before
// counts from zero; a counter that went backwards counts from zero).
IoStat io_delta(const IoStat& before, const IoStat& now);

}  // namespace khagent
