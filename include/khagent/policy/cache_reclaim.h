// The reclaim controller: offline page cache reclaimed ahead of need while
// online pods refault, that is, read back their own page cache soon after
// the kernel evicted it (memory.stat workingset_refault_file): a streaming
// offline job's cache is displacing their working set. Each step asks the
// offline parents for some of their inactive page cache (memory.reclaim on
// v2, a limit pulse on v1: the lever table's `reclaim` entry) and is judged
// over the next memory.reclaim_interval: did online refaults fall, did
// online stall more? Steps that do not help, or cost online more stall, are
// spaced further apart (twice, four times the interval, up to 32 times);
// one that helps brings the pace back.
//
// Pure: (what the snapshot says, config, its state) -> asks and a report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "khagent/config/config.h"

namespace khagent {

struct CacheReclaimParent {
  std::string path;
  uint64_t inactive_file = 0;  // page cache the kernel reclaims first
};

struct CacheReclaimInput {
  uint64_t now_ns = 0;
  uint64_t interval_ns = 0;           // since the last call (0: the first)
  uint64_t online_refault_bytes = 0;  // online pods' page cache refaults in that interval
  bool refaults_known = false;        // an online pod's memory.stat has workingset_refault_file
  uint64_t online_stall_us = 0;       // online pods' memory stall (PSI "some"), summed, in that interval
  // Offline parents that may be asked (on v1: those whose limit khagent
  // holds, so a pulse cut short by a crash is restored at restart).
  std::vector<CacheReclaimParent> parents;
};

// Online's memory over one window of memory.reclaim_interval.
struct CacheReclaimWindow {
  double seconds = 0;
  double refault_rate = 0;  // bytes of page cache refaulted per second
  double stall_share = 0;   // stall (some, summed over pods) per second of window
};

enum class CacheReclaimVerdict {
  Helped,   // refaults fell by a quarter or more
  Useless,  // they did not: the next step waits twice as long
  Costly,   // online stalled more after it: the next step waits four times as long
};
const char* cache_reclaim_verdict_name(CacheReclaimVerdict v);

// Why a window closed without a step.
enum class CacheReclaimIdle {
  None,        // a step was asked
  Calm,        // online refaults under memory.reclaim_refault_rate
  Paced,       // too soon after the last step (its pace, backed off)
  NoCache,     // no offline parent holds inactive page cache to ask for
  NoCounters,  // no online pod's memory.stat has workingset_refault_file (kernel before 5.9; v1 before ~6.1)
};
const char* cache_reclaim_idle_name(CacheReclaimIdle i);

struct CacheReclaimReport {
  // A window closed at this step (none: between windows, nothing to say).
  std::optional<CacheReclaimWindow> window;
  // The last step's verdict, when its window closed at this step.
  std::optional<CacheReclaimVerdict> verdict;
  CacheReclaimWindow before;  // with a verdict: the window before that step
  CacheReclaimIdle idle = CacheReclaimIdle::None;
  std::vector<std::pair<std::string, uint64_t>> asks;  // asked now, bytes per parent
  uint64_t offline_inactive = 0;                       // the parents' inactive page cache, in all
  uint32_t backoff = 1;                                // the pace: memory.reclaim_interval times this
};

struct CacheReclaimState {
  uint64_t acc_ns = 0, acc_refault = 0, acc_stall_us = 0;  // the window so far
  bool pending = false;                                    // a step waits for its verdict
  CacheReclaimWindow before;                               // the window before it
  uint64_t step_ns = 0;                                    // when it was asked
  uint32_t backoff = 1;
};

// One call per tick: adds the interval to the window; once the window
// spans memory.reclaim_interval it is closed: the pending step judged, and
// a new step asked when online refaulted at least memory.reclaim_refault_rate
// and the pace allows. Each parent with at least 1 MiB of inactive page
// cache is asked for the larger of memory.reclaim_step and four times the
// window's refaults, at most its inactive page cache.
CacheReclaimReport cache_reclaim_step(const CacheReclaimInput& in, const MemoryConfig& cfg, CacheReclaimState& st);

}  // namespace khagent
