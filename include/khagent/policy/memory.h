// The offline memory budget: how much memory the offline parents may hold,
// from what the rest of the node uses. Pure functions of plain data, no
// files; the lever table splits the budget between the parents
// (policy/lever_table.h, the memory lever).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "khagent/config/config.h"
#include "khagent/signals/offline_memory.h"

namespace khagent {

struct MemoryState {
  bool initialized = false;
  uint64_t budget = 0;
  uint64_t last_ns = 0;      // the last move, or the last step with no growth pending
  uint64_t last_cut_ns = 0;  // the last cut for an online stall
};

struct MemoryDecision {
  uint64_t budget = 0;   // what the offline parents may hold in all
  uint64_t ceiling = 0;  // capacity - reserve - what the rest uses
  uint64_t reserve = 0;
  bool reserve_measured = false;  // sized from the measurements, not the fixed rule
  uint64_t eviction = 0;          // the kubelet's eviction threshold, kept free too
  bool stalled = false;           // the ceiling is the stall cut, not the arithmetic
  // The node's memory is critical: less than half the reserve is free above
  // the eviction threshold while offline holds memory (the limits did not
  // hold it); why, for the log and the YARN last resort; none: not critical.
  std::optional<std::string> critical;
  bool changed = false;
  std::string reason;  // when changed
};

// The reserve kept free. At most the larger of memory.reserve and
// memory.reserve_share of the capacity (all of it while nothing is
// measured yet); once online's growth is known, what the measurements ask:
// the larger of memory.reserve_min, the kernel's high watermarks (the
// whole node) and the most online grew in one second over the last five
// minutes. `measured` says which was taken.
uint64_t memory_reserve(const MemoryInput& in, const MemoryConfig& cfg, bool* measured = nullptr);
// The rule: ceiling = capacity - eviction threshold - reserve - (node_used -
// offline_used). The
// first step takes the ceiling; after that a lower ceiling is taken at once
// (cut fast) and a higher one is approached by at most grow_per_second
// (grow slowly); moves smaller than the deadband are not made, except to
// reach a ceiling of 0. When an online cgroup stalled on memory more than
// stall_limit of the interval while the node is short (less than twice the
// reserve free above the eviction threshold, or online tasks spent
// stall_limit of the interval in the node's direct reclaim, or less than
// twice the reserve is unused counting page cache as used while the stalled
// cgroup is not at its own limit), the ceiling is at most what offline holds
// (its use with page cache where known, else offline_used) cut by
// stall_cut, at most once a second.
MemoryDecision memory_step(const MemoryInput& in, const MemoryConfig& cfg, MemoryState& st);

// One offline parent's limit: its working set plus an equal part of the
// room the budget leaves, or, when the parents already hold more than the
// budget, its working set scaled down to fit; never under min_offline.
// Rounded down to MiB so that small changes of use do not rewrite the file.
uint64_t memory_share(uint64_t budget, uint64_t used, uint64_t total_used, size_t parents, const MemoryConfig& cfg);

// A YARN root's backstop (memory.max, v2): its limit (memory_share) plus
// half the reserve, so that what the limit cannot stop (an anonymous hog
// creeping past memory.high: no swap, nothing to reclaim) meets a hard
// limit and the kernel's OOM kill stays inside offline. A root that holds
// more than that now (`usage`, page cache included) is held where it is
// (its use plus kBackstopSlack, never above the backstop before, `prev`,
// unless it holds more than that: a backstop write that failed): a cut of
// the budget kills nothing, growth past the backstop does.
// Rounded up to MiB.
inline constexpr uint64_t kBackstopSlack = uint64_t{16} << 20;

// The most online and system grew (their working sets: the node's less
// offline's) within one second, over the last five minutes, from one
// reading a tick; none before 30 s of readings.
class OnlineGrowth {
 public:
  std::optional<uint64_t> step(uint64_t now_ns, uint64_t others);

 private:
  std::deque<std::pair<uint64_t, uint64_t>> recent_;  // (time, reading) of the last second
  std::deque<std::pair<uint64_t, uint64_t>> rises_;   // (time, rise), decreasing: the front is the most
  uint64_t first_ns_ = 0;
};
uint64_t memory_backstop(uint64_t limit, uint64_t reserve, uint64_t usage, std::optional<uint64_t> prev);

// Online page cache shown to be in use: each tick adds the bytes online
// pods refaulted (read back soon after the kernel evicted them) and halves
// the sum over `halflife_ns` (0: nothing counted); the credit is that sum,
// at most online's inactive page cache now (the part of its cache the
// working set counts as free). The budget counts it with online's working
// set, so a streamer's cache stops pushing out online's: online refaults,
// offline gives up as much, and gets it back over the half-life.
class RefaultCredit {
 public:
  uint64_t step(uint64_t now_ns, uint64_t refault_bytes, uint64_t online_inactive, uint64_t halflife_ns);

 private:
  double sum_ = 0;
  uint64_t last_ns_ = 0;
};

}  // namespace khagent
