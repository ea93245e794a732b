// Reclaiming a YARN container locally: killing its cgroup once its grace is
// over (the decision is policy's reclaim_step).
#pragma once

#include <functional>
#include <string>

#include "khagent/actuate/cgroup_kill.h"
#include "khagent/util/result.h"

namespace khagent {

// How a container's cgroup is killed: kill_cgroup, or a stand-in in tests
// whose containers have no cgroup.
using CgroupKillFn = std::function<Result<CgroupKillResult>(const std::string& mount, const std::string& rel)>;

enum class YarnKillOutcome { Killed, Failed, DryRun };

// Kills container `id`, whose cgroup is `rel` below `mount`, with `kill`
// (kill_cgroup when empty), or in a dry run only logs that it would. Logs
// the outcome with `reason` (why it goes).
YarnKillOutcome kill_yarn_container(const std::string& id, const std::string& mount, const std::string& rel,
                                    bool dry_run, const std::string& reason, const CgroupKillFn& kill);

}  // namespace khagent
