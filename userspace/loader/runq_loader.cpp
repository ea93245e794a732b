#include "khagent/loader/runq_loader.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <tuple>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "khagent/config/config.h"
#include "khagent/util/clock.h"
#include "runq.skel.h"
#include "runq_probe.h"

namespace khagent {
LoaderOptions with_fast_path(LoaderOptions base, const FastPathConfig& fp) {
  if (fp.enabled) {
    base.event_min_ns = fp.wait_threshold_ns;
    base.event_interval_ns = fp.min_interval_ns;
    base.scan_waits = fp.scan_interval_ns > 0;
  }
  return base;
}

namespace {

// What this kernel takes, decided between the open and the load: the
// optional programs left out and why, and what the choices were.
struct LoadPlan {
  explicit LoadPlan(runq_bpf* skel) : s(skel) {}
  runq_bpf* s;
  std::vector<LeftOutProgram> left_out;
  bool stalls = false;
  std::string no_stalls = "turned off (--stall-period 0)";
  bool fentry = false, kernel_clock = false;
  std::string no_fentry = "turned off (--no-fentry): throttling read from cpu.stat";
  std::string no_task_iter;

  void leave_out(bpf_program* p, const std::string& why) {
    bpf_program__set_autoload(p, false);
    left_out.push_back({bpf_program__name(p), why});
  }
};

// Slot arrays, their indexes, free queues and moved bitmaps: one size each
// for cgroups and for pairs.
void size_slot_maps(runq_bpf* s, const LoaderOptions& o) {
  for (bpf_map* m :
       {s->maps.cgroup_stats, s->maps.cgroup_slots, s->maps.cgroup_free, s->maps.throttle_stats, s->maps.reclaim_stats})
    bpf_map__set_max_entries(m, o.max_cgroups);
  bpf_map__set_max_entries(s->maps.cgroup_moved, (o.max_cgroups + 63) / 64);
  for (bpf_map* m : {s->maps.interference, s->maps.pair_slots, s->maps.pair_free})
    bpf_map__set_max_entries(m, o.max_pairs);
  bpf_map__set_max_entries(s->maps.pair_moved, (o.max_pairs + 63) / 64);
}

// The choices read from the kernel's BTF: fentry on the throttle hooks, the
// kernel's throttled clock, task iterators, pinned timers, vmscan tracepoints.
void probe_btf(LoadPlan& p, const LoaderOptions& o) {
  VmlinuxBtf vmlinux;  // freed before the load parses the kernel's BTF again
  p.fentry = o.allow_fentry && probe_fentry_in(vmlinux.btf, "throttle_cfs_rq", &p.no_fentry) &&
             probe_fentry_in(vmlinux.btf, "unthrottle_cfs_rq", &p.no_fentry);
  p.kernel_clock = has_throttled_clock(vmlinux.btf);
  p.no_task_iter = iterator_refusal(vmlinux.btf, "task");
  if (p.stalls && !has_enum_value(vmlinux.btf, "BPF_F_TIMER_CPU_PIN")) {
    p.stalls = false;
    p.no_stalls = "the kernel has no BPF timers pinned to a CPU (BPF_F_TIMER_CPU_PIN, Linux 6.7+)";
  }
  // Direct reclaim by the task that pays for it: each pair of tracepoints
  // where the kernel has it (the memcg pair needs CONFIG_MEMCG).
  auto* s = p.s;
  for (auto [begin, end, event] :
       {std::tuple{s->progs.handle_direct_reclaim_begin, s->progs.handle_direct_reclaim_end, "direct_reclaim"},
        std::tuple{s->progs.handle_memcg_reclaim_begin, s->progs.handle_memcg_reclaim_end, "memcg_reclaim"}}) {
    for (const char* edge : {"_begin", "_end"}) {
      const std::string tp = std::string("btf_trace_mm_vmscan_") + event + edge;
      if (vmlinux.btf && btf__find_by_name_kind(vmlinux.btf, tp.c_str(), BTF_KIND_TYPEDEF) > 0) continue;
      const std::string why = "no tracepoint mm_vmscan_" + std::string(event) + edge + " in the kernel's BTF";
      if (bpf_program__autoload(begin)) p.leave_out(begin, why);
      if (bpf_program__autoload(end)) p.leave_out(end, why);
    }
  }
}

// The stall detector's and the throttle hooks' settings, as probed.
void plan_stalls_and_throttling(LoadPlan& p, const LoaderOptions& o, int ncpus) {
  auto* s = p.s;
  s->rodata->cfg_stall_period_ns = p.stalls ? o.stall_period_ns : 0;
  s->rodata->cfg_stall_min_ns = o.stall_min_ns;
  bpf_map__set_max_entries(s->maps.stall_timers, p.stalls ? static_cast<uint32_t>(ncpus) : 1);
  // The task iterator is optional: refused, it is left out, never the whole load.
  s->rodata->cfg_fentry_clock = p.fentry && !p.kernel_clock;
  if (!p.fentry) {
    if (o.allow_fentry) p.no_fentry = "fentry probe: " + p.no_fentry;
    p.leave_out(s->progs.handle_throttle_cfs_rq, p.no_fentry);
    p.leave_out(s->progs.handle_unthrottle_cfs_rq, p.no_fentry);
    // Only the fentry programs use these: keep them, empty and minimal.
    bpf_map__set_max_entries(s->maps.throttle_stats, 1);
    bpf_map__set_max_entries(s->maps.throttle_start, 1);
  }
  if (!s->rodata->cfg_fentry_clock) bpf_map__set_max_entries(s->maps.throttle_clock, 1);
}

// The migration handler and the task iterator of the fast path: whether the
// iterator (scan_waits) is loaded.
bool plan_migration_and_scan(LoadPlan& p, const LoaderOptions& o) {
  auto* s = p.s;
  // Reading another CPU's cpu_state needs bpf_map_lookup_percpu_elem (5.19+):
  // the migration handler (a wait that moves CPUs while queued) and the
  // task iterator for waits still going on (run every fast_path.scan_interval; only the fast
  // path uses it).
  bool percpu_lookup =
      libbpf_probe_bpf_helper(BPF_PROG_TYPE_SOCKET_FILTER, BPF_FUNC_map_lookup_percpu_elem, nullptr) == 1;
  const char* no_percpu_lookup = "no bpf_map_lookup_percpu_elem (5.19+)";
  if (!percpu_lookup) p.leave_out(s->progs.handle_sched_migrate_task, no_percpu_lookup);
  spdlog::info("waits that move to another CPU while queued: {}",
               percpu_lookup ? "each part blamed on who ran where it was queued (sched_migrate_task)"
                             : "blamed by the CPU where they end (no bpf_map_lookup_percpu_elem before 5.19)");
  bool scan = o.event_min_ns != UINT64_MAX && o.scan_waits && percpu_lookup && p.no_task_iter.empty();
  const std::string no_scan = !percpu_lookup ? std::string(no_percpu_lookup) : p.no_task_iter;
  if (!scan)
    p.leave_out(s->progs.scan_waits, o.event_min_ns == UINT64_MAX ? "fast path off (fast_path.enabled: false)"
                                     : !o.scan_waits              ? "fast_path.scan_interval is 0"
                                                                  : no_scan);
  if (o.event_min_ns != UINT64_MAX)
    spdlog::info("fast path: waits over their threshold reported when they end{}",
                 scan           ? ", and while they last (a task iterator, every fast_path.scan_interval)"
                 : o.scan_waits ? "; not while they last (" + no_scan + ")"
                                : "; not while they last (fast_path.scan_interval is 0)");
  return scan;
}

void log_throttling_plan(const LoadPlan& p, const LoaderOptions& o) {
  if (p.fentry && o.cpu_controller_on_v1)
    spdlog::info(
        "throttled time: from cpu.stat, as the cpu controller is on cgroup v1 here (fentry sees v1 cgroups, "
        "whose ids are not the v2 ids the maps use)");
  spdlog::info("throttled waits: {}", p.kernel_clock ? "split by the kernel's throttled clock (cfs_rq, 6.6+)"
                                      : p.fentry
                                          ? "split by a throttled clock kept by fentry (a cfs_rq's own throttling; an "
                                            "ancestor's: throttled as a whole if they began throttled)"
                                          : "throttled as a whole if they began throttled (no throttled clock before "
                                            "6.6 without fentry: approximate)");
}

// Every slot free, before any program runs.
Result<void> fill_free_queues(runq_bpf* s, const LoaderOptions& o) {
  for (auto [q, n] : {std::pair{s->maps.cgroup_free, o.max_cgroups}, std::pair{s->maps.pair_free, o.max_pairs}})
    for (uint32_t i = 0; i < n; i++)
      if (bpf_map_update_elem(bpf_map__fd(q), nullptr, &i, BPF_ANY) != 0)
        return make_error(errno, std::string("filling ") + bpf_map__name(q));
  return {};
}

void log_attached(uint64_t map_memory, const LoaderOptions& o, ThrottleSource source, bool fentry) {
  spdlog::info(
      "BPF maps: {:.1f} MiB (memlock, {} possible CPUs; cgroup_stats {} entries, "
      "interference {})",
      static_cast<double>(map_memory) / (1 << 20), libbpf_num_possible_cpus(), o.max_cgroups, o.max_pairs);
  spdlog::info("throttling source: {}{}", throttle_source_name(source),
               source == ThrottleSource::Fentry ? " (fentry on throttle_cfs_rq/unthrottle_cfs_rq)"
               : fentry ? " (cpu controller on cgroup v1; reading the cpu.stat of cgroups with throttled waits)"
                        : " (fentry unavailable on this kernel; reading the cpu.stat of cgroups with throttled waits)");
}

}  // namespace

Result<std::unique_ptr<RunqBpf>> RunqBpf::open_and_load(const LoaderOptions& o) {
  std::unique_ptr<RunqBpf> self(new RunqBpf());
  self->skel_ = runq_bpf__open();
  if (!self->skel_) return make_error(errno, "opening the runq BPF object");
  auto* s = self->skel_;

  s->rodata->cfg_interference = o.interference;
  s->rodata->cfg_event_min_ns = o.event_min_ns;
  s->rodata->cfg_event_interval_ns = o.event_interval_ns;
  s->rodata->cfg_self_tgid = static_cast<__u32>(getpid());  // its limit writes reclaim in it: not counted
  // The stall detector: a timer per possible CPU, set up after the load by
  // a syscall program (5.14+), started by sched_switch on its own CPU.
  const int ncpus = libbpf_num_possible_cpus();
  LoadPlan plan(s);
  plan.stalls = o.stall_period_ns > 0 && ncpus > 0;
  if (plan.stalls && libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_SYSCALL, nullptr) != 1) {
    plan.stalls = false;
    plan.no_stalls = "no syscall programs in this kernel (5.14+) to set the timers up";
  }
  size_slot_maps(s, o);
  probe_btf(plan, o);
  plan_stalls_and_throttling(plan, o, ncpus);
  self->scan_ = plan_migration_and_scan(plan, o);
  self->fentry_ = plan.fentry;
  self->throttle_source_ = plan.fentry && !o.cpu_controller_on_v1 ? ThrottleSource::Fentry : ThrottleSource::CpuStat;
  log_throttling_plan(plan, o);

