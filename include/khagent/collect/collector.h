// The collect stage: reads the BPF maps each tick, turns per-CPU cumulative
// counters into totals since start and per-interval deltas, resolves cgroup
// ids to paths, and adds throttling from cpu.stat where fentry is unavailable.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "khagent/collect/cgroupfs.h"
#include "khagent/collect/cpustat.h"
#include "khagent/collect/sample.h"
#include "khagent/util/result.h"

namespace khagent {

struct RawPair {
  uint64_t victim = 0;
  uint64_t aggressor = 0;
  uint64_t wait_ns = 0;
  uint64_t count = 0;
};

// What the maps hold right now, summed over CPUs (cumulative values).
struct RawMaps {
  std::unordered_map<uint64_t, CgroupCounters> cgroups;
  std::vector<RawPair> pairs;
  std::unordered_map<uint64_t, ThrottleCounters> throttle;
  // Cumulative direct reclaim of the cgroups whose tasks reclaimed, and
  // (where reclaim_moved_known) those whose entry changed since the last read.
  std::unordered_map<uint64_t, ReclaimCounters> reclaim;
  std::vector<uint64_t> reclaim_moved;
  bool reclaim_moved_known = false;
  std::array<uint64_t, KH_NR_COUNTERS> counters{};
  StallCounters stall;
  // Cgroups the kernel reported removed since the last read (where the
  // source reports removals).
  std::vector<uint64_t> removed;
  // Whether this read brought only the cgroups in `moved` up to date, the
  // other entries being as the last read left them (false: every entry was
  // read). A source that reads only what moved needs the last read in
  // `cgroups`: primed says it has it (cleared, the next read is whole).
  bool moved_only = false;
  std::vector<uint64_t> moved;
  bool primed = false;
  // `pairs` lists every pair; with pairs_moved_only, only those at the
  // indexes in pairs_moved changed since the last read (the others are as
  // the last read of this source gave them).
  bool pairs_moved_only = false;
  std::vector<uint32_t> pairs_moved;
};

class MapSource {
 public:
  virtual ~MapSource() = default;
  // Brings `into` up to the maps' current contents. `into` holds what this
  // source read last time (or is empty): a source may update it in place,
  // which at thousands of cgroups saves allocating every entry every tick.
  virtual Result<void> read_into(RawMaps& into) = 0;
  // A fresh read.
  Result<RawMaps> read() {
    RawMaps r;
    if (auto e = read_into(r); !e) return e.error();
    return r;
  }
  // Deletes the entries of cgroups that no longer exist.
  virtual void forget(const std::vector<uint64_t>& ids, const std::vector<std::pair<uint64_t, uint64_t>>& pairs) = 0;
  // Whether read() lists every removed cgroup that had entries (unless
  // KH_CNT_REMOVALS_LOST grew): then idle cgroups need no liveness checks.
  virtual bool reports_removals() const { return false; }
};

class Collector {
 public:
  // `cpu_stat` is used when source is ThrottleSource::CpuStat; may be null otherwise.
  Collector(MapSource& maps, CgroupIndex& index, ThrottleStatReader* cpu_stat, ThrottleSource source);

  // Reads the maps now. The first call establishes the start (interval_ns 0).
  Result<Sample> tick();
  // Same, with the clocks given (tests).
  Result<Sample> tick_at(uint64_t mono_ns, uint64_t real_ns);

  // Whether samples carry each cgroup's counters since start (`total`; on by
  // default). observe and top print them; the agent decides on intervals
  // only, and copying every cgroup's totals with their histogram was a fifth
  // of its tick at thousands of cgroups. Off: `total` stays empty. Set
  // before the first tick.
  void set_totals(bool on) { totals_ = on; }
  // Whether samples list only the cgroups that moved, were named for the
  // first time, or had throttling in the interval, with the rest left to
  // consumers that remember them (Sample::complete false). At thousands of
  // mostly idle cgroups, filling a sample entry for each was most of a tick.
  void set_changes_only(bool on) { changes_only_ = on; }

  // Map entries deleted for cgroups that went away, since start.
  uint64_t forgotten() const { return forgotten_; }

 private:
  struct ThrState {
    ThrottleCounters last;  // last raw reading
    bool seen = false;
    ThrottleCounters total;
  };
  struct CgState {
    CgroupPath path;
    CgroupCounters last_raw;
    CgroupCounters total;
    ThrState thr;
    ReclaimCounters last_reclaim;  // its reclaim_stats entry as last read
    uint64_t parent = 0;           // in holders_ (0: a child of the root)
    bool thr_watch = false;        // cpu.stat source: read it again at the next tick
    uint64_t seen_tick = 0;        // the last tick its entry was in the map
  };
  // An ancestor of tracked cgroups. It has no map entries of its own (no
  // task of its own waits or runs), but its throttling is theirs: the
  // quota of a pod, a QoS or YARN root, the caps khagent writes itself.
  struct Holder {
    CgroupPath path;
    uint64_t parent = 0;
    uint32_t refs = 0;  // tracked cgroups and holders whose parent it is
    ThrState thr;
    uint64_t due_tick = 0;  // the last tick its throttling was read
  };
  struct PairState {
    RawPair last_raw;
    uint64_t wait_ns_total = 0;
    uint64_t count_total = 0;
    uint64_t seen_tick = 0;
  };
  struct PairHash {
    size_t operator()(const std::pair<uint64_t, uint64_t>& p) const noexcept {
      return std::hash<uint64_t>()(p.first * 0x9e3779b97f4a7c15ull ^ p.second);
    }
  };

