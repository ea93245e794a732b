// Loads, attaches and pins the runq BPF programs; owns every kernel object
// it creates (skeleton, links, pins) and releases them on destruction.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "khagent/abi/runq.h"
#include "khagent/model/runq_maps.h"
#include "khagent/util/result.h"

struct runq_bpf;
struct bpf_object;
struct ring_buffer;
struct kh_wait_event;

namespace khagent {

struct FastPathConfig;

// A program of the object that is not loaded on this kernel, and why.
struct LeftOutProgram {
  std::string name;
  std::string reason;
};

struct LoaderOptions {
  std::string pin_dir = "/sys/fs/bpf/khagent";
  bool pin = true;
  // Pins already there: replace them (the agent: they are stale, or ours from
  // before a restart) or leave them and do not pin (observe: another khagent
  // may own them).
  bool replace_pins = true;
  bool interference = true;     // record (victim, aggressor) pairs
  uint32_t max_cgroups = 4096;  // entries of cgroup_stats / throttle_stats
  uint32_t max_pairs = 16384;   // entries of interference
  bool allow_fentry = true;     // false: always use cpu.stat for throttling
  // The stall detector (bpf/runq_stall.bpf.h): each busy CPU's timer fires
  // this often (0: no detector); firing stall_min_ns late is a stall.
  uint64_t stall_period_ns = 2'000'000;
  uint64_t stall_min_ns = 250'000;
  // The cpu controller is on a cgroup v1 hierarchy (a hybrid host): a
  // throttled cfs_rq belongs to a v1 cgroup, whose id is not the v2 id the
  // maps are keyed by, so throttled time comes from cpu.stat (fentry still
  // keeps the throttled clock that splits waits before 6.6).
  bool cpu_controller_on_v1 = false;
  // Fast path: waits of protected cgroups at least this long are reported
  // through the ring buffer (UINT64_MAX: never), at most once per interval.
  uint64_t event_min_ns = UINT64_MAX;
  uint64_t event_interval_ns = 50'000'000;
  // Load the task iterator that reports waits still going on (fast path on).
  bool scan_waits = true;
  // false: load the programs and stop there (no attach, no pins): for
  // looking at what the verifier did (tests/bench/khagent_verifier_stats).
  bool attach = true;
  // Called once this kernel's choices are made (rodata, map sizes, which
  // programs load: those left out and why), right before the load; the
  // object is the loader's, valid while the RunqBpf lives.
  std::function<void(bpf_object*, const std::vector<LeftOutProgram>&)> before_load;
};

// `base` with the fast path of the agent's configuration: what `khagent run`
// loads with.
LoaderOptions with_fast_path(LoaderOptions base, const FastPathConfig& fp);

struct ProgStats {
  std::string name;
  uint64_t run_time_ns = 0;
  uint64_t run_cnt = 0;
};

// One map of the loaded object and the memory the kernel charges for it.
struct MapMemory {
  std::string name;
  uint32_t type = 0;  // enum bpf_map_type
  uint32_t key_size = 0;
  uint32_t value_size = 0;
  uint32_t max_entries = 0;
  uint32_t flags = 0;
  uint64_t memlock = 0;  // bytes, from fdinfo (what `bpftool map show` prints)
};

// Checks that run before anything is loaded; the error says what is missing.
// Used by the agent to exit with code 2.
Result<void> preflight(const std::string& btf_path = "/sys/kernel/btf/vmlinux");

// True if this kernel loads an fentry program on `func` (loads and frees a
// trivial one).
bool probe_fentry(const std::string& func);

// Why this kernel refuses BPF iterator programs of `target` ("task",
// "bpf_map_elem"), or "" when it loads one (loads and frees a trivial one).
// The loader leaves a refused task iterator out and falls back (long waits
// reported only when they end).
std::string iterator_refusal(const std::string& target);

// True if the kernel keeps a per-cfs_rq throttled clock
// (cfs_rq::throttled_clock_self_time, 6.6+): then the BPF side splits each
// wait by how much of it its cfs_rq spent throttled. Older kernels: a wait
// counts as throttled as a whole if it began throttled (approximate).
bool kernel_has_throttled_clock();

class RunqBpf {
 public:
  static Result<std::unique_ptr<RunqBpf>> open_and_load(const LoaderOptions& opts);
  ~RunqBpf();
  RunqBpf(const RunqBpf&) = delete;
  RunqBpf& operator=(const RunqBpf&) = delete;

