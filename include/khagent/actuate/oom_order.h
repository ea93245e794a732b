// The kernel's OOM order: offline processes at oom_score_adj 1000, so that an
// OOM of the whole node (or of a parent both sides share) takes offline
// work before any online pod, whatever its size. The kubelet already gives
// BestEffort pods 1000 and Burstable pods 2..999; a YARN container's JVM
// inherits the NodeManager's (0). Processes are raised, never lowered, and
// put back when khagent stops (those still running with the same start
// time: a reused pid is left alone). A process forked after its parent was
// raised inherits 1000 and keeps it: its original is not known.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace khagent {

struct OomChange {
  int pid = 0;
  int from = 0;
  int to = 0;
  std::string cgroup;  // relative to the cgroup2 mount
};

class OomOrder {
 public:
  explicit OomOrder(std::string unified_root, std::string proc_root = "/proc");
  // Every process in `parents` or below them whose oom_score_adj is under
  // `adj` is raised to it. Returns what changed; a process that exits
  // meanwhile is skipped. Processes gone since the last call are forgotten.
  std::vector<OomChange> raise(const std::vector<std::string>& parents, int adj);
  // Puts back the originals; returns what was put back.
  std::vector<OomChange> restore();
  size_t raised() const { return saved_.size(); }

 private:
  struct Saved {
    int adj = 0;
    int raised_to = 0;
    uint64_t start = 0;  // /proc/PID/stat starttime
    std::string cgroup;
  };
  std::string root_, proc_;
  std::map<int, Saved> saved_;
};

}  // namespace khagent