  if (!plan.stalls) plan.leave_out(s->progs.init_stall_timer, plan.no_stalls);
  if (o.before_load) o.before_load(s->obj, plan.left_out);
  if (int err = runq_bpf__load(s); err)
    return make_error(err, "loading the runq BPF programs (the verifier log above says why)");
  if (auto r = fill_free_queues(s, o); !r) return r.error();
  if (plan.stalls) self->stall_detector_ = self->init_stall_timers(ncpus);
  if (!plan.stalls)
    spdlog::info("stall detector: {}; waits through CPU stalls are blamed on whoever was current", plan.no_stalls);
  if (!o.attach) {
    self->scan_ = false;  // nothing to run without its link
    return self;
  }

  if (auto r = self->attach(); !r) return r.error();
  uint64_t mem = 0;
  for (const auto& m : self->map_memory()) mem += m.memlock;
  log_attached(mem, o, self->throttle_source_, self->fentry_);
  self->replace_ = o.replace_pins;
  if (o.pin) {
    if (auto r = self->pin(o.pin_dir); !r) spdlog::warn("maps not pinned: {}", r.error().str());
  }
  return self;
}

bool RunqBpf::init_stall_timers(int ncpus) {
  const int fd = bpf_program__fd(skel_->progs.init_stall_timer);
  for (int cpu = 0; cpu < ncpus; cpu++) {
    struct {
      uint32_t cpu;
    } args{static_cast<uint32_t>(cpu)};
    LIBBPF_OPTS(bpf_test_run_opts, run, .ctx_in = &args, .ctx_size_in = sizeof(args));
    int err = bpf_prog_test_run_opts(fd, &run);
    if (err == 0 && run.retval != 0) err = static_cast<int>(run.retval);
    if (err != 0) {
      spdlog::warn(
          "stall detector: off (setting up the timer of CPU {} failed: {}); waits through CPU stalls are blamed "
          "on whoever was current",
          cpu, std::strerror(-err));
      return false;
    }
  }
  skel_->bss->stall_enabled = true;  // sched_switch may start them now
  spdlog::info(
      "stall detector: a timer on each busy CPU every {} us; a CPU that runs nothing for over {} us (a "
      "vCPU "
      "stall) is charged as 'stolen' to the waits it holds up",
      skel_->rodata->cfg_stall_period_ns / 1000, skel_->rodata->cfg_stall_min_ns / 1000);
  return true;
}

