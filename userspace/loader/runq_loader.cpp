#include "khagent/loader/runq_loader.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <tuple>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "khagent/config/config.h"
#include "khagent/util/clock.h"
#include "runq.skel.h"

namespace khagent {

namespace {

bool g_libbpf_verbose = false;

int libbpf_log(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level == LIBBPF_DEBUG && !g_libbpf_verbose) return 0;
  char buf[2048];
  int n = vsnprintf(buf, sizeof(buf), fmt, args);
  std::string msg(buf, n > 0 ? std::min<size_t>(static_cast<size_t>(n), sizeof(buf) - 1) : 0);
  while (!msg.empty() && msg.back() == '\n') msg.pop_back();
  switch (level) {
    case LIBBPF_WARN: spdlog::warn("libbpf: {}", msg); break;
    case LIBBPF_INFO: spdlog::info("libbpf: {}", msg); break;
    default: spdlog::debug("libbpf: {}", msg); break;
  }
  return 0;
}

// Minimum kernel: task storage in tracing programs (commit a10787e6d58c,
// "bpf: Enable task local storage for tracing programs", v5.13); before it
// task storage was for BPF LSM programs only.
constexpr int kMinMajor = 5, kMinMinor = 13;

}  // namespace

void route_libbpf_logs(bool verbose) {
  g_libbpf_verbose = verbose;
  libbpf_set_print(libbpf_log);
}

Result<void> preflight(const std::string& btf_path) {
  if (geteuid() != 0)
    return make_error(EPERM, "khagent must run as root (it loads BPF programs and reads every cgroup)");
  struct utsname u{};
  if (uname(&u) == 0) {
    int major = 0, minor = 0;
    if (sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
        (major < kMinMajor || (major == kMinMajor && minor < kMinMinor)))
      return make_error(ENOTSUP, std::string("kernel ") + u.release + " is too old: khagent needs " +
                                     std::to_string(kMinMajor) + "." + std::to_string(kMinMinor) +
                                     " or newer (BPF task storage in tracing programs)");
  }
  if (access(btf_path.c_str(), R_OK) != 0)
    return make_error(errno, "kernel BTF " + btf_path +
                                 " is missing: khagent needs a kernel built with "
                                 "CONFIG_DEBUG_INFO_BTF=y");
  return {};
}

namespace {

// Parsing the kernel's BTF takes a while (seconds under emulation): one
// parse serves every check of a start.
struct VmlinuxBtf {
  struct btf* btf = btf__load_vmlinux_btf();
  ~VmlinuxBtf() { btf__free(btf); }
  VmlinuxBtf() = default;
  VmlinuxBtf(const VmlinuxBtf&) = delete;
  VmlinuxBtf& operator=(const VmlinuxBtf&) = delete;
};

bool has_throttled_clock(const struct btf* vmlinux) {
  if (!vmlinux) return false;
  int id = btf__find_by_name_kind(vmlinux, "cfs_rq", BTF_KIND_STRUCT);
  if (id <= 0) return false;
  const struct btf_type* t = btf__type_by_id(vmlinux, static_cast<__u32>(id));
  const struct btf_member* m = btf_members(t);
  for (int i = 0; i < btf_vlen(t); i++, m++)
    if (std::strcmp(btf__name_by_offset(vmlinux, m->name_off), "throttled_clock_self_time") == 0) return true;
  return false;
}

// Whether the kernel's BTF has an enumerator named `name` (a uapi flag the
// kernel knows, such as BPF_F_TIMER_CPU_PIN: 6.7+).
bool has_enum_value(const struct btf* vmlinux, const char* name) {
  if (!vmlinux) return false;
  const __u32 n = btf__type_cnt(vmlinux);
  for (__u32 id = 1; id < n; id++) {
    const struct btf_type* t = btf__type_by_id(vmlinux, id);
    if (btf_is_enum(t)) {
      const struct btf_enum* e = btf_enum(t);
      for (int i = 0; i < btf_vlen(t); i++, e++)
        if (std::strcmp(btf__name_by_offset(vmlinux, e->name_off), name) == 0) return true;
    } else if (btf_is_enum64(t)) {
      const struct btf_enum64* e = btf_enum64(t);
      for (int i = 0; i < btf_vlen(t); i++, e++)
        if (std::strcmp(btf__name_by_offset(vmlinux, e->name_off), name) == 0) return true;
    }
  }
  return false;
}

// Loads `r0 = 0; exit` as a tracing program of `type` on the kernel's BTF
// function `btf_id`: its fd, or -1 with errno set.
int load_trivial_tracing(enum bpf_attach_type type, int btf_id) {
  struct bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = type, .attach_btf_id = static_cast<__u32>(btf_id));
  return bpf_prog_load(BPF_PROG_TYPE_TRACING, "kh_probe", "GPL", insns, 2, &opts);
}

