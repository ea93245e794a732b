// MapSource over the runq BPF maps. cgroup_stats and interference are arrays
// of slots, mapped into this process and read in place; throttle_stats is a
// shared hash; only the small counters array is per CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "khagent/abi/runq.h"
#include "khagent/collect/collector.h"
#include "khagent/model/runq_maps.h"

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

// A BPF array map created with BPF_F_MMAPABLE, mapped into this process.
class MappedArray {
 public:
  MappedArray() = default;
  ~MappedArray();
  MappedArray(const MappedArray&) = delete;
  MappedArray& operator=(const MappedArray&) = delete;
  // Maps the array behind fd (read-only unless `writable`). `value_size`
  // must be the map's (checked: a map of another layout is refused).
  Result<void> map(int fd, size_t value_size, bool writable, const char* name);
  uint32_t entries() const { return entries_; }
  template <typename T>
  T* at(uint32_t i) const {
    return reinterpret_cast<T*>(static_cast<char*>(addr_) + static_cast<size_t>(i) * stride_);
  }

 private:
  void* addr_ = nullptr;
  size_t len_ = 0;
  size_t stride_ = 0;
  uint32_t entries_ = 0;
};

class BpfMapSource : public MapSource {
 public:
  // The owner of the maps (fds.owner()) reads only the slots whose moved
  // bit is set, clearing it, and frees the slots of forgotten cgroups and
  // pairs; any other reader reads every slot and changes nothing. The first
  // read, and any after a failure, reads every slot. Maps that cannot be
  // mapped make read_into() fail with the reason.
  explicit BpfMapSource(RunqMapFds fds);
  Result<void> read_into(RawMaps& raw) override;
  void forget(const std::vector<uint64_t>& ids, const std::vector<std::pair<uint64_t, uint64_t>>& pairs) override;
  bool reports_removals() const override { return fds_.removed_cgroups >= 0; }
  // Whether batch lookups worked (false: fell back to key-by-key iteration).
  bool batch_ops() const { return batch_ok_; }
  // Reads of only the moved slots so far.
  uint64_t moved_reads() const { return moved_reads_; }

 private:
  // Slots of forgotten cgroups (pairs), given back once no BPF program can
  // still hold them: a tick later, zeroed, pushed to the free queue.
  struct Quarantine {
    std::vector<std::pair<uint32_t, uint64_t>> slots;  // slot, when forgotten (mono ns)
    std::vector<bool> held;                            // by slot: not to be read
    // Deletes `key`'s entry from the index hash and holds its slot; false
    // if it had none (or it is held already).
    bool hold(int index_fd, const void* key, uint64_t now, uint32_t& slot);
  };

  RunqMapFds fds_;
  int ncpus_;  // possible CPUs: the counters array is per CPU
  bool batch_ok_ = true;
  bool mapped_ = false;
  MappedArray cgroup_stats_, cgroup_moved_, interference_, pair_moved_;
  BatchBuffers<uint64_t, kh_throttle_stats> throttle_buf_;
  BatchBuffers<uint64_t, kh_reclaim_stats> reclaim_buf_;
  std::unordered_map<uint64_t, ReclaimCounters> reclaim_last_;  // reclaim_stats as last read
  std::vector<uint64_t> counter_vals_;
  std::vector<kh_stall_stats> stall_vals_;
  bool stall_read_failed_ = false;       // warned once
  std::vector<RawPair> pair_by_slot_;    // the pairs as last read (victim 0: none)
  std::vector<uint8_t> pair_moved_now_;  // by slot: read by this read_pairs()
  Quarantine cgroup_q_, pair_q_;
  bool pairs_primed_ = false;
  uint64_t moved_reads_ = 0;

  Result<void> map_arrays();
  Result<void> read_stats_whole(RawMaps& raw);
  Result<void> read_stalls(StallCounters& out);
  void read_stats_moved(RawMaps& raw);
  void read_pairs(RawMaps& raw);
  void release_quarantined(uint64_t now);
};

}  // namespace khagent