namespace {

// Reclaim time: both ends of a kind or neither (a begin alone counts
// nothing, an end alone finds no start). The kinds attached.
std::vector<std::string> attach_reclaim(runq_bpf* s) {
  std::vector<std::string> kinds;
  for (auto [begin, blink, end, elink, kind] :
       {std::tuple{s->progs.handle_direct_reclaim_begin, &s->links.handle_direct_reclaim_begin,
                   s->progs.handle_direct_reclaim_end, &s->links.handle_direct_reclaim_end, "node"},
        std::tuple{s->progs.handle_memcg_reclaim_begin, &s->links.handle_memcg_reclaim_begin,
                   s->progs.handle_memcg_reclaim_end, &s->links.handle_memcg_reclaim_end, "memcg"}}) {
    if (!bpf_program__autoload(begin) || !bpf_program__autoload(end)) continue;
    *blink = bpf_program__attach(begin);
    *elink = *blink ? bpf_program__attach(end) : nullptr;
    if (*blink && *elink) {
      kinds.emplace_back(kind);
      continue;
    }
    spdlog::warn("attaching {} reclaim tracepoints failed ({}); that reclaim is not timed", kind, std::strerror(errno));
    bpf_link__destroy(*blink);
    *blink = nullptr;
  }
  spdlog::info("memory reclaim paid by each cgroup: {}",
               kinds.empty() ? std::string("not timed (no vmscan tracepoints)")
                             : fmt::format("timed from the vmscan tracepoints ({})", fmt::join(kinds, ", ")));
  return kinds;
}

// Removed cgroups reported by the kernel: without it, the collector checks
// idle cgroups itself every few seconds. Whether handle_cgroup_rmdir is attached.
bool attach_removals(runq_bpf* s) {
  if (!bpf_program__autoload(s->progs.handle_cgroup_rmdir)) return false;
  s->links.handle_cgroup_rmdir = bpf_program__attach(s->progs.handle_cgroup_rmdir);
  if (s->links.handle_cgroup_rmdir) {
    spdlog::info("removed cgroups: reported by the kernel (tp_btf/cgroup_rmdir), forgotten at the next tick");
    return true;
  }
  spdlog::warn(
      "attaching handle_cgroup_rmdir failed ({}); removed cgroups are found by checking "
      "idle ones every few seconds",
      std::strerror(errno));
  return false;
}

}  // namespace

