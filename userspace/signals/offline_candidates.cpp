#include "khagent/signals/offline_candidates.h"

#include <filesystem>

#include "khagent/signals/workload.h"
#include "khagent/util/cgroup_path.h"
#include "khagent/util/strings.h"

namespace khagent {

TargetCandidates find_target_candidates(const std::string& cgroup2, const OfflineConfig& cfg,
                                        const std::vector<std::string>& offline_parents,
                                        std::vector<std::string>* refused) {
  TargetCandidates c;
  auto existing = [&](const std::string& p) {
    std::error_code ec;
    return std::filesystem::is_directory(cgroup2 + p, ec);
  };
  for (const auto& t : cfg.targets) {
    auto p = confine_cgroup_path(cgroup2, t);
    if (!p) {
      if (refused) refused->push_back(t + ": " + p.error().message);
      continue;
    }
    if (existing(*p)) c.configured.push_back(*p);
  }
  // One level of the root at a time: the kubepods top, its QoS cgroups, their pods.
  for (const auto& top : child_cgroups(cgroup2, "/")) {
    if (!top.ends_with("kubepods.slice") && !top.ends_with("/kubepods")) continue;
    for (const auto& q : child_cgroups(cgroup2, top)) {
      auto id = identify_cgroup(q, cfg.yarn_hierarchy);
      if (!id.k8s || id.qos != QosTier::BestEffort || !id.pod_uid.empty()) continue;
      c.besteffort_qos.push_back(q);
      for (const auto& pod : child_cgroups(cgroup2, q)) {
        auto pid = identify_cgroup(pod, cfg.yarn_hierarchy);
        if (pid.k8s && !pid.pod_uid.empty() && pid.container_id.empty()) c.besteffort_pods.push_back(pod);
      }
    }
  }
  if (auto y = confine_cgroup_path(cgroup2, cfg.yarn_hierarchy); y && existing(*y)) c.yarn_roots.push_back(*y);
  for (const auto& p : offline_parents) {
    auto id = identify_cgroup(p, cfg.yarn_hierarchy);
    if (id.yarn && id.yarn_container.empty() && existing(p)) c.yarn_roots.push_back(p);
  }
  return c;
}

double cores_at_or_below(const Sample& s, const std::string& path) {
  if (!s.interval_ns) return 0;
  double cores = 0;
  for (const auto& c : s.cgroups)
    if (path_at_or_below(c.path, path))
      cores += static_cast<double>(c.interval.cpu_ns) / static_cast<double>(s.interval_ns);
  return cores;
}

}  // namespace khagent