  // One tick's working state, handed from step to step.
  struct TickWork {
    uint64_t tick = 0;
    bool filling = false;               // inserts failed since the last tick
    bool rescanned = false;             // the tree was walked this tick
    std::unordered_set<uint64_t> gone;  // removed: their state and entries go
    std::vector<uint64_t> dead;         // ids whose map entries are deleted at the end
    std::vector<uint64_t> watch;        // cpu.stat source: to read again next tick (thr_watch)
  };
  struct PairWork {
    uint64_t tick = 0;
    std::unordered_set<uint64_t> dead;
    std::vector<std::pair<uint64_t, uint64_t>> dead_pairs;
    bool is_dead(uint64_t victim, uint64_t aggressor) const { return dead.count(victim) || dead.count(aggressor); }
  };
  // The steps of a tick, in order.
  // Warns (once a minute) when inserts into the maps failed; whether they did.
  bool note_full_maps(uint64_t mono_ns);
  // Names new ids, walks the tree when due, and lists removed cgroups in w.gone.
  void find_removed(uint64_t mono_ns, TickWork& w);
  // Tries to name the ids not known yet; whether some stayed unknown.
  bool resolve_new(TickWork& w);
  // Turns each cgroup entry to look at this tick into the sample's entry.
  void visit_cgroups(TickWork& w, Sample& out);
  void visit_cgroup(uint64_t id, const CgroupCounters& now, TickWork& w, Sample& out);
  // Same for the (victim, aggressor) pairs; the pairs of dead cgroups.
  std::vector<std::pair<uint64_t, uint64_t>> visit_pairs(const TickWork& w, Sample& out);
  void visit_pair(const RawPair& p, PairWork& pw, Sample& out);
  // Deletes the map entries of cgroups that went away.
  void forget_dead(const std::vector<uint64_t>& dead, const std::vector<std::pair<uint64_t, uint64_t>>& dead_pairs);

  MapSource& maps_;
  CgroupIndex& index_;
  ThrottleStatReader* cpu_stat_;
  ThrottleSource source_;
  // This tick's throttling of a cgroup (fentry: its throttle_stats entry;
  // cpu.stat: read now), added to t.total.
  ThrottleCounters throttle_of(uint64_t id, const CgroupPath& path, ThrState& t, const RawMaps& raw);
  // The holder of the cgroup at `path` (its parent), taken once more; 0 for
  // a child of the root or a parent that cannot be found.
  uint64_t hold_parent(const std::string& path);
  // Gives back a hold; a holder nothing holds any more is let go of at the
  // end of the tick (drop_released), unless held again by then.
  void release(uint64_t holder);
  // Drops the holders let go of this tick (and their own holders, in
  // turn): reported removed in `out`, their entries added to `dead`.
  void drop_released(std::vector<uint64_t>& dead, Sample& out);
  // Drops a tracked cgroup, reports it removed in `out`; the next entry.
  std::unordered_map<uint64_t, CgState>::iterator drop(std::unordered_map<uint64_t, CgState>::iterator it, Sample& out);
  // Reads the throttling of the holders that may have moved this tick and
  // lists those whose throttling did.
  // `below`: cgroups whose cpu.stat is watched this tick (throttled waits);
  // a holder that is also a tracked cgroup is added to it.
  void visit_holders(const RawMaps& raw, std::vector<uint64_t>& below, uint64_t tick, Sample& out);

  std::unordered_map<uint64_t, CgState> cgroups_;
  std::unordered_map<uint64_t, Holder> holders_;
  std::vector<uint64_t> holder_watch_;  // cpu.stat source: holders to read once more at the next tick
  std::vector<uint64_t> released_;      // holders let go of this tick (refs 0)
  std::unordered_map<std::pair<uint64_t, uint64_t>, PairState, PairHash> pairs_;
  // Pairs whose victim has no name yet, as last read: retried each tick.
  std::unordered_map<std::pair<uint64_t, uint64_t>, RawPair, PairHash> pending_pairs_;
  uint64_t tick_no_ = 0;
  std::optional<uint64_t> last_mono_;
  std::optional<uint64_t> last_rescan_;
  std::optional<uint64_t> last_liveness_;  // last check of idle cgroups by handle
  std::optional<uint64_t> last_full_;      // failed inserts (stats + pairs) at the last tick
  std::optional<uint64_t> last_full_warn_;
  std::optional<uint64_t> last_removals_lost_;
  std::optional<StallCounters> last_stall_;  // the stall detectors at the last tick
  bool stall_failure_logged_ = false;
  RawMaps raw_;  // the last read, updated in place by the next
  bool totals_ = true;
  bool changes_only_ = false;
  size_t last_listed_ = 0;                // cgroups in the last sample
  std::unordered_set<uint64_t> pending_;  // in the maps, not named yet
  std::vector<uint64_t> watch_;           // to read cpu.stat of at the next tick (thr_watch)
  uint64_t forgotten_ = 0;
};

}  // namespace khagent
