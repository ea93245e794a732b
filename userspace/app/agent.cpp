#include "khagent/app/agent.h"
#include "khagent/app/bootstrap.h"
#include "khagent/app/yarn_downscaler.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "khagent/abi/runq.h"
#include "khagent/actuate/actuator.h"
#include "khagent/collect/cgroupfs.h"
#include "khagent/collect/collector.h"
#include "khagent/collect/kubelet_pods.h"
#include "khagent/collect/topology.h"
#include "khagent/export/metrics.h"
#include "khagent/loader/runq_loader.h"
#include "khagent/policy/controller.h"
#include "khagent/policy/lever_table.h"
#include "khagent/policy/partition.h"
#include "khagent/signals/offline_candidates.h"
#include "khagent/signals/workload.h"
#include "khagent/util/clock.h"
#include "khagent/util/strings.h"

namespace khagent {

volatile std::sig_atomic_t g_stop = 0;

namespace {

class Agent {
 public:
  Agent(Config cfg, const CliOptions& o) : cfg_(std::move(cfg)), opts_(o) {}
  int run();

 private:
  // Start-up in three steps, each returning the exit code of a failure.
  std::optional<int> setup_node();       // mounts, topology, cgroup backend, levers
  std::optional<int> setup_peers();      // /metrics, the kubelet, YARN
  std::optional<int> setup_measuring();  // BPF, collector, state file, actuator
  void loop();                           // until a signal
  int shutdown();                        // restores the originals
  void tick();
  void fast_step();
  std::vector<OfflineTarget> targets(const NodeSignals& node);
  // What the levers need this step (without the cpuset partition).
  LeverInput lever_input(const Decision& d, bool fast);
  std::optional<CpuSet> offline_cpus(const Decision& d, bool fast);
  void ladder(const Decision& d, const ControllerInput& in);
  void apply(const Decision& d, bool fast, uint64_t first_event_ns);
  void log_records(const std::vector<ActionRecord>& recs, const std::string& why);

