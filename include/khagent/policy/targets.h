// Which offline cgroups khagent writes, and what owns each one's weight.
// Pure functions of plain data, no files.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "khagent/config/config.h"
#include "khagent/model/cgroup_value.h"
#include "khagent/signals/offline_candidates.h"

namespace khagent {

// A cgroup khagent writes: an offline one, and what owns its weight; or an
// online pod that gets CPU burst.
enum class TargetKind {
  YarnRoot,       // the YARN hierarchy root: the NodeManager writes its children only
  BestEffortQos,  // kubepods-besteffort: the kubelet writes its cpu.shares/cpu.weight
  BestEffortPod,  // a BestEffort pod: the kubelet writes its shares once, at creation
  Configured,     // offline.targets
  OnlinePod,      // an online pod throttled by its own quota: the burst lever only
  YarnContainer,  // a YARN container (a YARN root's child): the oom_group lever only
};
const char* target_kind_name(TargetKind k);

struct OfflineTarget {
  std::string path;  // relative to the cgroup2 mount
  TargetKind kind = TargetKind::Configured;
  double usage_cores = 0;     // last tick
  uint64_t memory_used = 0;   // working set in bytes, last tick
  bool memory_known = false;  // it is in the memory hierarchy and was read
  // OnlinePod: its own quota (the kubelet's cpu.max, v1 cpu.cfs_quota_us),
  // as read this tick; none: no quota or unreadable.
  std::optional<CpuQuota> quota;
};

// Which of the candidates found in the cgroup tree
// (signals/offline_candidates.h) are targets, and of what kind.
std::vector<OfflineTarget> select_targets(const TargetCandidates& c, const OfflineConfig& cfg);

// A tick's targets: the candidates under the cgroup2 mount, selected, each
// with its CPU use from the sample; `refused`: configured targets ignored,
// one line each.
std::vector<OfflineTarget> tick_targets(const std::string& cgroup2, const OfflineConfig& cfg,
                                        const std::vector<std::string>& offline_parents, const Sample& sample,
                                        std::vector<std::string>& refused);

}  // namespace khagent
