// Ending every process of a cgroup, for reclaiming a YARN container locally
// once its grace is over.
#pragma once

#include <cstddef>
#include <string>

#include "khagent/util/result.h"

namespace khagent {

struct CgroupKillOptions {
  bool allow_cgroup_kill = true;  // false: always the cgroup.procs fallback (tests)
  int settle_ms = 1000;           // how long to wait for the cgroup to empty
};

struct CgroupKillResult {
  bool used_cgroup_kill = false;  // cgroup.kill (kernel >= 5.14) did it
  size_t signalled = 0;           // processes sent SIGKILL by the fallback
  bool empty = false;             // no process left when we returned
};

// Kills every process in the cgroup `rel` (a path relative to `mount`, e.g.
// "/hadoop-yarn/container_..._000002") and in its descendants: writes "1" to
// cgroup.kill where the kernel has it, else sends SIGKILL to every pid listed
// in cgroup.procs of the cgroup and each descendant, repeating until they
// are empty (a process may fork meanwhile) or settle_ms passes. The path is
// confined to the mount; the mount's root cgroup itself is refused (EPERM).
// A cgroup that does not exist is ENOENT.
Result<CgroupKillResult> kill_cgroup(const std::string& mount, const std::string& rel,
                                     const CgroupKillOptions& opts = {});

}  // namespace khagent
