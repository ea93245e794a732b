// What the kubelet's /pods endpoint says about a pod: read by collect
// (kubelet_pods), used by signals to classify the pod's cgroups.
#pragma once

#include <map>
#include <string>

namespace khagent {

struct PodMeta {
  std::string name;
  std::string ns;
  std::string priority_class;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  // A container requests (or is limited in) kubernetes.io/batch-cpu or
  // kubernetes.io/batch-memory: the pod runs on offline capacity.
  bool batch_resources = false;
};

}  // namespace khagent
