// What the loader hands to collect: the runq maps' file descriptors and
// where throttling is read from.
#pragma once

namespace khagent {

// Where throttling comes from: fentry on throttle_cfs_rq/unthrottle_cfs_rq
// (the throttle_stats map), the cgroups' cpu.stat files, or nowhere.
enum class ThrottleSource { Fentry, CpuStat, None };
const char* throttle_source_name(ThrottleSource s);

struct RunqMapFds {
  // Slot arrays (mmapable) and the hashes that give an id's (pair's) slot.
  int cgroup_stats = -1;
  int cgroup_slots = -1;
  int interference = -1;
  int pair_slots = -1;
  // The moved bitmaps and free-slot queues: handed only to the one owner of
  // the maps (the collector of the process that loaded them), which clears
  // the bits it reads and gives back the slots of cgroups that are gone. A
  // reader without them reads every slot.
  int cgroup_moved = -1;
  int cgroup_free = -1;
  int pair_moved = -1;
  int pair_free = -1;
  int throttle_stats = -1;
  int counters = -1;
  // What each CPU's stall detector saw (per CPU); -1: no detector.
  int stall_stats = -1;
  // Direct reclaim time per cgroup; -1 where no vmscan tracepoint is attached.
  int reclaim_stats = -1;
  // Queue of removed cgroup ids (handle_cgroup_rmdir); -1 where the hook is
  // not attached. Only the process that loaded the object pops it.
  int removed_cgroups = -1;
  bool owner() const { return cgroup_moved >= 0; }
};

}  // namespace khagent