Result<void> RunqBpf::attach() {
  auto* s = skel_;
  struct {
    bpf_program* prog;
    bpf_link** link;
    bool required;
  } progs[] = {
      {s->progs.handle_sched_wakeup, &s->links.handle_sched_wakeup, true},
      {s->progs.handle_sched_wakeup_new, &s->links.handle_sched_wakeup_new, true},
      {s->progs.handle_sched_switch, &s->links.handle_sched_switch, true},
      {s->progs.handle_sched_migrate_task, &s->links.handle_sched_migrate_task, true},
      {s->progs.handle_throttle_cfs_rq, &s->links.handle_throttle_cfs_rq, false},
      {s->progs.handle_unthrottle_cfs_rq, &s->links.handle_unthrottle_cfs_rq, false},
  };
  bool fentry_ok = fentry_;
  for (auto& p : progs) {
    if (!bpf_program__autoload(p.prog)) continue;
    *p.link = bpf_program__attach(p.prog);
    if (*p.link) continue;
    int err = errno;
    if (p.required) return make_error(err, std::string("attaching ") + bpf_program__name(p.prog));
    spdlog::warn("attaching {} failed ({}); throttling falls back to cpu.stat", bpf_program__name(p.prog),
                 std::strerror(err));
    fentry_ok = false;
  }
  reclaim_kinds_ = attach_reclaim(s);
  removals_ = attach_removals(s);
  if (scan_) {
    s->links.scan_waits = bpf_program__attach_iter(s->progs.scan_waits, nullptr);
    if (!s->links.scan_waits) {
      spdlog::warn(
          "attaching the scan_waits task iterator failed ({}); long waits are reported only "
          "when they end",
          std::strerror(errno));
      scan_ = false;
    }
  }
  if (fentry_ && !fentry_ok) {
    // Half-attached throttle hooks would count events without their ends.
    bpf_link__destroy(s->links.handle_throttle_cfs_rq);
    bpf_link__destroy(s->links.handle_unthrottle_cfs_rq);
    s->links.handle_throttle_cfs_rq = nullptr;
    s->links.handle_unthrottle_cfs_rq = nullptr;
    throttle_source_ = ThrottleSource::CpuStat;
    fentry_ = false;
  }
  return {};
}

