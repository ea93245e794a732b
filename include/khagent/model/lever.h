// The levers khagent pulls on the offline side, by name. Each one is an
// entry of the lever table (policy/lever_table.h: what it writes, where,
// when it is in force, how it is undone); this is the part the
// configuration needs: names, and which levers may be ladder rungs.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace khagent {

enum class Lever {
  Idle,      // cpu.idle=1 (without it in the kernel, the minimum weight): the base lever
  Weight,    // offline.weight, when idle is off
  Cpuset,    // offline on CPUs of its own: a ladder rung
  Quota,     // a CPU quota over idle offline work: a ladder rung
  Memory,    // a memory limit on the offline parents, following the memory budget
  Burst,     // CPU burst for online pods throttled by their own quota
  Backstop,  // memory.max above the memory limit on YARN roots (v2): the kernel's OOM kept inside offline
  Reclaim,   // offline page cache reclaimed ahead of need while online pods refault
  OomGroup,  // memory.oom.group on YARN containers (v2): an OOM kill takes the whole container
  IoLimit,   // io.max (cgroup v2) on the offline cgroup named for an online pod's IO stall
};
inline constexpr std::array<Lever, 10> kAllLevers = {Lever::Idle,     Lever::Weight, Lever::Cpuset,   Lever::Quota,
                                                     Lever::Memory,   Lever::Burst,  Lever::Backstop, Lever::Reclaim,
                                                     Lever::OomGroup, Lever::IoLimit};

// Its name in the configuration, the logs and the metrics' `lever` label.
const char* lever_name(Lever l);
std::optional<Lever> lever_from_name(std::string_view name);
// Whether it may be a rung of the ladder (ladder.rungs, ladder.always).
bool lever_is_rung(Lever l);

}  // namespace khagent
