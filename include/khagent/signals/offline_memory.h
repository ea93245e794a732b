// The memory policy's input for one tick: the node's capacity and working
// set, and the offline parents' working sets.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "khagent/collect/memory.h"
#include "khagent/collect/snapshot.h"

namespace khagent {

// What the node uses this tick, working sets (usage less inactive page
// cache, as the kubelet counts them), in bytes.
struct MemoryInput {
  uint64_t capacity = 0;      // the node's memory (or the node cgroup's limit); 0: unknown
  uint64_t node_used = 0;     // everyone's working set, offline included
  uint64_t offline_used = 0;  // the offline parents' working sets
  uint64_t now_ns = 0;
  // The share of the last interval an online cgroup spent stalled on
  // memory (PSI "some" of its memory.pressure), 0..1: the largest, or with
  // a node cgroup the most stalled pod's not at its own limit.
  double online_stall_share = 0;
  // Between ticks: the kernel's PSI trigger fired on this online cgroup
  // (it stalled over memory.stall_limit of memory.stall_window); none: no
  // trigger, the share above decides.
  std::optional<std::string> stall_trigger;
  // Direct reclaim online tasks paid in the last interval (ns, from the
  // vmscan tracepoints; 0 where they are not attached): the node's (the
  // page allocator ran short) and at memory cgroup limits.
  uint64_t online_node_reclaim_ns = 0;
  uint64_t online_memcg_reclaim_ns = 0;
  uint64_t interval_ns = 0;    // the interval those cover (0: unknown)
  uint64_t node_usage = 0;     // a node cgroup's use, page cache included (0: unknown, or the whole node)
  uint64_t offline_usage = 0;  // the offline parents' use, page cache included (0: unknown)
  // The whole node's high watermarks (0: unknown, or a node cgroup, which
  // has none): memory kswapd keeps free, never the online pods'.
  uint64_t watermark_high = 0;
  // The most online and system grew (working sets) in any second of the
  // last five minutes; none: not yet known (under 30 s of ticks).
  std::optional<uint64_t> online_growth = {};
  // Online page cache shown in use: what online pods read back soon after
  // the kernel evicted it, decayed over memory.refault_halflife and at most
  // their inactive page cache (RefaultCredit, policy/memory.h); counted
  // with online's working set.
  uint64_t online_refault_credit = 0;
  // The stalled online cgroup (or one of its containers) is at its own
  // memory limit: "path: use of limit"; none: not, or no stall.
  std::optional<std::string> stall_own_limit = {};
};

// A cgroup whose memory could not be read this tick.
struct MemoryProblem {
  std::string what;  // "offline /hadoop-yarn", "the node (/node)": also the key a lasting problem is logged under
  Error error;
};

struct MemorySignals {
  MemoryInput input;
  std::map<std::string, uint64_t> used;   // working set of each parent read
  std::map<std::string, uint64_t> usage;  // and its use, page cache included
  std::vector<MemoryProblem> problems;    // what could not be read
};

// Reads each offline parent (paths in the memory hierarchy, the same
// relative paths as in the cgroup2 mount) and the node. A parent missing
// from the memory hierarchy is left out of `used` (and of the lever) with
// a problem line; a node that cannot be read leaves input.capacity 0.
MemorySignals offline_memory(const TickSnapshot& snap, const std::string& node_cgroup,
                             const std::vector<std::string>& parents);

// The memory stall of online cgroups between two calls, from their PSI
// totals (memory.pressure in the cgroup2 mount; kernels with PSI per cgroup).
struct MemoryStall {
  uint64_t some_us = 0;  // summed over the cgroups: time some task of theirs stalled
  uint64_t full_us = 0;  // time all their tasks stalled
  double max_share = 0;  // the largest "some" of one cgroup, as a share of the interval
  std::string worst;     // that cgroup
  // Every cgroup that stalled, with its share, the largest first.
  std::vector<std::pair<std::string, double>> shares;
  size_t unreadable = 0;  // cgroups without a readable memory.pressure
};
class MemoryStallMeter {
 public:
  // A cgroup's first reading only starts its count; cgroups not in `paths`
  // are forgotten.
  MemoryStall step(const TickSnapshot& snap, const std::vector<std::string>& paths);

 private:
  std::map<std::string, PsiTotals> last_;
  uint64_t last_ns_ = 0;
};

// OOM kills and refaults (pages) of online pods and offline parents between
// two calls, from their counters. A cgroup's first reading only starts its
// count; cgroups not listed are forgotten; unreadable ones count nothing. On
// v1, where each group counts its own kills, only increases count: a group
// new since the last reading counts from 0, a group removed counts nothing
// (kills in a group made and removed between two readings are missed).
struct MemoryEvents {
  uint64_t online_oom_kills = 0;
  uint64_t offline_oom_kills = 0;
  uint64_t online_refaults = 0;
  uint64_t offline_refaults = 0;
  std::vector<std::pair<std::string, uint64_t>> online_killed;  // online cgroups with kills, and how many
};
// The online pods' page cache refaults (memory.stat workingset_refault_file,
// v1: its total_ form) between two calls, in bytes, and their inactive page
// cache now (what the working set leaves out, where refaulted pages wait
// to be evicted again). A pod's first reading only starts its count; pods
// not listed are forgotten.
struct FileRefaults {
  uint64_t bytes = 0;
  bool known = false;          // some pod's memory.stat has workingset_refault_file
  uint64_t inactive_file = 0;  // summed over the pods read
};
class FileRefaultMeter {
 public:
  // The counters count pages: of this size (0: this machine's page size).
  explicit FileRefaultMeter(uint64_t page_bytes = 0);
  FileRefaults step(const TickSnapshot& snap, const std::vector<std::string>& pods);

 private:
  std::map<std::string, uint64_t> last_;  // pages
  uint64_t page_;
};

class MemoryEventMeter {
 public:
  MemoryEvents step(const TickSnapshot& snap, const std::vector<std::string>& online,
                    const std::vector<std::string>& offline);

 private:
  struct Counts {
    std::map<std::string, uint64_t> kills;  // by group (v1: each of the subtree)
    std::optional<uint64_t> refaults;
  };
  std::map<std::string, Counts> last_;
};

}  // namespace khagent