// Why not, or "" when this kernel loads and attaches an fentry program on
// `func`.
std::string fentry_refusal(const struct btf* vmlinux, const std::string& func) {
  if (!vmlinux) return "the kernel's BTF could not be read";
  int id = btf__find_by_name_kind(vmlinux, func.c_str(), BTF_KIND_FUNC);
  if (id < 0) return func + " is not in the kernel's BTF";
  int fd = load_trivial_tracing(BPF_TRACE_FENTRY, id);
  if (fd < 0) return "loading fentry/" + func + " refused: " + std::strerror(errno);
  // Loading is not enough on every kernel: try to attach as well.
  int link = bpf_link_create(fd, 0, BPF_TRACE_FENTRY, nullptr);
  int attach_errno = errno;
  close(fd);
  if (link < 0) return "attaching fentry/" + func + " refused: " + std::strerror(attach_errno);
  close(link);
  return "";
}

// Why not, or "" when this kernel loads a BPF iterator program of `target`
// (task, bpf_map_elem, ...). Kernels and security policies differ: one 6.18
// host here loads task iterators but refuses map-element ones (EPERM).
std::string iterator_refusal(const struct btf* vmlinux, const std::string& target) {
  if (!vmlinux) return "the kernel's BTF could not be read";
  std::string func = "bpf_iter_" + target;
  int id = btf__find_by_name_kind(vmlinux, func.c_str(), BTF_KIND_FUNC);
  if (id < 0) return func + " is not in the kernel's BTF";
  int fd = load_trivial_tracing(BPF_TRACE_ITER, id);
  if (fd < 0) return "loading an iter/" + target + " program refused: " + std::strerror(errno);
  close(fd);
  return "";
}

bool probe_fentry_in(const struct btf* vmlinux, const std::string& func, std::string* why = nullptr) {
  std::string refused = fentry_refusal(vmlinux, func);
  if (!refused.empty()) spdlog::info("fentry probe: {}", refused);
  if (why) *why = refused;
  return refused.empty();
}

}  // namespace

LoaderOptions with_fast_path(LoaderOptions base, const FastPathConfig& fp) {
  if (fp.enabled) {
    base.event_min_ns = fp.wait_threshold_ns;
    base.event_interval_ns = fp.min_interval_ns;
    base.scan_waits = fp.scan_interval_ns > 0;
  }
  return base;
}

bool kernel_has_throttled_clock() {
  VmlinuxBtf v;
  return has_throttled_clock(v.btf);
}

bool probe_fentry(const std::string& func) {
  VmlinuxBtf v;
  return probe_fentry_in(v.btf, func);
}

