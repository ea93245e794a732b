#include "khagent/actuate/yarn_kill.h"

#include <spdlog/spdlog.h>

namespace khagent {

YarnKillOutcome kill_yarn_container(const std::string& id, const std::string& mount, const std::string& rel,
                                    bool dry_run, const std::string& reason, const CgroupKillFn& kill) {
  if (dry_run) {
    spdlog::info("yarn: dry-run: would kill {} (cgroup {}): {}", id, rel, reason);
    return YarnKillOutcome::DryRun;
  }
  auto k = kill ? kill(mount, rel) : kill_cgroup(mount, rel);
  if (!k) {
    spdlog::error("yarn: killing {} (cgroup {}) failed: {}", id, rel, k.error().str());
    return YarnKillOutcome::Failed;
  }
  spdlog::warn(
      "yarn: killed {} (cgroup {}, {}): {}", id, rel,
      k.value().used_cgroup_kill ? "cgroup.kill" : std::to_string(k.value().signalled) + " processes SIGKILLed",
      reason);
  return YarnKillOutcome::Killed;
}

}  // namespace khagent
