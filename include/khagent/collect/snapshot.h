// One tick's view of the node's cgroup files: every file a tick's decisions
// need, read at most once per tick, lazily, when a signal or a controller
// first asks for it (as oomd's per-interval context), and then served from
// the cache for the rest of the tick. Signals and policy read the node
// only through a snapshot; a new one is taken for each tick and for each
// wake-up between ticks. The reads themselves sit behind NodeReads, which
// tests replace with fixtures.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "khagent/collect/io.h"
#include "khagent/collect/memory.h"
#include "khagent/collect/topology.h"
#include "khagent/model/cgroup_value.h"
#include "khagent/util/result.h"

namespace khagent {

// The node's files, read each time they are asked for. Paths are relative
// to the cgroup2 mount (the same relative path in a v1 hierarchy).
class NodeReads {
 public:
  virtual ~NodeReads() = default;
  // Whether a memory hierarchy can be read (the memory lever's reads fail
  // with ENOTSUP otherwise), and whether it is a v1 one.
  virtual bool has_memory() const = 0;
  virtual Result<MemoryUse> memory(const std::string& cgroup) const = 0;
  virtual Result<MemoryUse> node_memory(const std::string& node_cgroup) const = 0;
  virtual Result<std::map<std::string, uint64_t>> oom_kill_counts(const std::string& cgroup) const = 0;
  virtual Result<std::string> at_own_limit(const std::string& cgroup, const std::string& stop) const = 0;
  // memory.pressure in the cgroup2 mount.
  virtual Result<PsiTotals> memory_pressure(const std::string& cgroup) const = 0;
  // io.pressure in the cgroup2 mount.
  virtual Result<PsiTotals> io_pressure(const std::string& cgroup) const = 0;
  // What the cgroup read and wrote per device: its io.stat in the cgroup2
  // mount, or, where there is none (a hybrid host's cgroup2 has no io
  // controller), the v1 blkio hierarchy's throttle counters.
  virtual Result<IoStat> io_stat(const std::string& cgroup) const = 0;
  // The cgroup's own CPU quota and burst (v2, or the v1 cpu hierarchy).
  virtual std::optional<CpuQuota> cpu_quota(const std::string& cgroup) const = 0;
  virtual std::optional<uint64_t> cpu_burst(const std::string& cgroup) const = 0;
  // Its child cgroups in the cgroup2 mount, as paths, sorted.
  virtual std::vector<std::string> children(const std::string& cgroup) const = 0;
  // The kubelet's CPU manager state (its file named in the configuration).
  virtual Result<CpuManagerState> cpu_manager_state() const = 0;
};

// The real files: a hybrid host's v1 hierarchies where the backend writes
// there.
struct NodeReadRoots {
  std::string unified;     // the cgroup2 mount
  std::string cpu_v1;      // "" when none
  std::string memory;      // where the memory controller is read ("" when none)
  bool memory_v1 = false;  // `memory` is a v1 hierarchy
  std::string cpu_manager_state;
  std::string proc = "/proc";  // the node's memory: its meminfo
  std::string blkio_v1 = {};   // a hybrid host's v1 blkio hierarchy ("" when none)
};
std::unique_ptr<NodeReads> real_node_reads(const NodeReadRoots& roots);

class TickSnapshot {
 public:
  TickSnapshot(const NodeReads& reads, uint64_t now_ns) : reads_(&reads), now_ns_(now_ns) {}

  uint64_t now_ns() const { return now_ns_; }
  bool has_memory() const { return reads_->has_memory(); }
  const Result<MemoryUse>& memory(const std::string& cgroup) const;
  const Result<MemoryUse>& node_memory(const std::string& node_cgroup) const;
  const Result<std::map<std::string, uint64_t>>& oom_kill_counts(const std::string& cgroup) const;
  const Result<std::string>& at_own_limit(const std::string& cgroup, const std::string& stop) const;
  const Result<PsiTotals>& memory_pressure(const std::string& cgroup) const;
  const Result<PsiTotals>& io_pressure(const std::string& cgroup) const;
  const Result<IoStat>& io_stat(const std::string& cgroup) const;
  const std::optional<CpuQuota>& cpu_quota(const std::string& cgroup) const;
  const std::optional<uint64_t>& cpu_burst(const std::string& cgroup) const;
  const std::vector<std::string>& children(const std::string& cgroup) const;
  const Result<CpuManagerState>& cpu_manager_state() const;

  // How many files were read through this snapshot (cache misses): for
  // tests and the tick's cost.
  size_t reads() const { return reads_done_; }

 private:
  template <class T, class F>
  const T& cached(std::map<std::string, T>& cache, const std::string& key, F&& read) const {
    auto it = cache.find(key);
    if (it == cache.end()) {
      reads_done_++;
      it = cache.emplace(key, read()).first;
    }
    return it->second;
  }

  const NodeReads* reads_;
  uint64_t now_ns_;
  mutable size_t reads_done_ = 0;
  mutable std::map<std::string, Result<MemoryUse>> memory_, node_memory_;
  mutable std::map<std::string, Result<std::map<std::string, uint64_t>>> oom_kills_;
  mutable std::map<std::string, Result<std::string>> own_limit_;
  mutable std::map<std::string, Result<PsiTotals>> pressure_, io_pressure_;
  mutable std::map<std::string, Result<IoStat>> io_stat_;
  mutable std::map<std::string, std::optional<CpuQuota>> quota_;
  mutable std::map<std::string, std::optional<uint64_t>> burst_;
  mutable std::map<std::string, std::vector<std::string>> children_;
  mutable std::map<std::string, Result<CpuManagerState>> cpu_manager_;
};

}  // namespace khagent
