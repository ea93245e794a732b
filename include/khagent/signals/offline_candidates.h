// The offline cgroups that could be restrained, found in the cgroup2 tree
// by the kubelet's and the NodeManager's layouts (the policy decides which
// are targets: policy/targets.h), and the CPU each one used.
#pragma once

#include <string>
#include <vector>

#include "khagent/collect/sample.h"
#include "khagent/config/config.h"

namespace khagent {

struct TargetCandidates {
  std::vector<std::string> configured;       // offline.targets, confined, existing
  std::vector<std::string> besteffort_qos;   // existing BestEffort QoS cgroups
  std::vector<std::string> besteffort_pods;  // pod cgroups below them
  std::vector<std::string> yarn_roots;       // existing YARN hierarchy roots
};

// Looks in the cgroup2 tree mounted at `cgroup2`: the configured targets
// (confined to the mount; one that is not goes to `refused` with the
// reason, "TARGET: why"), the BestEffort QoS cgroups and their pods
// (systemd: kubepods.slice/kubepods-besteffort.slice; cgroupfs:
// kubepods/besteffort), the YARN hierarchy at the root, and YARN roots
// found among `offline_parents` (a hierarchy inside the NodeManager's pod).
TargetCandidates find_target_candidates(const std::string& cgroup2, const OfflineConfig& cfg,
                                        const std::vector<std::string>& offline_parents,
                                        std::vector<std::string>* refused = nullptr);

// The CPU a cgroup and everything below it used over the sample's interval, in cores.
double cores_at_or_below(const Sample& s, const std::string& path);

}  // namespace khagent
