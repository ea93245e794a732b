#include "khagent/policy/yarn_candidates.h"

#include "khagent/collect/yarn_rest.h"

namespace khagent {

std::vector<YarnContainerInfo> yarn_reclaim_candidates(const YarnInventory& inv, const std::set<std::string>& killed,
                                                       const std::map<std::string, int>& queue_priority,
                                                       const std::map<std::string, uint64_t>& interference,
                                                       const std::function<uint64_t(const std::string&)>& start_ms) {
  std::vector<YarnContainerInfo> out;
  for (const auto& c : inv.containers) {
    if (!nm_container_active(c.state) || killed.count(c.id)) continue;
    YarnContainerInfo info;
    info.id = c.id;
    info.app_id = app_of_container(c.id);
    if (auto a = inv.apps.find(info.app_id); a != inv.apps.end()) info.queue = a->second.queue;
    info.queue_priority = queue_priority_for(info.queue, queue_priority);
    if (auto am = inv.am_of_app.find(info.app_id); am != inv.am_of_app.end()) {
      info.is_am = am->second.container.empty() ? first_container_of_attempt(c.id, am->second.attempt)
                                                : am->second.container == c.id;
    } else {
      // Not looked up (no attempt read yet): the first container of an attempt.
      info.is_am = first_container_of_attempt(c.id, attempt_of_container(c.id));
    }
    info.resource = c.resource;
    info.start_ms = start_ms(c.id);
    if (auto i = interference.find(c.id); i != interference.end()) info.interference_ns = i->second;
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace khagent
