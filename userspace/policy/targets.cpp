#include "khagent/policy/targets.h"

#include <set>

#include "khagent/signals/workload.h"

namespace khagent {

const char* target_kind_name(TargetKind k) {
  switch (k) {
    case TargetKind::YarnRoot: return "yarn-root";
    case TargetKind::BestEffortQos: return "besteffort-qos";
    case TargetKind::BestEffortPod: return "besteffort-pod";
    case TargetKind::Configured: return "configured";
    case TargetKind::OnlinePod: return "online-pod";
    case TargetKind::YarnContainer: return "yarn-container";
  }
  return "configured";
}

std::vector<OfflineTarget> select_targets(const TargetCandidates& c, const OfflineConfig& cfg) {
  std::vector<OfflineTarget> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& p, TargetKind k) {
    if (p.empty() || p == "/" || !seen.insert(p).second) return;
    OfflineTarget t;
    t.path = p;
    t.kind = k;
    out.push_back(std::move(t));
  };
  if (cfg.yarn)
    for (const auto& p : c.yarn_roots) add(p, TargetKind::YarnRoot);
  if (cfg.besteffort) {
    for (const auto& p : c.besteffort_qos) add(p, TargetKind::BestEffortQos);
    for (const auto& p : c.besteffort_pods) add(p, TargetKind::BestEffortPod);
  }
  for (const auto& p : c.configured) {
    // A configured path keeps the rules of what it is: the kubelet's QoS
    // cgroups and pods, and the NodeManager's containers, own their weight.
    auto id = identify_cgroup(p, cfg.yarn_hierarchy);
    TargetKind k = TargetKind::Configured;
    if (id.k8s && id.pod_uid.empty()) k = TargetKind::BestEffortQos;
    else if (id.k8s && id.container_id.empty()) k = TargetKind::BestEffortPod;
    else if (id.yarn && id.yarn_container.empty()) k = TargetKind::YarnRoot;
    else if (id.k8s || !id.yarn_container.empty()) continue;  // containers: never written
    add(p, k);
  }
  return out;
}

std::vector<OfflineTarget> tick_targets(const std::string& cgroup2, const OfflineConfig& cfg,
                                        const std::vector<std::string>& offline_parents, const Sample& sample,
                                        std::vector<std::string>& refused) {
  auto out = select_targets(find_target_candidates(cgroup2, cfg, offline_parents, &refused), cfg);
  for (auto& t : out) t.usage_cores = cores_at_or_below(sample, t.path);
  return out;
}

}  // namespace khagent