std::string iterator_refusal(const std::string& target) {
  VmlinuxBtf v;
  return iterator_refusal(v.btf, target);
}

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
  bool stalls = o.stall_period_ns > 0 && ncpus > 0;
  std::string no_stalls = "turned off (--stall-period 0)";
  if (stalls && libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_SYSCALL, nullptr) != 1) {
    stalls = false;
    no_stalls = "no syscall programs in this kernel (5.14+) to set the timers up";
  }
  // Slot arrays, their indexes, free queues and moved bitmaps: one size each
  // for cgroups and for pairs.
  for (bpf_map* m :
       {s->maps.cgroup_stats, s->maps.cgroup_slots, s->maps.cgroup_free, s->maps.throttle_stats, s->maps.reclaim_stats})
    bpf_map__set_max_entries(m, o.max_cgroups);
  bpf_map__set_max_entries(s->maps.cgroup_moved, (o.max_cgroups + 63) / 64);
  for (bpf_map* m : {s->maps.interference, s->maps.pair_slots, s->maps.pair_free})
    bpf_map__set_max_entries(m, o.max_pairs);
  bpf_map__set_max_entries(s->maps.pair_moved, (o.max_pairs + 63) / 64);

  std::vector<LeftOutProgram> left_out;
  auto leave_out = [&](bpf_program* p, const std::string& why) {
    bpf_program__set_autoload(p, false);
    left_out.push_back({bpf_program__name(p), why});
  };
  bool fentry = false, kernel_clock = false;
  std::string no_fentry = "turned off (--no-fentry): throttling read from cpu.stat";
  std::string no_task_iter;
  {  // freed before the load parses the kernel's BTF again
    VmlinuxBtf vmlinux;
    fentry = o.allow_fentry && probe_fentry_in(vmlinux.btf, "throttle_cfs_rq", &no_fentry) &&
             probe_fentry_in(vmlinux.btf, "unthrottle_cfs_rq", &no_fentry);
    kernel_clock = has_throttled_clock(vmlinux.btf);
    no_task_iter = iterator_refusal(vmlinux.btf, "task");
    if (stalls && !has_enum_value(vmlinux.btf, "BPF_F_TIMER_CPU_PIN")) {
      stalls = false;
      no_stalls = "the kernel has no BPF timers pinned to a CPU (BPF_F_TIMER_CPU_PIN, Linux 6.7+)";
    }
    // Direct reclaim by the task that pays for it: each pair of tracepoints
    // where the kernel has it (the memcg pair needs CONFIG_MEMCG).
    for (auto [begin, end, event] :
         {std::tuple{s->progs.handle_direct_reclaim_begin, s->progs.handle_direct_reclaim_end, "direct_reclaim"},
          std::tuple{s->progs.handle_memcg_reclaim_begin, s->progs.handle_memcg_reclaim_end, "memcg_reclaim"}}) {
      for (const char* edge : {"_begin", "_end"}) {
        const std::string tp = std::string("btf_trace_mm_vmscan_") + event + edge;
        if (vmlinux.btf && btf__find_by_name_kind(vmlinux.btf, tp.c_str(), BTF_KIND_TYPEDEF) > 0) continue;
        const std::string why = "no tracepoint mm_vmscan_" + std::string(event) + edge + " in the kernel's BTF";
        if (bpf_program__autoload(begin)) leave_out(begin, why);
        if (bpf_program__autoload(end)) leave_out(end, why);
      }
    }
  }
  s->rodata->cfg_stall_period_ns = stalls ? o.stall_period_ns : 0;
  s->rodata->cfg_stall_min_ns = o.stall_min_ns;
  bpf_map__set_max_entries(s->maps.stall_timers, stalls ? static_cast<uint32_t>(ncpus) : 1);
  // The task iterator is optional: refused, it is left out, never the whole load.
  s->rodata->cfg_fentry_clock = fentry && !kernel_clock;
  if (!fentry) {
    if (o.allow_fentry) no_fentry = "fentry probe: " + no_fentry;
    leave_out(s->progs.handle_throttle_cfs_rq, no_fentry);
    leave_out(s->progs.handle_unthrottle_cfs_rq, no_fentry);
    // Only the fentry programs use these: keep them, empty and minimal.
    bpf_map__set_max_entries(s->maps.throttle_stats, 1);
    bpf_map__set_max_entries(s->maps.throttle_start, 1);
  }
  if (!s->rodata->cfg_fentry_clock) bpf_map__set_max_entries(s->maps.throttle_clock, 1);
  // Reading another CPU's cpu_state needs bpf_map_lookup_percpu_elem (5.19+):
  // the migration handler (a wait that moves CPUs while queued) and the
  // task iterator for waits still going on (run every fast_path.scan_interval; only the fast
  // path uses it).
  bool percpu_lookup =
      libbpf_probe_bpf_helper(BPF_PROG_TYPE_SOCKET_FILTER, BPF_FUNC_map_lookup_percpu_elem, nullptr) == 1;
  const char* no_percpu_lookup = "no bpf_map_lookup_percpu_elem (5.19+)";
  if (!percpu_lookup) leave_out(s->progs.handle_sched_migrate_task, no_percpu_lookup);
  spdlog::info("waits that move to another CPU while queued: {}",
               percpu_lookup ? "each part blamed on who ran where it was queued (sched_migrate_task)"
                             : "blamed by the CPU where they end (no bpf_map_lookup_percpu_elem before 5.19)");
  self->scan_ = o.event_min_ns != UINT64_MAX && o.scan_waits && percpu_lookup && no_task_iter.empty();
  const std::string no_scan = !percpu_lookup ? std::string(no_percpu_lookup) : no_task_iter;
  if (!self->scan_)
    leave_out(s->progs.scan_waits, o.event_min_ns == UINT64_MAX ? "fast path off (fast_path.enabled: false)"
                                   : !o.scan_waits              ? "fast_path.scan_interval is 0"
                                                                : no_scan);
  if (o.event_min_ns != UINT64_MAX)
    spdlog::info("fast path: waits over their threshold reported when they end{}",
                 self->scan_    ? ", and while they last (a task iterator, every fast_path.scan_interval)"
                 : o.scan_waits ? "; not while they last (" + no_scan + ")"
                                : "; not while they last (fast_path.scan_interval is 0)");
  self->fentry_ = fentry;
  self->throttle_source_ = fentry && !o.cpu_controller_on_v1 ? ThrottleSource::Fentry : ThrottleSource::CpuStat;
  if (fentry && o.cpu_controller_on_v1)
    spdlog::info(
        "throttled time: from cpu.stat, as the cpu controller is on cgroup v1 here (fentry sees v1 cgroups, "
        "whose ids are not the v2 ids the maps use)");
  spdlog::info("throttled waits: {}", kernel_clock ? "split by the kernel's throttled clock (cfs_rq, 6.6+)"
                                      : fentry
                                          ? "split by a throttled clock kept by fentry (a cfs_rq's own throttling; an "
                                            "ancestor's: throttled as a whole if they began throttled)"
                                          : "throttled as a whole if they began throttled (no throttled clock before "
                                            "6.6 without fentry: approximate)");

  if (!stalls) leave_out(s->progs.init_stall_timer, no_stalls);
  if (o.before_load) o.before_load(s->obj, left_out);
  if (int err = runq_bpf__load(s); err)
    return make_error(err, "loading the runq BPF programs (the verifier log above says why)");
  // Every slot free, before any program runs.
  for (auto [q, n] : {std::pair{s->maps.cgroup_free, o.max_cgroups}, std::pair{s->maps.pair_free, o.max_pairs}})
    for (uint32_t i = 0; i < n; i++)
      if (bpf_map_update_elem(bpf_map__fd(q), nullptr, &i, BPF_ANY) != 0)
        return make_error(errno, std::string("filling ") + bpf_map__name(q));
  if (stalls) self->stall_detector_ = self->init_stall_timers(ncpus);
  if (!stalls)
    spdlog::info("stall detector: {}; waits through CPU stalls are blamed on whoever was current", no_stalls);
  if (!o.attach) {
    self->scan_ = false;  // nothing to run without its link
    return self;
  }

  if (auto r = self->attach(); !r) return r.error();
  uint64_t mem = 0;
  for (const auto& m : self->map_memory()) mem += m.memlock;
  spdlog::info(
      "BPF maps: {:.1f} MiB (memlock, {} possible CPUs; cgroup_stats {} entries, "
      "interference {})",
      static_cast<double>(mem) / (1 << 20), libbpf_num_possible_cpus(), o.max_cgroups, o.max_pairs);
  spdlog::info("throttling source: {}{}", throttle_source_name(self->throttle_source_),
               self->throttle_source_ == ThrottleSource::Fentry ? " (fentry on throttle_cfs_rq/unthrottle_cfs_rq)"
               : self->fentry_
                   ? " (cpu controller on cgroup v1; reading the cpu.stat of cgroups with throttled waits)"
                   : " (fentry unavailable on this kernel; reading the cpu.stat of cgroups with throttled waits)");
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
  // Reclaim time: both ends of a kind or neither (a begin alone counts
  // nothing, an end alone finds no start).
  reclaim_kinds_.clear();
  for (auto [begin, blink, end, elink, kind] :
       {std::tuple{s->progs.handle_direct_reclaim_begin, &s->links.handle_direct_reclaim_begin,
                   s->progs.handle_direct_reclaim_end, &s->links.handle_direct_reclaim_end, "node"},
        std::tuple{s->progs.handle_memcg_reclaim_begin, &s->links.handle_memcg_reclaim_begin,
                   s->progs.handle_memcg_reclaim_end, &s->links.handle_memcg_reclaim_end, "memcg"}}) {
    if (!bpf_program__autoload(begin) || !bpf_program__autoload(end)) continue;
    *blink = bpf_program__attach(begin);
    *elink = *blink ? bpf_program__attach(end) : nullptr;
    if (*blink && *elink) {
      reclaim_kinds_.emplace_back(kind);
      continue;
    }
    spdlog::warn("attaching {} reclaim tracepoints failed ({}); that reclaim is not timed", kind, std::strerror(errno));
    bpf_link__destroy(*blink);
    *blink = nullptr;
  }
  spdlog::info("memory reclaim paid by each cgroup: {}",
               reclaim_kinds_.empty()
                   ? std::string("not timed (no vmscan tracepoints)")
                   : fmt::format("timed from the vmscan tracepoints ({})", fmt::join(reclaim_kinds_, ", ")));
  // Removed cgroups reported by the kernel: without it, the collector checks
  // idle cgroups itself every few seconds.
  removals_ = false;
  if (bpf_program__autoload(s->progs.handle_cgroup_rmdir)) {
    s->links.handle_cgroup_rmdir = bpf_program__attach(s->progs.handle_cgroup_rmdir);
    if (s->links.handle_cgroup_rmdir) {
      removals_ = true;
      spdlog::info("removed cgroups: reported by the kernel (tp_btf/cgroup_rmdir), forgotten at the next tick");
    } else
      spdlog::warn(
          "attaching handle_cgroup_rmdir failed ({}); removed cgroups are found by checking "
          "idle ones every few seconds",
          std::strerror(errno));
  }
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
