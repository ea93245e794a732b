// MapSource over the runq BPF maps (per-CPU values summed here).
#pragma once

#include "khagent/collect/collector.h"

namespace khagent {

struct RunqMapFds {
  int cgroup_stats = -1;
  int interference = -1;
  int throttle_stats = -1;
  int counters = -1;
};

class BpfMapSource : public MapSource {
 public:
  explicit BpfMapSource(RunqMapFds fds);
  Result<RawMaps> read() override;
  void forget(const std::vector<uint64_t>& ids,
              const std::vector<std::pair<uint64_t, uint64_t>>& pairs) override;
  // Whether batch lookups worked (false: fell back to key-by-key iteration).
  bool batch_ops() const { return batch_ok_; }

 private:
  RunqMapFds fds_;
  int ncpus_;
  bool batch_ok_ = true;
};

}  // namespace khagent
