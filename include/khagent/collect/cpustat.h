// Throttling from the kernel's own accounting (cpu.stat), the fallback source
// where fentry on throttle_cfs_rq/unthrottle_cfs_rq is unavailable.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "khagent/collect/sample.h"
#include "khagent/model/cgroup_value.h"

namespace khagent {

// "key value" lines (cpu.stat, memory.stat) to a map; malformed lines skipped.
std::unordered_map<std::string, uint64_t> parse_flat_keyed(const std::string& text);

// From /proc/<pid>/cgroup text, the path in the v1 hierarchy whose controller
// list contains "cpu" (e.g. "4:cpu,cpuacct:/foo" gives "/foo").
std::optional<std::string> v1_cpu_path(const std::string& proc_pid_cgroup);

// A cgroup's CPU quota and where its cgroups are that could hold one.
// `cpu_quota_text`: the quota from a v2 cpu.max ("max 100000", "20000
// 100000") or the v1 pair (cpu.cfs_quota_us, cpu.cfs_period_us: "-1" is no
// limit); nullopt for text the kernel would not have written.
std::optional<CpuQuota> parse_cpu_max(const std::string& text);
std::optional<CpuQuota> parse_v1_cfs(const std::string& quota_text, const std::string& period_text);
// The quota of the cgroup at `path` (relative to the cgroup2 mount): its
// cpu.max where cgroup v2 has the cpu controller, else the v1 cpu
// hierarchy's files at the same path (a hybrid host; cpu_v1_root empty on
// pure v2). nullopt: unreadable (no such cgroup, no cpu controller).
std::optional<CpuQuota> read_cpu_quota(const std::string& cgroup2_root, const std::string& cpu_v1_root,
                                       const std::string& path);
// Its CPU burst in us, from the same place (v2 cpu.max.burst, v1
// cpu.cfs_burst_us); nullopt where the kernel has none (before 5.14) or
// the cgroup cannot be read.
std::optional<uint64_t> read_cpu_burst(const std::string& cgroup2_root, const std::string& cpu_v1_root,
                                       const std::string& path);

class ThrottleStatReader {
 public:
  virtual ~ThrottleStatReader() = default;
  // Cumulative throttling of the cgroup `id` at `path`; nullopt if unreadable.
  virtual std::optional<ThrottleCounters> read(uint64_t id, const std::string& path) = 0;
  // Called before each tick's reads.
  virtual void new_round() {}
};

class CpuStatThrottleReader : public ThrottleStatReader {
 public:
  // cpu_v1_root may be empty (pure cgroup v2 host).
  CpuStatThrottleReader(std::string cgroup2_root, std::string cpu_v1_root, std::string proc_root = "/proc");

  // Cumulative throttling of the cgroup at `path` (relative to the cgroup2
  // root): cgroup v2 cpu.stat nr_throttled/throttled_usec where the cpu
  // controller is enabled, else the v1 cpu cgroup of one of its tasks
  // (nr_throttled/throttled_time); a cgroup without tasks of its own (a pod
  // or QoS root) is found in v1 through a descendant with tasks, where both
  // hierarchies have the same shape below it. nullopt if neither can be read.
  // `id` keys the cached v2 -> v1 mapping (refreshed every 60 s).
  std::optional<ThrottleCounters> read(uint64_t id, const std::string& path) override;

  // Starts a new round of reads: a v1 cpu.stat shared by many cgroups is read
  // once per round.
  // Also drops mappings unused for a while (cgroups that went away).
  void new_round() override;

 private:
  // A v1 cpu.stat, shared by the v2 cgroups whose tasks are in its cgroup.
  struct V1File {
    std::string path;
    uint64_t round = 0;  // the round `value` was read in
    std::optional<ThrottleCounters> value;
  };
  struct V1Entry {
    std::shared_ptr<V1File> file;  // null: the cgroup has no task to map through
    std::chrono::steady_clock::time_point when;
  };
  // The v1 cpu cgroup of the tasks of the v2 cgroup at `path`.
  std::optional<std::string> v1_path_of_tasks(const std::string& path) const;
  // Same, or for a cgroup without tasks, through a descendant with some.
  std::optional<std::string> v1_path_of(const std::string& path) const;
  // The v1 cpu.stat of cgroup `id` at `path` (cached), or null.
  V1File* v1_stat_file(uint64_t id, const std::string& path);

  std::string v2_root_;
  std::string v1_root_;
  std::string proc_root_;
  // By cgroup id: hashing paths for every active cgroup every tick was a
  // twentieth of the agent's tick at thousands of cgroups.
  std::unordered_map<uint64_t, V1Entry> v1_cache_;
  std::unordered_map<std::string, std::weak_ptr<V1File>> v1_files_;  // by path, consulted when mapping
  uint64_t round_ = 1;
  int v2_has_cpu_ = -1;  // does the cgroup2 root offer the cpu controller? (-1: not known yet)
};

}  // namespace khagent
