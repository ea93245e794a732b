#include "khagent/signals/offline_memory.h"

namespace khagent {

MemorySignals offline_memory(const MemoryReader& r, const std::string& node_cgroup,
                             const std::vector<std::string>& parents, uint64_t now_ns) {
  MemorySignals s;
  s.input.now_ns = now_ns;
  for (const auto& path : parents) {
    auto u = r.cgroup(path);
    if (!u) {
      s.problems.push_back("memory of offline " + path + ": " + u.error().str());
      continue;
    }
    s.used[path] = u->working_set();
    s.input.offline_used += u->working_set();
  }
  auto node = r.node(node_cgroup);
  if (!node) {
    s.problems.push_back("memory of the node" + (node_cgroup.empty() ? "" : " (" + node_cgroup + ")") + ": " +
                         node.error().str());
    return s;
  }
  s.input.capacity = node->limit.value_or(0);
  s.input.node_used = node->working_set();
  return s;
}

}  // namespace khagent