  Config cfg_;
  CliOptions opts_;
  Mounts mounts_;
  Topology topo_;
  Measuring meas_;  // the BPF programs, their maps and the collector
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
  for (auto step : {&Agent::setup_node, &Agent::setup_peers, &Agent::setup_measuring})
    if (auto rc = (this->*step)()) return *rc;
  if (auto first = meas_.collector->tick(); !first) {
    spdlog::error("{}", first.error().str());
    return 1;
  }
  if (yarn_) yarn_->start();
  loop();
  return shutdown();
}

std::optional<int> Agent::setup_node() {
  if (auto rc = checked_mounts(mounts_)) return rc;
  auto topo = read_topology();
  if (!topo) {
    spdlog::error("reading the CPU topology: {}", topo.error().str());
    return 1;
  }
  topo_ = *topo;
  spdlog::info("node: {} CPUs ({} threads per core), cgroup2 at {}", topo_.cpus.size(), topo_.threads_per_core(),
               mounts_.cgroup2);
  const CgroupRoots roots = roots_of(mounts_);
  auto be = detect_backend(roots);  // pure v1 hosts are refused here
  if (!be) {
    spdlog::error("{}", be.error().str());
    return 2;
  }
  backend_ = *be;
  idle_supported_ = kernel_has_cpu_idle(roots, backend_);
  if (backend_ == CgroupBackend::V2)
    spdlog::info("cgroup backend: {}: measuring and writing in {}", backend_name(backend_), mounts_.cgroup2);
  else
    spdlog::info("cgroup backend: {}: measuring by cgroup2 ids in {}, writing cpu in {} and cpuset in {}",
                 backend_name(backend_), mounts_.cgroup2, mounts_.cpu_v1,
                 mounts_.cpuset_v1.empty() ? "(none)" : mounts_.cpuset_v1);
  spdlog::info("levers: {}", levers_summary(cfg_, idle_supported_));
  return std::nullopt;
}

std::optional<int> Agent::setup_peers() {
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
  return std::nullopt;
}

std::optional<int> Agent::setup_measuring() {
  if (auto rc = start_measuring(mounts_, with_fast_path(opts_.loader, cfg_.fast_path), false, meas_)) return rc;
  if (metrics_) {
    metrics_->set_bpf_attached(true);
    metrics_->set_throttle_source(throttle_source_name(meas_.bpf->throttle_source()));
  }
  if (auto r = meas_.bpf->open_events([this](const kh_wait_event& e) { pending_.push_back(e); }); !r) {
    spdlog::error("{}", r.error().str());
    return 1;
  }
  meas_.collector->set_totals(false);       // decisions and metrics use intervals only
  meas_.collector->set_changes_only(true);  // the classifier remembers idle cgroups
  classifier_ = std::make_unique<Classifier>(cfg_.classes, cfg_.offline.yarn_hierarchy);
  cgfs_ = std::make_unique<RealCgroupFs>(roots_of(mounts_));

  store_ = std::make_unique<StateStore>(cfg_.state_file);
  load_or_set_aside(*store_, cfg_.dry_run);
  actuator_ = std::make_unique<Actuator>(*cgfs_, *store_, cfg_.dry_run, topo_.all());
  if (cfg_.dry_run) spdlog::warn("dry run: actions are logged, nothing is written");
  return std::nullopt;
}

void Agent::loop() {
  uint64_t next_tick = mono_ns() + cfg_.tick_ns;
  while (!g_stop) {
    uint64_t now = mono_ns();
    int timeout_ms = now >= next_tick ? 0 : static_cast<int>((next_tick - now + 999999) / 1000000);
    auto n = meas_.bpf->poll_events(timeout_ms);
    if (!n) spdlog::warn("{}", n.error().str());
    if (g_stop) break;
    if (!pending_.empty()) fast_step();
    now = mono_ns();
    if (now >= next_tick) {
      // Waits still going on: their events arrive with the next poll.
      if (cfg_.fast_path.scan_interval_ns && now - last_scan_ns_ >= cfg_.fast_path.scan_interval_ns) {
        last_scan_ns_ = now;
        if (auto r = meas_.bpf->scan_waits(); !r) spdlog::warn("{}", r.error().str());
      }
      tick();
      next_tick += cfg_.tick_ns;
      if (next_tick < now) next_tick = now + cfg_.tick_ns;  // fell behind: skip, do not burst
    }
  }
}

int Agent::shutdown() {
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
  std::vector<std::string> refused;
  auto c = find_target_candidates(mounts_.cgroup2, cfg_.offline, node.offline_parents, &refused);
  for (const auto& r : refused) {
    uint64_t now = mono_ns();
    if (auto& last = warned_["target " + r]; !last || now - last >= 60'000'000'000ULL) {
      last = now;
      spdlog::error("offline target ignored: {}", r);
    }
  }
  auto out = select_targets(c, cfg_.offline);
  if (out.empty()) {
    uint64_t now = mono_ns();
    if (auto& last = warned_["no targets"]; !last || now - last >= 60'000'000'000ULL) {
      last = now;
      spdlog::warn(
          "no offline cgroup to restrain: no YARN hierarchy /{}, no BestEffort QoS cgroup under kubepods, no "
          "offline.targets that exist; measuring only (`khagent doctor` says more)",
          cfg_.offline.yarn_hierarchy);
    }
  }
  return out;
}

LeverInput Agent::lever_input(const Decision& d, bool fast) {
  LeverInput li;
  li.targets = targets_;
  li.idle_supported = idle_supported_;
  li.cpuset = rung_in_force(Lever::Cpuset, cfg_, ladder_);
  li.quota = rung_in_force(Lever::Quota, cfg_, ladder_);
  li.budget_cores = d.budget_cores;
  li.node_cpus = static_cast<double>(topo_.cpus.size());
  li.budget_only = fast;  // the fast path moves the budget only
  return li;
}

std::optional<CpuSet> Agent::offline_cpus(const Decision& d, bool fast) {
  // The kubelet's exclusive CPUs are read at each tick; the fast path uses
  // what the last tick read. No kubelet CPU manager: none exclusive.
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
  if (!exclusive_cpus_) return std::nullopt;
  PartitionInput pi;
  pi.topo = topo_;
  pi.offline_budget_cores = d.budget_cores;
  pi.online_demand_cores = last_input_.online_cpu_cores + cfg_.budget.reserve_cores;
  pi.reserved = cfg_.cpuset.reserved_cpus;
  pi.exclusive = *exclusive_cpus_;
  Partition p = partition_cpus(pi);
  if (!p.note.empty()) spdlog::debug("cpuset: {}", p.note);
  if (p.offline.empty()) return std::nullopt;
  return p.offline;
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
    std::vector<std::pair<std::string, bool>> act;
    for (auto [l, on] : levers_in_force(lever_input(d, true), cfg_)) act.emplace_back(lever_name(l), on);
    metrics_->record_levers(act);
  }
  if (ld.action == LadderAction::Hold) return;
  bool verdict = ld.action == LadderAction::Kept || ld.action == LadderAction::Undone;
  if (metrics_)
    metrics_->record_ladder_step(ld.lever ? lever_name(*ld.lever) : "", ladder_action_name(ld.action),
                                 ld.before_rate / 1e9, ld.after_rate / 1e9, verdict);
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
  LeverInput li = lever_input(d, fast);
  if (li.cpuset) li.offline_cpus = offline_cpus(d, fast);
  auto plan = actuator_->plan(backend_, offline_writes(li, cfg_));
  auto recs = actuator_->apply_plan(plan, mono_ns());
  if (!fast && !store_->empty()) {
    // Put back what is no longer wanted: a lever released, a target gone.
    auto back = actuator_->restore_outside(plan);
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
      auto p = meas_.index->path_of(id);
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
  bool budget_lever = rung_in_force(Lever::Cpuset, cfg_, ladder_) || rung_in_force(Lever::Quota, cfg_, ladder_);
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
  auto sample = meas_.collector->tick();
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
    if (ticks_ % 5 == 1) metrics_->update_bpf_cost(meas_.bpf->prog_stats());
  }

  if (cfg_.fast_path.enabled) {
    std::unordered_map<uint64_t, uint64_t> prot;
    for (auto id : node.online_cgroups) prot[id] = cfg_.fast_path.wait_threshold_ns;
    if (auto r = meas_.bpf->sync_protected(prot); !r) spdlog::warn("{}", r.error().str());
  }

  targets_ = targets(node);
  for (auto& t : targets_) t.usage_cores = cores_at_or_below(*sample, t.path);

  ControllerInput in;
  in.now_ns = mono_ns();
  in.node_cpus = static_cast<double>(topo_.cpus.size());
  in.online_cpu_cores = node.classes[static_cast<size_t>(CgroupClass::Online)].cpu_cores;
  in.offline_cpu_cores = node.classes[static_cast<size_t>(CgroupClass::Offline)].cpu_cores;
  in.online_pods = online_loads(node);
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
  spdlog::info("configuration: {} (node {}); `khagent config check` prints it in full, as does --log-level debug",
               o.config_path.empty() ? "the built-in defaults" : o.config_path, node_identity(o).name);
  spdlog::debug("effective configuration:\n{}", config_to_yaml(*c));
  Agent agent(*c, o);
  return agent.run();
}

}  // namespace khagent