  ThrottleSource throttle_source() const { return throttle_source_; }
  // With `owner`, also the moved bitmaps and free-slot queues: for the one
  // collector of this process (see RunqMapFds).
  RunqMapFds map_fds(bool owner = false) const;
  std::vector<ProgStats> prog_stats() const;
  // Every map of the object (including .rodata/.bss), with its memlock.
  std::vector<MapMemory> map_memory() const;
  const std::vector<std::string>& pinned() const { return pinned_; }

  // Makes the protected map hold exactly `want` (cgroup id -> threshold ns),
  // keeping the rate-limit state of entries that stay. Only the difference
  // from the last call is written; the map is read back whole once a minute
  // (walking it every tick cost two syscalls per online cgroup).
  Result<void> sync_protected(const std::unordered_map<uint64_t, uint64_t>& want);

  // Over-threshold waits of protected cgroups. `poll` calls `on_event` for
  // each record that arrived, waiting up to timeout_ms for the first one.
  using EventFn = std::function<void(const kh_wait_event&)>;
  Result<void> open_events(EventFn on_event);
  Result<int> poll_events(int timeout_ms);
  // The ring's epoll descriptor, readable when records wait (for a poll()
  // over more descriptors than the ring's; drain_events() reads them); -1
  // before open_events().
  int events_fd() const;
  // Calls `on_event` for every record already in the ring, without waiting
  // for its wake-up: the kernel signals new records from irq_work, so a poll
  // with no timeout right after a submit can miss them.
  Result<int> drain_events();
  // Reports the waits of protected cgroups still going on past their
  // threshold, once per wait, through the same events (KH_EVENT_ONGOING).
  // Runs the scan_waits task iterator over every task; does nothing while
  // no cgroup is protected, or where it could not be loaded (can_scan_waits()).
  Result<void> scan_waits();
  bool can_scan_waits() const { return scan_; }
  // Whether the kernel reports removed cgroups (handle_cgroup_rmdir attached).
  bool reports_removals() const { return removals_; }
  // The kinds of direct reclaim timed per cgroup ("node", "memcg"; the
  // reclaim_stats map), as attached; empty: none.
  const std::vector<std::string>& reclaim_kinds() const { return reclaim_kinds_; }
  // Whether the stall detector's timers are set up (each CPU's starts when
  // a task first runs there; a kernel may still refuse to start it, which
  // stall_stats then shows).
  bool stall_detector() const { return stall_detector_; }

 private:
  RunqBpf() = default;
  Result<void> attach();
  bool init_stall_timers(int ncpus);
  Result<void> pin(const std::string& dir);

  runq_bpf* skel_ = nullptr;
  struct RingDeleter {
    void operator()(ring_buffer* rb) const;
  };
  std::unique_ptr<ring_buffer, RingDeleter> events_;
  EventFn on_event_;
  ThrottleSource throttle_source_ = ThrottleSource::CpuStat;
  bool fentry_ = false;  // the throttle hooks are loaded (attached, once attach() succeeded)
  std::vector<std::string> pinned_;
  bool replace_ = true;
  bool scan_ = false;
  bool removals_ = false;  // handle_cgroup_rmdir attached
  bool stall_detector_ = false;
  std::vector<std::string> reclaim_kinds_;            // reclaim tracepoint pairs attached
  std::unordered_map<uint64_t, uint64_t> protected_;  // what the protected map holds, as last synced
  bool protected_known_ = false;
  uint64_t protected_read_ns_ = 0;  // when the map was last read back
};

// Routes libbpf's messages to the agent's log (warnings and above by default,
// everything when `verbose`).
void route_libbpf_logs(bool verbose);

}  // namespace khagent
