// Which of this node's YARN containers reclaim may choose from, with what the
// ranking needs: a pure function of the inventory that collect reads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "khagent/collect/yarn_inventory.h"
#include "khagent/policy/yarn.h"

namespace khagent {

// The containers reclaim may choose from: the active ones of `inv` not in
// `killed`, with their application's queue and its priority
// (yarn.queue_priority),
// whether each is its application's AM, `interference` (container -> wait
// caused in the last window) and `start_ms` (container -> epoch ms, 0 = unknown).
std::vector<YarnContainerInfo> yarn_reclaim_candidates(const YarnInventory& inv, const std::set<std::string>& killed,
                                                       const std::map<std::string, int>& queue_priority,
                                                       const std::map<std::string, uint64_t>& interference,
                                                       const std::function<uint64_t(const std::string&)>& start_ms);

}  // namespace khagent
