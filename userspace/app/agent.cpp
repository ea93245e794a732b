#include "khagent/app/agent.h"
#include "khagent/app/yarn_downscaler.h"

#include <unistd.h>

#include <dirent.h>
#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <ranges>
#include <set>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "khagent/abi/runq.h"
#include "khagent/actuate/actuator.h"
#include "khagent/collect/bpf_maps.h"
#include "khagent/collect/cgroupfs.h"
#include "khagent/collect/collector.h"
#include "khagent/collect/cpustat.h"
#include "khagent/collect/kubelet_pods.h"
#include "khagent/collect/topology.h"
#include "khagent/export/metrics.h"
#include "khagent/loader/runq_loader.h"
#include "khagent/policy/controller.h"
#include "khagent/policy/cpuset.h"
#include "khagent/policy/levers.h"
#include "khagent/signals/workload.h"
#include "khagent/util/clock.h"
#include "khagent/util/strings.h"

namespace khagent {

volatile std::sig_atomic_t g_stop = 0;

namespace {

// Subdirectories of a cgroup (one level), as cgroup paths.
std::vector<std::string> child_cgroups(const std::string& root, const std::string& cgroup) {
  std::vector<std::string> out;
  DIR* d = ::opendir((root + (cgroup.empty() ? "/" : cgroup)).c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
    std::string p = cgroup + "/" + e->d_name;
    if (is_clean_cgroup_path(p)) out.push_back(p);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// Whether the kernel has cpu.idle (cgroup SCHED_IDLE, 5.15+): the v1 cpu
// root has it; in v2 the root has no cpu files, so look at a child with the
// cpu controller.
bool probe_idle(const CgroupRoots& roots, CgroupBackend b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (b == CgroupBackend::V1Hybrid) return fs::exists(roots.cpu_v1 + "/cpu.idle", ec);
  for (const auto& c : child_cgroups(roots.unified, ""))
    if (fs::exists(roots.unified + c + "/cpu.weight", ec)) return fs::exists(roots.unified + c + "/cpu.idle", ec);
  return true;  // no child with the cpu controller yet: assume, a failed write says otherwise
}

}  // namespace

namespace {

class Agent {
 public:
  Agent(Config cfg, const CliOptions& o) : cfg_(std::move(cfg)), opts_(o) {}
  int run();

 private:
  void tick();
  void fast_step();
  std::vector<OfflineTarget> targets(const NodeSignals& node);
  std::vector<DesiredValue> desired(const Decision& d, bool fast);
  void ladder(const Decision& d, const ControllerInput& in);
  // A lever in force: always (configured) or on the ladder now.
  bool lever(Lever l) const {
    return lever_on(ladder_, l) || (l == Lever::Cpuset && cfg_.cpuset.enabled) ||
           std::find(cfg_.ladder.always.begin(), cfg_.ladder.always.end(), l) != cfg_.ladder.always.end();
  }
  void apply(const Decision& d, bool fast, uint64_t first_event_ns);
  void log_records(const std::vector<ActionRecord>& recs, const std::string& why);

  Config cfg_;
  CliOptions opts_;
  Mounts mounts_;
  Topology topo_;
  std::unique_ptr<RunqBpf> bpf_;
  std::unique_ptr<BpfMapSource> maps_;
  std::unique_ptr<CgroupIndex> index_;
  std::unique_ptr<CpuStatThrottleReader> cpu_stat_;
  std::unique_ptr<Collector> collector_;
  std::unique_ptr<Classifier> classifier_;
  std::unique_ptr<RealCgroupFs> cgfs_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<Actuator> actuator_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<KubeletPodsWatcher> pods_;
  std::unique_ptr<YarnDownscaler> yarn_;
  YarnOffer yarn_offer_;  // the last one, re-offered with the fast path's budget
  ControllerState state_;
  ControllerInput last_input_;
  std::vector<OfflineTarget> targets_;
  CgroupBackend backend_ = CgroupBackend::V2;
  bool idle_supported_ = true;
  LadderState ladder_;
  uint64_t fast_breaches_ = 0;  // since the last tick
  std::vector<kh_wait_event> pending_;
  uint64_t last_scan_ns_ = 0;                     // mono_ns of the last scan for waits still going on
  std::map<std::string, uint64_t> quota_warned_;  // pod -> last log
  std::map<std::string, uint64_t> warned_;        // problem -> last log (one a minute)
  std::optional<CpuSet> exclusive_cpus_;          // from the tick's cpu_manager_state read
  uint64_t ticks_ = 0;
  // Reaction time: first over-threshold wait to the cgroup write.
  uint64_t reactions_ = 0;
  double reaction_max_ms_ = 0, reaction_sum_ms_ = 0;
};

int Agent::run() {
  if (auto r = preflight(); !r) {
    spdlog::error("{}", r.error().str());
    return 2;
  }
  auto m = find_mounts();
  if (!m) {
    spdlog::error("{}", m.error().str());
    return 2;
  }
  mounts_ = *m;
  auto topo = read_topology();
  if (!topo) {
    spdlog::error("reading the CPU topology: {}", topo.error().str());
    return 1;
  }
  topo_ = *topo;
  spdlog::info("node: {} CPUs ({} threads per core), cgroup2 at {}", topo_.cpus.size(), topo_.threads_per_core(),
               mounts_.cgroup2);
  const CgroupRoots roots{mounts_.cgroup2, mounts_.cpu_v1, mounts_.cpuset_v1};
  auto be = detect_backend(roots);  // pure v1 hosts are refused here
  if (!be) {
    spdlog::error("{}", be.error().str());
    return 2;
  }
  backend_ = *be;
  idle_supported_ = probe_idle(roots, backend_);
  if (backend_ == CgroupBackend::V2)
    spdlog::info("cgroup backend: {}: measuring and writing in {}", backend_name(backend_), mounts_.cgroup2);
  else
    spdlog::info("cgroup backend: {}: measuring by cgroup2 ids in {}, writing cpu in {} and cpuset in {}",
                 backend_name(backend_), mounts_.cgroup2, mounts_.cpu_v1,
                 mounts_.cpuset_v1.empty() ? "(none)" : mounts_.cpuset_v1);
  spdlog::info("levers: {} on offline targets{}; ladder [{}] on a lasting breach",
               !cfg_.offline.idle ? "no idle lever"
               : idle_supported_  ? "cpu.idle=1"
                                  : "minimum weight (no cpu.idle in this kernel)",
               lever(Lever::Cpuset) && lever(Lever::Quota) ? ", cpuset and quota always"
               : lever(Lever::Cpuset)                      ? ", cpuset always"
               : lever(Lever::Quota)                       ? ", quota always"
                                                           : "",
               fmt::join(cfg_.ladder.rungs | std::views::transform([](Lever l) { return lever_name(l); }), ", "));

  if (opts_.metrics) {
    MetricsOptions mo;
    mo.address = opts_.metrics_address;
    mo.port = opts_.metrics_port;
    mo.stall_seconds = std::max(10.0, 20.0 * static_cast<double>(cfg_.tick_ns) / 1e9);
    metrics_ = std::make_unique<Metrics>(mo);
    if (auto r = metrics_->start(); !r) {
      spdlog::error("{}", r.error().str());
      return 2;
    }
    spdlog::info("serving /metrics, /healthz and /readyz on {}:{}", opts_.metrics_address, metrics_->port());
  }
  if (!cfg_.kubelet_pods_url.empty()) {
    KubeletPodsOptions ko;
    ko.url = cfg_.kubelet_pods_url;
    ko.token_file = cfg_.kubelet_token_file;
    ko.ca_file = cfg_.kubelet_ca_file;
    ko.insecure_skip_verify = cfg_.kubelet_insecure_skip_verify;
    pods_ = std::make_unique<KubeletPodsWatcher>(ko);
    spdlog::info("pod metadata from {} (priority classes, labels, annotations)", ko.url);
  }
  if (cfg_.yarn.enabled) {
    std::vector<std::string> hosts;
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0) hosts.emplace_back(host);
    std::string node = node_identity(opts_).name;
    if (!node.empty() && (hosts.empty() || node != hosts.front())) hosts.push_back(node);
    yarn_ = std::make_unique<YarnDownscaler>(cfg_.yarn, cfg_.dry_run, mounts_.cgroup2, hosts,
                                             cfg_.dry_run ? "" : cfg_.state_file + ".yarn");
  }
  LoaderOptions lo = with_fast_path(opts_.loader, cfg_.fast_path);
  lo.cpu_controller_on_v1 = !mounts_.cpu_v1.empty();
  auto bpf = RunqBpf::open_and_load(lo);
  if (!bpf) {
    spdlog::error("{}", bpf.error().str());
    return 1;
  }
  bpf_ = std::move(bpf.value());
  if (metrics_) {
    metrics_->set_bpf_attached(true);
    metrics_->set_throttle_source(throttle_source_name(bpf_->throttle_source()));
  }
  if (auto r = bpf_->open_events([this](const kh_wait_event& e) { pending_.push_back(e); }); !r) {
    spdlog::error("{}", r.error().str());
    return 1;
  }
  maps_ = std::make_unique<BpfMapSource>(bpf_->map_fds(true));
  index_ = std::make_unique<CgroupIndex>(mounts_.cgroup2);
  cpu_stat_ = std::make_unique<CpuStatThrottleReader>(mounts_.cgroup2, mounts_.cpu_v1);
  collector_ = std::make_unique<Collector>(*maps_, *index_, cpu_stat_.get(), bpf_->throttle_source());
  collector_->set_totals(false);       // decisions and metrics use intervals only
  collector_->set_changes_only(true);  // the classifier remembers idle cgroups
  classifier_ = std::make_unique<Classifier>(cfg_.classes, cfg_.offline.yarn_hierarchy);
  cgfs_ = std::make_unique<RealCgroupFs>(roots);

  store_ = std::make_unique<StateStore>(cfg_.state_file);
  auto loaded = store_->load();
  for (const auto& r : store_->refused()) spdlog::error("state file {}: {}", cfg_.state_file, r);
  if (!loaded && cfg_.dry_run) {
    // A dry run writes nothing, the state file included: no move aside.
    spdlog::error("{}; dry run: leaving it as it is", loaded.error().str());
  } else if (auto& r = loaded; !r) {
    // Both generations damaged: keep the file for an operator and start a new
    // record; the values now in place are taken as the originals.
    std::string aside = cfg_.state_file + ".corrupt-" + std::to_string(time(nullptr));
    spdlog::error(
        "{}; moved to {} and starting a new state file (originals recorded there may "
        "include values khagent wrote before)",
        r.error().str(), aside);
    if (::rename(cfg_.state_file.c_str(), aside.c_str()) != 0)
      spdlog::error("cannot move {} aside: {}", cfg_.state_file, std::strerror(errno));
  } else {
    spdlog::info("{}", store_->note());
  }
  actuator_ = std::make_unique<Actuator>(*cgfs_, *store_, cfg_.dry_run, topo_.all());
  if (cfg_.dry_run) spdlog::warn("dry run: actions are logged, nothing is written");

  if (auto first = collector_->tick(); !first) {
    spdlog::error("{}", first.error().str());
    return 1;
  }
  if (yarn_) yarn_->start();
  uint64_t next_tick = mono_ns() + cfg_.tick_ns;
  while (!g_stop) {
    uint64_t now = mono_ns();
    int timeout_ms = now >= next_tick ? 0 : static_cast<int>((next_tick - now + 999999) / 1000000);
    auto n = bpf_->poll_events(timeout_ms);
    if (!n) spdlog::warn("{}", n.error().str());
    if (g_stop) break;
    if (!pending_.empty()) fast_step();
    now = mono_ns();
    if (now >= next_tick) {
      // Waits still going on: their events arrive with the next poll.
      if (cfg_.fast_path.scan_interval_ns && now - last_scan_ns_ >= cfg_.fast_path.scan_interval_ns) {
        last_scan_ns_ = now;
        if (auto r = bpf_->scan_waits(); !r) spdlog::warn("{}", r.error().str());
      }
      tick();
      next_tick += cfg_.tick_ns;
      if (next_tick < now) next_tick = now + cfg_.tick_ns;  // fell behind: skip, do not burst
    }
  }

  if (pods_) pods_->stop();
  const char* sig = g_stop > 0 ? sigabbrev_np(static_cast<int>(g_stop)) : nullptr;
  spdlog::info("stopping on SIG{}: restoring original values", sig ? sig : "?");
  int failed = 0;
  auto recs = actuator_->restore();
  for (const auto& r : recs) {
    if (r.outcome == ActionOutcome::Rejected) failed++;
    if (r.outcome != ActionOutcome::Unchanged)
      spdlog::info("restore {} {}: '{}' -> '{}' ({}){}", r.cgroup, cgroup_file_name(r.file), r.from, r.to,
                   outcome_name(r.outcome), r.message.empty() ? "" : ": " + r.message);
  }
  // After the cgroups (local and fast): give YARN the node's configured
  // resources back; this may wait on the ResourceManager.
  if (yarn_) yarn_->stop(true);
  if (reactions_)
    spdlog::info("fast path: {} reactions, mean {:.2f} ms, max {:.2f} ms (wait event to cgroup write)", reactions_,
                 reaction_sum_ms_ / static_cast<double>(reactions_), reaction_max_ms_);
  spdlog::info("stopped after {} ticks{}", ticks_, failed ? "; some originals could not be restored" : "");
  return failed ? 1 : 0;
}

std::vector<OfflineTarget> Agent::targets(const NodeSignals& node) {
  TargetCandidates c;
  auto existing = [&](const std::string& p) { return cgfs_->exists(p); };
  for (const auto& t : cfg_.offline.targets) {
    auto p = confine_cgroup_path(mounts_.cgroup2, t);
    if (!p) {
      std::string key = "target " + t;
      uint64_t now = mono_ns();
      if (auto& last = warned_[key]; !last || now - last >= 60'000'000'000ULL) {
        last = now;
        spdlog::error("offline target '{}' ignored: {}", t, p.error().message);
      }
      continue;
    }
    if (existing(*p)) c.configured.push_back(*p);
  }
  // The BestEffort QoS cgroups and their pods, found by the kubelet's
  // layout (systemd: kubepods.slice/kubepods-besteffort.slice; cgroupfs:
  // kubepods/besteffort), one level of the root at a time.
  for (const auto& top : child_cgroups(mounts_.cgroup2, "")) {
    if (!top.ends_with("kubepods.slice") && !top.ends_with("/kubepods")) continue;
    for (const auto& q : child_cgroups(mounts_.cgroup2, top)) {
      auto id = identify_cgroup(q, cfg_.offline.yarn_hierarchy);
      if (!id.k8s || id.qos != QosTier::BestEffort || !id.pod_uid.empty()) continue;
      c.besteffort_qos.push_back(q);
      for (const auto& pod : child_cgroups(mounts_.cgroup2, q)) {
        auto pid = identify_cgroup(pod, cfg_.offline.yarn_hierarchy);
        if (pid.k8s && !pid.pod_uid.empty() && pid.container_id.empty()) c.besteffort_pods.push_back(pod);
      }
    }
  }
  if (auto y = confine_cgroup_path(mounts_.cgroup2, cfg_.offline.yarn_hierarchy); y && existing(*y))
    c.yarn_roots.push_back(*y);
  for (const auto& p : node.offline_parents) {  // a YARN hierarchy inside the NodeManager's pod
    auto id = identify_cgroup(p, cfg_.offline.yarn_hierarchy);
    if (id.yarn && id.yarn_container.empty() && existing(p)) c.yarn_roots.push_back(p);
  }
  return select_targets(c, cfg_.offline);
}

std::vector<DesiredValue> Agent::desired(const Decision& d, bool fast) {
  LeverInput li;
  li.targets = targets_;
  li.idle_supported = idle_supported_;
  li.cpuset = lever(Lever::Cpuset);
  li.quota = lever(Lever::Quota);
  li.budget_cores = d.budget_cores;
  li.node_cpus = static_cast<double>(topo_.cpus.size());
  if (li.cpuset) {
    PartitionInput pi;
    pi.topo = topo_;
    pi.offline_budget_cores = d.budget_cores;
    pi.online_demand_cores = last_input_.online_cpu_cores + cfg_.budget.reserve_cores;
    if (auto r = parse_cpu_list(cfg_.cpuset.reserved_cpus)) pi.reserved = *r;
    // The kubelet's exclusive CPUs are read at each tick; the fast path
    // uses what the last tick read. No kubelet CPU manager: none exclusive.
    if (!fast || !exclusive_cpus_) {
      exclusive_cpus_.reset();
      std::error_code ec;
      if (!std::filesystem::exists(cfg_.cpuset.cpu_manager_state, ec)) {
        exclusive_cpus_ = CpuSet{};
      } else if (auto cms = read_cpu_manager_state(cfg_.cpuset.cpu_manager_state)) {
        exclusive_cpus_ = cms->exclusive;
      } else {
        spdlog::warn("cpuset partition skipped: {}", cms.error().str());
      }
    }
    if (exclusive_cpus_) {
      pi.exclusive = *exclusive_cpus_;
      Partition p = partition_cpus(pi);
      if (!p.note.empty()) spdlog::debug("cpuset: {}", p.note);
      if (!p.offline.empty()) li.offline_cpus = format_cpu_list(p.offline);
    }
  }
  auto want = offline_writes(li, cfg_);
  if (fast) {  // the fast path moves the budget only: quota and cpuset
    std::erase_if(
        want, [](const DesiredValue& v) { return v.file != CgroupFile::CpuMax && v.file != CgroupFile::CpusetCpus; });
  }
  std::vector<DesiredValue> out;
  for (auto& v : want) {
    FileValue fv = to_backend(backend_, v.file, v.value);
    out.push_back({v.cgroup, fv.file, fv.value});
    // v1 refuses to narrow a cpuset below a child's CPUs (EBUSY), and the
    // kubelet's and runtimes' children copy their parent's: on a hybrid host
    // the partition goes on every descendant in the cpuset hierarchy too
    // (the actuator narrows children first and widens parents first).
    if (fv.file == CgroupFile::V1CpusetCpus && !mounts_.cpuset_v1.empty()) {
      std::vector<std::string> todo = child_cgroups(mounts_.cpuset_v1, v.cgroup);
      for (size_t i = 0; i < todo.size() && i < 4096; i++) {
        out.push_back({todo[i], fv.file, fv.value});
        auto more = child_cgroups(mounts_.cpuset_v1, todo[i]);
        todo.insert(todo.end(), more.begin(), more.end());
      }
    }
  }
  return out;
}

void Agent::ladder(const Decision& d, const ControllerInput& in) {
  LadderInput li;
  li.now_ns = in.now_ns;
  li.breach = fast_breaches_ > 0;
  fast_breaches_ = 0;
  for (const auto& v : d.verdicts)
    if (v.kind == PodVerdictKind::Breach) li.breach = true;
  uint64_t behind = 0;
  for (const auto& p : in.online_pods) behind += p.offline_wait_ns;
  li.offline_wait_rate = static_cast<double>(behind) * 1e9 / static_cast<double>(std::max<uint64_t>(cfg_.tick_ns, 1));
  li.can_cpuset = cfg_.cpuset.enabled || topo_.cpus.size() >= 2;
  LadderDecision ld = ladder_step(li, cfg_.ladder, ladder_);
  if (metrics_) {
    std::vector<std::pair<std::string, bool>> act = {{"idle", cfg_.offline.idle}};
    for (Lever l : {Lever::Cpuset, Lever::Quota}) act.emplace_back(lever_name(l), lever(l));
    metrics_->record_levers(act);
  }
  if (ld.action == LadderAction::Hold) return;
  bool verdict = ld.action == LadderAction::Kept || ld.action == LadderAction::Undone;
  if (metrics_)
    metrics_->record_ladder_step(ld.lever, ladder_action_name(ld.action), ld.before_rate / 1e9, ld.after_rate / 1e9,
                                 verdict);
  if (ld.action == LadderAction::Undone) spdlog::warn("ladder: {}", ld.reason);
  else spdlog::info("ladder {}: {}", ladder_action_name(ld.action), ld.reason);
}

void Agent::log_records(const std::vector<ActionRecord>& recs, const std::string& why) {
  for (const auto& r : recs) {
    switch (r.outcome) {
      case ActionOutcome::Unchanged:
      case ActionOutcome::Backoff: break;
      case ActionOutcome::Written:
        spdlog::info("{} {}: '{}' -> '{}' ({})", r.cgroup, cgroup_file_name(r.file), r.from, r.to, why);
        break;
      case ActionOutcome::DryRun:
        // Nothing is written, so the same change comes back every tick:
        // logged once, and again when what is there or wanted changes.
        if (r.repeat) break;
        spdlog::info("dry run: would write {} {}: '{}' -> '{}' ({})", r.cgroup, cgroup_file_name(r.file), r.from, r.to,
                     why);
        break;
      default: {
        // The same problem every tick is logged once a minute.
        std::string key = r.cgroup + " " + cgroup_file_name(r.file) + " " + outcome_name(r.outcome);
        uint64_t now = mono_ns();
        auto& last = warned_[key];
        if (last && now - last < 60'000'000'000ULL) break;
        last = now;
        spdlog::warn("{} {} '{}': {}: {}", r.cgroup, cgroup_file_name(r.file), r.to, outcome_name(r.outcome),
                     r.message);
      }
    }
  }
}

void Agent::apply(const Decision& d, bool fast, uint64_t first_event_ns) {
  auto want = desired(d, fast);
  auto recs = actuator_->apply(want, mono_ns());
  if (!fast && !store_->empty()) {
    // Put back what is no longer wanted: a lever released, a target gone.
    auto back = actuator_->restore_unwanted(want);
    log_records(back, "no longer wanted (lever released or not an offline target)");
    recs.insert(recs.end(), back.begin(), back.end());
  }
  if (metrics_) {
    metrics_->record_decision(d);
    metrics_->record_actions(recs);
  }
  bool wrote = std::any_of(recs.begin(), recs.end(), [](const ActionRecord& r) {
    return (r.file == CgroupFile::CpuMax || r.file == CgroupFile::CpusetCpus || r.file == CgroupFile::V1CpuCfs ||
            r.file == CgroupFile::V1CpusetCpus) &&
           (r.outcome == ActionOutcome::Written || (r.outcome == ActionOutcome::DryRun && !r.repeat));
  });
  std::string why = fmt::format("{}: {}", action_name(d.action), d.reason);
  if (wrote && first_event_ns) {
    double ms = static_cast<double>(mono_ns() - first_event_ns) / 1e6;
    if (metrics_) metrics_->record_reaction(ms / 1e3);
    reactions_++;
    reaction_sum_ms_ += ms;
    reaction_max_ms_ = std::max(reaction_max_ms_, ms);
    why += fmt::format("; reaction {:.2f} ms from the first over-threshold wait", ms);
  }
  log_records(recs, why);
}

void Agent::fast_step() {
  std::vector<kh_wait_event> events;
  events.swap(pending_);
  if (!state_.initialized) return;  // no tick yet: nothing to compare with
  ControllerInput in = last_input_;
  in.now_ns = mono_ns();
  in.online_pods.clear();
  uint64_t first = UINT64_MAX;
  const kh_wait_event* longest = nullptr;  // of the waits still going on
  size_t ongoing = 0;
  for (const auto& e : events) {
    FastEvent f;
    f.cgroup_id = e.cgroup_id;
    f.wait_ns = e.wait_ns;
    f.aggressor_ns = e.aggressor_ns;
    f.throttled = e.cause == KH_WAIT_THROTTLED;
    f.ongoing = e.flags & KH_EVENT_ONGOING;
    const Classifier::Entry* a = classifier_->find(e.aggressor_id);
    f.aggressor_offline = a && a->cls == CgroupClass::Offline;
    in.fast_events.push_back(f);
    first = std::min<uint64_t>(first, e.ts_ns);
    if (f.ongoing) {
      ongoing++;
      if (!longest || e.wait_ns > longest->wait_ns) longest = &e;
    }
  }
  if (longest) {
    // One line per scan: a starved task is worth knowing about while it lasts.
    auto name = [this](uint64_t id) {
      auto p = index_->path_of(id);
      return p ? *p : fmt::format("cgroup {}", id);
    };
    std::string held;
    switch (longest->cause) {
      case KH_WAIT_THROTTLED: held = "its cgroup throttled"; break;
      case KH_WAIT_SAME_CGROUP: held = "a task of its own cgroup on the CPU"; break;
      case KH_WAIT_OTHER_CGROUP:
        held = fmt::format("{} on the CPU for {:.1f} ms", name(longest->aggressor_id),
                           static_cast<double>(longest->aggressor_ns) / 1e6);
        break;
      default: held = "who holds the CPU unknown"; break;
    }
    spdlog::info("{} protected wait{} still going on past the threshold; longest: {} waiting {:.1f} ms on CPU {}, {}",
                 ongoing, ongoing == 1 ? "" : "s", name(longest->cgroup_id),
                 static_cast<double>(longest->wait_ns) / 1e6, longest->cpu, held);
  }
  Decision d = controller_step(in, cfg_, state_);
  fast_breaches_ += d.fast_breaches;
  // With cpu.idle alone there is nothing to move between ticks; the ladder
  // decides at the next tick whether to add a rung.
  bool budget_lever = lever(Lever::Cpuset) || lever(Lever::Quota);
  if (d.changed && budget_lever) {
    apply(d, true, first);
    if (yarn_) {  // shrink YARN's view at once too, not at the next tick
      yarn_offer_.now_ns = in.now_ns;
      yarn_offer_.budget_cores = d.budget_cores;
      yarn_->offer(yarn_offer_);
    }
  }
}

void Agent::tick() {
  ticks_++;
  auto sample = collector_->tick();
  if (!sample) {
    spdlog::error("collecting: {}", sample.error().str());
    return;
  }
  if (pods_) {
    if (auto p = pods_->take_if_new()) {
      spdlog::info("pod metadata: {} pods", p->size());
      classifier_->set_pods(std::move(*p));
    }
  }
  NodeSignals node = rollup(*sample, *classifier_);
  if (metrics_) {
    metrics_->update(node, *sample);
    if (ticks_ % 5 == 1) metrics_->update_bpf_cost(bpf_->prog_stats());
  }

  if (cfg_.fast_path.enabled) {
    std::unordered_map<uint64_t, uint64_t> prot;
    for (auto id : node.online_cgroups) prot[id] = cfg_.fast_path.wait_threshold_ns;
    if (auto r = bpf_->sync_protected(prot); !r) spdlog::warn("{}", r.error().str());
  }

  targets_ = targets(node);
  for (auto& t : targets_)
    for (const auto& c : sample->cgroups)
      if (path_at_or_below(c.path, t.path) && sample->interval_ns)
        t.usage_cores += static_cast<double>(c.interval.cpu_ns) / static_cast<double>(sample->interval_ns);

  ControllerInput in;
  in.now_ns = mono_ns();
  in.node_cpus = static_cast<double>(topo_.cpus.size());
  in.online_cpu_cores = node.classes[static_cast<size_t>(CgroupClass::Online)].cpu_cores;
  in.offline_cpu_cores = node.classes[static_cast<size_t>(CgroupClass::Offline)].cpu_cores;
  for (const auto& p : node.pods) {
    if (p.cls != CgroupClass::Online) continue;
    OnlinePodLoad l;
    l.uid = p.uid;
    l.path = p.path;
    l.waits = p.interval.waits;
    l.wait_ns = p.interval.wait_ns;
    l.throttled_wait_ns = p.interval.cause_ns[KH_WAIT_THROTTLED];
    l.offline_wait_ns = p.offline_wait_ns;
    l.wait_p99_us = p.wait_p99_us;
    in.online_pods.push_back(std::move(l));
  }
  // Online work outside pods (configured by path rules) counts as one.
  const auto& on = node.classes[static_cast<size_t>(CgroupClass::Online)];
  uint64_t pod_waits = 0;
  for (const auto& p : in.online_pods) pod_waits += p.waits;
  if (on.interval.waits > pod_waits) {
    OnlinePodLoad l;
    l.uid = "";
    l.path = "(online cgroups outside pods)";
    CgroupCounters rest = on.interval;
    l.waits = on.interval.waits - pod_waits;
    l.wait_ns = rest.wait_ns;
    l.throttled_wait_ns = rest.cause_ns[KH_WAIT_THROTTLED];
    l.offline_wait_ns = on.wait_by_aggressor_class_ns[static_cast<size_t>(CgroupClass::Offline)];
    for (const auto& p : in.online_pods) {
      l.wait_ns -= std::min(l.wait_ns, p.wait_ns);
      l.offline_wait_ns -= std::min(l.offline_wait_ns, p.offline_wait_ns);
      l.throttled_wait_ns -= std::min(l.throttled_wait_ns, p.throttled_wait_ns);
    }
    l.wait_p99_us = on.wait_p99_us;
    in.online_pods.push_back(std::move(l));
  }
  last_input_ = in;

  Decision d = controller_step(in, cfg_, state_);
  for (const auto& v : d.verdicts) {
    if (v.kind == PodVerdictKind::SelfThrottled) {
      auto& last = quota_warned_[v.path];
      if (last == 0 || in.now_ns - last > 60'000'000'000ULL) {
        spdlog::warn("online {}: {} (not acted on)", v.path, v.why);
        last = in.now_ns;
      }
    }
  }
  ladder(d, in);
  if (d.changed || ticks_ == 1) {
    std::vector<std::string> names;
    names.reserve(targets_.size());
    for (const auto& t : targets_) names.push_back(t.path + " (" + target_kind_name(t.kind) + ")");
    spdlog::info("budget {:.2f} cores ({}): {}; online {:.2f} cores, offline {:.2f} cores, targets [{}]",
                 d.budget_cores, action_name(d.action), d.reason, in.online_cpu_cores, in.offline_cpu_cores,
                 fmt::join(names, ", "));
  }
  apply(d, false, 0);
  if (yarn_) {
    YarnOffer o;
    o.now_ns = in.now_ns;
    o.budget_cores = d.budget_cores;
    for (const auto& v : d.verdicts) {  // a breach (not the pod's own quota) far over target
      if (v.kind == PodVerdictKind::Breach &&
          v.wait_p99_us > cfg_.yarn.emergency_p99_factor * cfg_.online.wait_p99_target_us)
        o.emergency = true;
    }
    for (const auto& c : node.yarn) {
      if (c.container.empty()) continue;
      o.containers[c.container] = {c.path, c.online_wait_caused_ns_total};
    }
    yarn_offer_ = o;
    yarn_->offer(std::move(o));
    if (metrics_) metrics_->update_yarn(yarn_->status());
  }
  if (metrics_) metrics_->set_ready();
}

}  // namespace

int run_agent(const CliOptions& o) {
  auto c = effective_config(o);
  if (!c) {
    spdlog::error("{}", c.error().message);
    return 2;
  }
  spdlog::info("effective configuration (node {}):\n{}", node_identity(o).name, config_to_yaml(*c));
  Agent agent(*c, o);
  return agent.run();
}

}  // namespace khagent
