#include "khagent/policy/controllers.h"

namespace khagent {

std::vector<std::unique_ptr<Controller>> make_controllers(const Config& cfg, const NodeFacts& facts) {
  std::vector<std::unique_ptr<Controller>> out;
  out.push_back(make_cpu_controller(cfg, facts));
  if (cfg.memory.enabled && facts.memory) out.push_back(make_memory_controller(cfg, facts));
  out.push_back(make_burst_controller(cfg));
  if (cfg.memory.enabled && facts.memory && cfg.memory.reclaim)
    out.push_back(make_cache_reclaim_controller(cfg, facts));
  if (cfg.io.enabled) out.push_back(make_io_controller(cfg, facts));
  return out;
}

}  // namespace khagent
