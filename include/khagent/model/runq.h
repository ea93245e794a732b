// What the loader hands to collect: the runq maps' file descriptors and
// where throttling is read from.
#pragma once

namespace khagent {

// Where throttling comes from: fentry on throttle_cfs_rq/unthrottle_cfs_rq
// (the throttle_stats map), the cgroups' cpu.stat files, or nowhere.
enum class ThrottleSource { Fentry, CpuStat, None };
const char* throttle_source_name(ThrottleSource s);

struct RunqMapFds {
  int cgroup_stats = -1;
  int interference = -1;
  int throttle_stats = -1;
  int counters = -1;
  // Queue of removed cgroup ids (handle_cgroup_rmdir); -1 where the hook is
  // not attached. Only the process that loaded the object pops it.
  int removed_cgroups = -1;
  // The reader of moved cgroup_stats entries (an iter/bpf_map_elem link);
  // -1 where not handed out. One reader per loaded object: a second would
  // miss what the first marked seen.
  int moved_reader = -1;
};

}  // namespace khagent