Result<void> RunqBpf::pin(const std::string& dir) {
  std::error_code ec;
  std::filesystem::path d(dir);
  struct statfs fs{};
  if (statfs(d.parent_path().c_str(), &fs) != 0) return make_error(errno, "cannot stat " + d.parent_path().string());
  if (static_cast<unsigned long>(fs.f_type) != BPF_FS_MAGIC) {
    // Like other BPF agents, mount the BPF file system where it is missing.
    if (::mount("bpf", d.parent_path().c_str(), "bpf", 0, "mode=0700") != 0)
      return make_error(errno, d.parent_path().string() + " is not a BPF file system and mounting one there failed");
    spdlog::info("mounted a BPF file system at {}", d.parent_path().string());
  }
  std::filesystem::create_directories(d, ec);
  if (ec) return make_error(ec.value(), "cannot create " + dir);
  if (!replace_ && ::access((dir + "/cgroup_stats").c_str(), F_OK) == 0) {
    spdlog::info("{} already has pinned maps (another khagent?): not pinning", dir);
    return {};
  }
  std::vector<bpf_map*> maps = {skel_->maps.cgroup_stats, skel_->maps.cgroup_slots,      skel_->maps.interference,
                                skel_->maps.pair_slots,   skel_->maps.throttle_stats,    skel_->maps.cpu_state,
                                skel_->maps.counters,     skel_->maps.protected_cgroups, skel_->maps.reclaim_stats};
  if (stall_detector_) maps.push_back(skel_->maps.stall_stats);  // empty without the detector
  for (bpf_map* m : maps) {
    std::string path = dir + "/" + bpf_map__name(m);
    if (::unlink(path.c_str()) == 0) spdlog::info("replaced stale pin {}", path);
    if (int err = bpf_map__pin(m, path.c_str()); err) return make_error(err, "pinning " + path);
    pinned_.push_back(path);
  }
  spdlog::info("maps pinned under {} (bpftool map dump pinned {}/cgroup_stats)", dir, dir);
  return {};
}

