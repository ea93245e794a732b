// MapSource over the runq BPF maps. cgroup_stats, interference and
// throttle_stats are shared hashes (one value per key, summed over CPUs in
// the kernel); only the small counters array is per CPU.
#pragma once

#include <vector>

#include "khagent/abi/runq.h"
#include "khagent/collect/collector.h"
#include "khagent/model/runq.h"

namespace khagent {

// Key and value buffers for batch reads of one hash map. They live as long
// as the source: allocating and zeroing them on every tick cost more than
// the reads themselves.
template <typename K, typename V>
struct BatchBuffers {
  uint32_t chunk = 0;  // entries per batch call
  std::vector<K> keys;
  std::vector<V> vals;  // chunk
};

class BpfMapSource : public MapSource {
 public:
  // Reads cgroup_stats whole, or, where fds.moved_reader is set, only the
  // entries that moved since the last read (and whole once a minute, or
  // when `raw` is not primed).
  explicit BpfMapSource(RunqMapFds fds);
  Result<void> read_into(RawMaps& raw) override;
  void forget(const std::vector<uint64_t>& ids, const std::vector<std::pair<uint64_t, uint64_t>>& pairs) override;
  bool reports_removals() const override { return fds_.removed_cgroups >= 0; }
  // Whether batch lookups worked (false: fell back to key-by-key iteration).
  bool batch_ops() const { return batch_ok_; }
  // Reads of only the moved entries so far.
  uint64_t moved_reads() const { return moved_reads_; }

 private:
  RunqMapFds fds_;
  int ncpus_;  // possible CPUs: the counters array is per CPU
  bool batch_ok_ = true;
  BatchBuffers<uint64_t, kh_cgroup_stats> cgroup_buf_;
  BatchBuffers<kh_pair, kh_pair_stats> pair_buf_;
  BatchBuffers<uint64_t, kh_throttle_stats> throttle_buf_;
  std::vector<uint64_t> counter_vals_;
  std::vector<uint64_t> seen_;  // cgroup ids of this read
  std::vector<char> iter_buf_;  // records of the moved reader
  uint64_t full_read_ns_ = 0;   // the last whole read
  uint64_t moved_reads_ = 0;

  Result<void> read_stats_whole(RawMaps& raw);
  // false: the reader failed (logged), read whole instead.
  bool read_stats_moved(RawMaps& raw);
};

}  // namespace khagent
