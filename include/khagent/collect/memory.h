// Memory use from the kernel's files: a cgroup's usage, inactive page cache
// and limit (cgroup v2 or a hybrid host's v1 memory hierarchy), the node's
// from /proc/meminfo, and PSI totals.
#pragma once

#include <poll.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "khagent/util/file.h"
#include "khagent/util/result.h"

namespace khagent {

struct MemoryUse {
  uint64_t usage = 0;             // memory.current (v1: memory.usage_in_bytes); the node: total - free (or - available)
  uint64_t inactive_file = 0;     // page cache the kernel reclaims first (v1: total_inactive_file)
  std::optional<uint64_t> limit;  // memory.max (v1: memory.limit_in_bytes); the node: MemTotal; none: no limit
  // Pages read back soon after the kernel reclaimed them (memory.stat's
  // workingset_refault_anon + _file, v1: their total_ forms): the group's
  // working set did not fit. None: this kernel's memory.stat has none.
  std::optional<uint64_t> refaults;
  // The page cache among them (workingset_refault_file, 5.9+): what
  // reclaiming someone else's cache gives back. None: this kernel has no split.
  std::optional<uint64_t> refaults_file = {};
  // The whole node only: the kernel's high watermarks, summed over its
  // zones (/proc/zoneinfo): memory kswapd keeps free; none: not read.
  std::optional<uint64_t> watermark_high = {};
  // What the kubelet calls the working set: usage less inactive page cache.
  uint64_t working_set() const { return usage > inactive_file ? usage - inactive_file : 0; }
};

// A key's value in memory.stat-like text ("key value" lines); none if absent.
std::optional<uint64_t> stat_value(std::string_view text, std::string_view key);
// /proc/meminfo: limit = MemTotal; usage = MemTotal - MemFree and
// inactive_file = Inactive(file) (the kubelet's node working set), or where
// those are missing usage = MemTotal - MemAvailable (kB in the file).
Result<MemoryUse> parse_meminfo(std::string_view text);
// The sum of the "high" watermarks (pages) of /proc/zoneinfo's zones; none
// when the text has none.
std::optional<uint64_t> parse_zoneinfo_high(std::string_view text);
// "total=" of the "some" and "full" lines of a PSI file, in microseconds,
// and their "avg10=": the share of the last 10 s stalled, in percent.
struct PsiTotals {
  uint64_t some_us = 0;
  uint64_t full_us = 0;
  double some_avg10 = 0;
  double full_avg10 = 0;
};
Result<PsiTotals> parse_psi(std::string_view text);
// parse_psi() of a file (a cgroup's memory.pressure in the cgroup2 mount).
Result<PsiTotals> read_psi(const std::string& path);

// PSI triggers (the kernel's Documentation/accounting/psi.rst): a cgroup's
// memory.pressure opened read-write, with "some STALL WINDOW" written to it,
// raises POLLPRI once its tasks stalled STALL us within any WINDOW us, at
// most once a window; poll() itself clears the event. POLLERR: the cgroup
// is gone. One trigger per cgroup, kept open between calls.
class PsiTriggers {
 public:
  // `window_us` 500000 to 10000000 as the kernel takes them. A writer
  // without CAP_SYS_RESOURCE gets only windows in whole multiples of 2 s:
  // where the first trigger is refused for that, the window is raised to
  // the next such multiple, the stall scaled with it, and note() says so.
  PsiTriggers(std::string unified_root, uint64_t stall_us, uint64_t window_us);
  // Opens a trigger for each of `paths` that has none and closes those of
  // paths not listed. Returns one line per trigger that could not be made
  // (tried again at the next call).
  std::vector<std::string> sync(const std::vector<std::string>& paths);
  // One pollfd (POLLPRI) per trigger, appended.
  void add_to(std::vector<pollfd>& fds) const;
  // The cgroup of a trigger's descriptor; nullptr if it is none of ours.
  const std::string* path_of(int fd) const;
  // Closes the trigger of a cgroup that is gone (POLLERR).
  void drop(const std::string& path) { fds_.erase(path); }
  size_t size() const { return fds_.size(); }
  std::string spec() const;  // "some 50000 1000000"
  const std::string& note() const { return note_; }

 private:
  Result<Fd> open_one(const std::string& file) const;
  std::string root_;
  uint64_t stall_us_, window_us_;
  std::string note_;
  std::map<std::string, Fd> fds_;
};

class MemoryReader {
 public:
  // `root`: the mount holding the memory controller (the cgroup2 mount, or
  // the v1 memory hierarchy when `v1`).
  MemoryReader(std::string root, bool v1, std::string proc_root = "/proc");
  Result<MemoryUse> cgroup(const std::string& path) const;
  // The OOM kill counters of the cgroup and below, by group: v2 one,
  // memory.events oom_kill of `path` (hierarchical); v1 memory.oom_control
  // oom_kill of every group of the subtree (each counts its own; a group
  // removed takes its count with it). A walk cut short is an error.
  Result<std::map<std::string, uint64_t>> oom_kill_counts(const std::string& path) const;
  // Their sum: the processes the OOM killer took there.
  Result<uint64_t> oom_kills(const std::string& path) const;
  // The pressure domain: the whole node, or a cgroup (memory.node_cgroup)
  // whose limit is the capacity (MemTotal where it has none). The whole
  // node's has its high watermarks too (read at most once a minute).
  Result<MemoryUse> node(const std::string& node_cgroup) const;
  // Whether `path`, one of its children (a pod's containers) or one of its
  // ancestors below `stop` (the node cgroup; "" for the root) is at its
  // memory limit: its use, page cache included, within the larger of
  // limit / 32 and 4 MiB of memory.max or memory.high (v1:
  // memory.limit_in_bytes). A memory stall there is that limit's, not the
  // node's. "path: use of limit" for the first found, "" for none. A child
  // removed meanwhile is not at its limit; any other read error is an error.
  Result<std::string> at_own_limit(const std::string& path, const std::string& stop) const;
  bool v1() const { return v1_; }

 private:
  std::string root_;
  bool v1_;
  std::string proc_root_;
  // The watermarks change only with memory hotplug or their sysctls, and
  // zoneinfo grows with the CPUs: read once a minute.
  mutable std::optional<uint64_t> watermark_high_;
  mutable uint64_t watermark_read_ns_ = 0;
};

}  // namespace khagent