RunqMapFds RunqBpf::map_fds(bool owner) const {
  RunqMapFds f;
  f.cgroup_stats = bpf_map__fd(skel_->maps.cgroup_stats);
  f.cgroup_slots = bpf_map__fd(skel_->maps.cgroup_slots);
  f.interference = bpf_map__fd(skel_->maps.interference);
  f.pair_slots = bpf_map__fd(skel_->maps.pair_slots);
  if (owner) {
    f.cgroup_moved = bpf_map__fd(skel_->maps.cgroup_moved);
    f.cgroup_free = bpf_map__fd(skel_->maps.cgroup_free);
    f.pair_moved = bpf_map__fd(skel_->maps.pair_moved);
    f.pair_free = bpf_map__fd(skel_->maps.pair_free);
  }
  f.throttle_stats = throttle_source_ == ThrottleSource::Fentry ? bpf_map__fd(skel_->maps.throttle_stats) : -1;
  f.counters = bpf_map__fd(skel_->maps.counters);
  if (stall_detector_) f.stall_stats = bpf_map__fd(skel_->maps.stall_stats);
  f.reclaim_stats = reclaim_kinds_.empty() ? -1 : bpf_map__fd(skel_->maps.reclaim_stats);
  f.removed_cgroups = removals_ ? bpf_map__fd(skel_->maps.removed_cgroups) : -1;
  return f;
}

namespace {

// The "memlock:" line of a BPF map's fdinfo: the kernel's own figure of the
// memory the map holds (map_mem_usage), the one bpftool map show prints.
uint64_t fdinfo_memlock(int fd) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
  FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  char line[256];
  unsigned long long v = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "memlock: %llu", &v) == 1) break;
  std::fclose(f);
  return v;
}

}  // namespace

std::vector<MapMemory> RunqBpf::map_memory() const {
  std::vector<MapMemory> out;
  bpf_map* m;
  bpf_object__for_each_map(m, skel_->obj) {
    int fd = bpf_map__fd(m);
    if (fd < 0) continue;
    bpf_map_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) continue;
    out.push_back(MapMemory{bpf_map__name(m), info.type, info.key_size, info.value_size, info.max_entries,
                            info.map_flags, fdinfo_memlock(fd)});
  }
  return out;
}

std::vector<ProgStats> RunqBpf::prog_stats() const {
  std::vector<ProgStats> out;
  bpf_program* p;
  bpf_object__for_each_program(p, skel_->obj) {
    int fd = bpf_program__fd(p);
    if (fd < 0) continue;
    bpf_prog_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) continue;
    out.push_back(ProgStats{bpf_program__name(p), info.run_time_ns, info.run_cnt});
  }
  return out;
}

