// Memory use from the kernel's files: a cgroup's usage, inactive page cache
// and limit (cgroup v2 or a hybrid host's v1 memory hierarchy), the node's
// from /proc/meminfo, and PSI totals.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "khagent/util/result.h"

namespace khagent {

struct MemoryUse {
  uint64_t usage = 0;             // memory.current (v1: memory.usage_in_bytes); the node: total - free (or - available)
  uint64_t inactive_file = 0;     // page cache the kernel reclaims first (v1: total_inactive_file)
  std::optional<uint64_t> limit;  // memory.max (v1: memory.limit_in_bytes); the node: MemTotal; none: no limit
  // What the kubelet calls the working set: usage less inactive page cache.
  uint64_t working_set() const { return usage > inactive_file ? usage - inactive_file : 0; }
};

// A key's value in memory.stat-like text ("key value" lines); none if absent.
std::optional<uint64_t> stat_value(std::string_view text, std::string_view key);
// /proc/meminfo: limit = MemTotal; usage = MemTotal - MemFree and
// inactive_file = Inactive(file) (the kubelet's node working set), or where
// those are missing usage = MemTotal - MemAvailable (kB in the file).
Result<MemoryUse> parse_meminfo(std::string_view text);
// "total=" of the "some" and "full" lines of a PSI file, in microseconds.
struct PsiTotals {
  uint64_t some_us = 0;
  uint64_t full_us = 0;
};
Result<PsiTotals> parse_psi(std::string_view text);
// parse_psi() of a file (a cgroup's memory.pressure in the cgroup2 mount).
Result<PsiTotals> read_psi(const std::string& path);

class MemoryReader {
 public:
  // `root`: the mount holding the memory controller (the cgroup2 mount, or
  // the v1 memory hierarchy when `v1`).
  MemoryReader(std::string root, bool v1, std::string proc_root = "/proc");
  Result<MemoryUse> cgroup(const std::string& path) const;
  // The pressure domain: the whole node, or a cgroup (memory.node_cgroup)
  // whose limit is the capacity (MemTotal where it has none).
  Result<MemoryUse> node(const std::string& node_cgroup) const;
  bool v1() const { return v1_; }

 private:
  std::string root_;
  bool v1_;
  std::string proc_root_;
};

}  // namespace khagent