Result<void> RunqBpf::scan_waits() {
  // Nothing protected: no wait to report, and no walk of every task.
  if (!scan_ || (protected_known_ && protected_.empty())) return {};
  int fd = bpf_iter_create(bpf_link__fd(skel_->links.scan_waits));
  if (fd < 0) return make_error(errno, "creating a scan_waits iterator");
  char buf[64];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) {
  }
  int err = n < 0 ? errno : 0;
  ::close(fd);
  if (err) return make_error(err, "running the scan_waits iterator");
  return {};
}

Result<void> RunqBpf::sync_protected(const std::unordered_map<uint64_t, uint64_t>& want) {
  constexpr uint64_t kReadBackNs = 60'000'000'000ULL;
  int fd = bpf_map__fd(skel_->maps.protected_cgroups);
  const uint64_t now = mono_ns();
  if (!protected_known_ || now - protected_read_ns_ >= kReadBackNs) {
    protected_.clear();
    uint64_t key = 0, next = 0;
    const uint64_t* cur = nullptr;
    kh_protect v{};
    while (bpf_map_get_next_key(fd, cur, &next) == 0) {
      if (bpf_map_lookup_elem(fd, &next, &v) == 0) protected_[next] = v.threshold_ns;
      key = next;
      cur = &key;
    }
    protected_known_ = true;
    protected_read_ns_ = now;
  }
  std::vector<uint64_t> stale;
  for (const auto& [id, _] : protected_)
    if (!want.count(id)) stale.push_back(id);
  for (uint64_t id : stale) {
    bpf_map_delete_elem(fd, &id);
    protected_.erase(id);
  }
  for (const auto& [id, threshold] : want) {
    auto have = protected_.find(id);
    if (have != protected_.end() && have->second == threshold) continue;
    kh_protect v{};
    v.threshold_ns = threshold;
    if (bpf_map_update_elem(fd, &id, &v, BPF_ANY) != 0) {
      protected_known_ = false;  // read it back next time
      return make_error(errno, "updating protected_cgroups");
    }
    protected_[id] = threshold;
  }
  return {};
}

void RunqBpf::RingDeleter::operator()(ring_buffer* rb) const { ring_buffer__free(rb); }

Result<void> RunqBpf::open_events(EventFn on_event) {
  on_event_ = std::move(on_event);
  auto cb = [](void* ctx, void* data, size_t size) -> int {
    auto* self = static_cast<RunqBpf*>(ctx);
    if (size >= sizeof(kh_wait_event) && self->on_event_) self->on_event_(*static_cast<const kh_wait_event*>(data));
    return 0;
  };
  ring_buffer* rb = ring_buffer__new(bpf_map__fd(skel_->maps.wait_events), cb, this, nullptr);
  if (!rb) return make_error(errno, "opening the wait_events ring buffer");
  events_.reset(rb);
  return {};
}

Result<int> RunqBpf::poll_events(int timeout_ms) {
  if (!events_) return make_error(EINVAL, "wait events not opened");
  int n = ring_buffer__poll(events_.get(), timeout_ms);
  if (n < 0 && n != -EINTR) return make_error(-n, "polling wait events");
  return n < 0 ? 0 : n;
}

int RunqBpf::events_fd() const { return events_ ? ring_buffer__epoll_fd(events_.get()) : -1; }

Result<int> RunqBpf::drain_events() {
  if (!events_) return make_error(EINVAL, "wait events not opened");
  int n = ring_buffer__consume(events_.get());
  if (n < 0) return make_error(-n, "reading wait events");
  return n;
}

RunqBpf::~RunqBpf() {
  events_.reset();
  for (const auto& path : pinned_) ::unlink(path.c_str());
  if (!pinned_.empty())  // ours, if nothing else was put there
    ::rmdir(std::filesystem::path(pinned_.front()).parent_path().c_str());
  runq_bpf__destroy(skel_);
}

}  // namespace khagent
