#include "khagent/app/agent.h"
#include "khagent/app/bootstrap.h"
#include "khagent/app/peers.h"

#include <unordered_map>

#include <spdlog/spdlog.h>

#include "khagent/actuate/actuator.h"
#include "khagent/actuate/oom_order.h"
#include "khagent/app/wakeups.h"
#include "khagent/export/agent_log.h"
#include "khagent/export/controller_reports.h"
#include "khagent/policy/capacity.h"
#include "khagent/policy/controllers.h"
#include "khagent/policy/lever_table.h"
#include "khagent/util/clock.h"
#include "khagent/util/log_limit.h"

namespace khagent {

volatile std::sig_atomic_t g_stop = 0;

namespace {

// The loop: one snapshot per tick, every controller over it, one plan
// applied, their reports exported; between ticks, wake-ups handed to the
// controllers the same way. It knows no controller by name.
class Agent {
 public:
  Agent(Config cfg, const CliOptions& o) : cfg_(std::move(cfg)), opts_(o) {}
  int run();

 private:
  // Start-up in three steps, each returning the exit code of a failure.
  std::optional<int> setup_node();       // mounts, topology, cgroup backend, what the controllers may use
  std::optional<int> setup_peers();      // /metrics, the kubelet, YARN
  std::optional<int> setup_measuring();  // BPF, collector, state file, actuator, controllers
  void loop();                           // until a signal
  int shutdown();                        // restores the originals
  void tick();
  void wakeup(const Wakeup& w, uint64_t first_event_ns);
  std::vector<OfflineTarget> targets(const NodeSignals& node, const Sample& sample);
  TickView view(const TickSnapshot& snap, uint64_t now_ns) const;
  // Applies the outcomes' settings as one plan (`complete`: a tick's, so
  // what no controller wants any more is put back), logs and exports.
  // `woke_ns`: when a wake-up woke the loop (0: a tick); `first_event_ns`: its first over-threshold wait, if any.
  void apply(std::vector<std::pair<const Controller*, Outcome>>& outs, uint64_t woke_ns, uint64_t first_event_ns);

  Config cfg_;
  CliOptions opts_;
  Mounts mounts_;
  NodeFacts facts_;
  CgroupBackend backend_ = CgroupBackend::V2;
  Measuring meas_;  // the BPF programs, their maps and the collector
  std::unique_ptr<Classifier> classifier_;
  std::unique_ptr<RealCgroupFs> cgfs_;
  std::unique_ptr<NodeReads> reads_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<Actuator> actuator_;
  std::unique_ptr<OomOrder> oom_;  // offline processes first in the OOM killer's order
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<KubeletPodsWatcher> pods_;
  std::unique_ptr<YarnDownscaler> yarn_;
  std::unique_ptr<BatchPublisher> batch_;
  std::unique_ptr<CapacityPlanner> capacity_;  // with batch_: the split and what to publish
  std::unique_ptr<Wakeups> wakeups_;
  std::unique_ptr<ReportExporter> exporter_;
  std::vector<std::unique_ptr<Controller>> controllers_;
  YarnOffer offer_;   // the last one, updated by wake-ups between ticks
  NodeSignals node_;  // the last tick's, with its targets and online pods
  std::vector<OfflineTarget> targets_;
  std::vector<std::string> online_;
  std::vector<kh_wait_event> pending_;
  uint64_t last_scan_ns_ = 0;  // mono_ns of the last scan for waits still going on
  LogLimiter warned_;          // a problem that lasts is logged once a minute
  uint64_t ticks_ = 0;
  ReactionTimes reactions_;
};

int Agent::run() {
  const uint64_t started = mono_ns();
  for (auto step : {&Agent::setup_node, &Agent::setup_peers, &Agent::setup_measuring})
    if (auto rc = (this->*step)()) return *rc;
  if (auto first = meas_.collector->tick(); !first) {
    spdlog::error("{}", first.error().str());
    return 1;
  }
  if (yarn_) yarn_->start();
  if (batch_) batch_->start();
  std::string names;
  for (const auto& c : controllers_) names += std::string(names.empty() ? "" : ", ") + c->name();
  spdlog::info("running: set up in {:.1f} s; a tick every {} ms; controllers: {}",
               static_cast<double>(mono_ns() - started) / 1e9, cfg_.tick_ns / 1'000'000, names);
  loop();
  return shutdown();
}

std::optional<int> Agent::setup_node() {
  if (auto rc = checked_mounts(mounts_)) return rc;
  NodeSetup node;
  if (auto rc = khagent::setup_node(mounts_, cfg_.memory.enabled, cfg_.io.enabled && cfg_.io.limit, node)) return rc;
  facts_.topo = std::move(node.topo);
  facts_.idle_supported = node.idle_supported;
  backend_ = node.backend;
  facts_.memory = cfg_.memory.enabled = node.memory;
  facts_.memory_v2 = node.memory_v2;
  facts_.io = node.io;
  spdlog::info("levers: {}{}", levers_summary(cfg_, facts_.idle_supported, facts_.memory_v2),
               facts_.io ? "; io.max on the offline cgroup an online pod's IO stall names" : "");
  return std::nullopt;
}

std::optional<int> Agent::setup_peers() {
  Peers p;
  if (auto rc = start_peers(cfg_, opts_, mounts_, p)) return rc;
  metrics_ = std::move(p.metrics);
  pods_ = std::move(p.pods);
  yarn_ = std::move(p.yarn);
  batch_ = std::move(p.batch);
  if (batch_) capacity_ = std::make_unique<CapacityPlanner>(cfg_.capacity, yarn_ != nullptr);
  facts_.yarn_last_resort = yarn_ && cfg_.yarn.reclaim && cfg_.yarn.memory_emergency;
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
  const CgroupRoots roots = roots_of(mounts_);
  cgfs_ = std::make_unique<RealCgroupFs>(roots);
  reads_ = real_node_reads(node_read_roots(roots, backend_, facts_.memory, cfg_.cpuset.cpu_manager_state));
  wakeups_ = std::make_unique<Wakeups>(*meas_.bpf, facts_.memory ? psi_triggers(cfg_.memory, roots) : nullptr);
  if (facts_.memory && cfg_.memory.oom_order && !cfg_.dry_run) oom_ = std::make_unique<OomOrder>(roots.unified);

  store_ = std::make_unique<StateStore>(cfg_.state_file);
  load_or_set_aside(*store_, cfg_.dry_run);
  actuator_ = std::make_unique<Actuator>(*cgfs_, *store_, cfg_.dry_run, facts_.topo.all());
  if (cfg_.dry_run) spdlog::warn("dry run: actions are logged, nothing is written");
  controllers_ = make_controllers(cfg_, facts_);
  exporter_ = std::make_unique<ReportExporter>(cfg_, metrics_.get());
  return std::nullopt;
}

void Agent::loop() {
  uint64_t next_tick = mono_ns() + cfg_.tick_ns;
  while (!g_stop) {
    uint64_t now = mono_ns();
    int timeout_ms = now >= next_tick ? 0 : static_cast<int>((next_tick - now + 999999) / 1000000);
    auto woken = wakeups_->wait(timeout_ms);
    for (const auto& p : woken.problems)
      if (warned_.allow(p, mono_ns())) spdlog::warn("{}", p);
    if (g_stop) break;
    if (!woken.memory_stalled.empty()) {
      exporter_->wakeup(woken.memory_stalled.size());
      wakeup({mono_ns(), {}, std::move(woken.memory_stalled)}, 0);
    }
    if (!pending_.empty()) {
      std::vector<kh_wait_event> events;
      events.swap(pending_);
      FastBatch batch = fast_batch(events, *classifier_);
      if (batch.longest)  // one line per scan: a starved task is worth knowing about while it lasts
        log_ongoing_waits(*batch.longest, batch.ongoing, *meas_.index);
      wakeup({mono_ns(), std::move(batch.events), {}}, batch.first_ts_ns);
    }
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
  const size_t failed = log_restore(actuator_->restore(), false);
  if (oom_) log_oom_restored(oom_->restore());
  // After the cgroups (local and fast): give YARN the node's configured
  // resources back; this may wait on the ResourceManager.
  if (yarn_) yarn_->stop(true);
  if (batch_) batch_->stop();
  if (reactions_.count) spdlog::info("{}", reactions_.summary());
  spdlog::info("stopped after {} ticks{}", ticks_, failed ? "; some originals could not be restored" : "");
  return failed ? 1 : 0;
}

std::vector<OfflineTarget> Agent::targets(const NodeSignals& node, const Sample& sample) {
  std::vector<std::string> refused;
  auto out = tick_targets(mounts_.cgroup2, cfg_.offline, node.offline_parents, sample, refused);
  for (const auto& r : refused)
    if (warned_.allow("target " + r, mono_ns())) spdlog::error("offline target ignored: {}", r);
  if (out.empty() && warned_.allow("no targets", mono_ns()))
    spdlog::warn(
        "no offline cgroup to restrain: no YARN hierarchy /{}, no BestEffort QoS cgroup under kubepods, no "
        "offline.targets that exist; measuring only (`khagent doctor` says more)",
        cfg_.offline.yarn_hierarchy);
  return out;
}

TickView Agent::view(const TickSnapshot& snap, uint64_t now_ns) const {
  auto ours = [this](const std::string& cgroup, Knob k) { return store_->has(cgroup, file_for(backend_, k)); };
  return {snap, node_, targets_, online_, ours, now_ns};
}

void Agent::wakeup(const Wakeup& w, uint64_t first_event_ns) {
  if (ticks_ == 0) return;  // nothing to compare with yet
  const TickSnapshot snap(*reads_, w.now_ns);
  const TickView v = view(snap, w.now_ns);
  std::vector<std::pair<const Controller*, Outcome>> outs;
  for (auto& c : controllers_)
    if (auto o = c->on_wakeup(w, v)) outs.emplace_back(c.get(), std::move(*o));
  if (!outs.empty()) apply(outs, w.now_ns, first_event_ns);
}

void Agent::apply(std::vector<std::pair<const Controller*, Outcome>>& outs, uint64_t woke_ns, uint64_t first_event_ns) {
  const bool complete = woke_ns == 0;
  const uint64_t t0 = complete ? mono_ns() : woke_ns;
  std::vector<Setting> want;
  for (auto& [c, o] : outs) {
    exporter_->report(o.report, t0);
    want.insert(want.end(), o.settings.begin(), o.settings.end());
    merge_offer(offer_, o.offer);
  }
  auto plan = actuator_->plan(backend_, want);
  auto recs = actuator_->apply_plan(plan, mono_ns());
  if (complete && !store_->empty()) {
    // Put back what is no longer wanted: a lever released, a target gone.
    auto back = actuator_->restore_outside(plan);
    log_actions(back, "no longer wanted (lever released, or no longer a target)", warned_, mono_ns());
    recs.insert(recs.end(), back.begin(), back.end());
  }
  if (metrics_) metrics_->record_actions(recs);
  const std::string reaction = complete ? "" : reactions_.note(recs, first_event_ns, t0, mono_ns(), metrics_.get());
  for (auto& [c, o] : outs) {  // each controller's writes with its reason
    log_actions(recs, c->levers(), o.why + reaction, warned_, mono_ns());
    if (oom_ && complete && !o.oom_first.empty()) log_oom_raised(oom_->raise(o.oom_first, 1000));
  }
  offer_.now_ns = t0;
  if (capacity_) {  // batch's part goes to Kubernetes, the rest to YARN
    CapacityPlan cp = capacity_->plan(offer_, side_use(node_), t0);
    batch_->want(cp.publish.value, cp.explanation, t0);
    if (metrics_) metrics_->update_capacity(cp);
    if (yarn_) yarn_->offer(std::move(cp.yarn));
  } else if (yarn_) {
    yarn_->offer(offer_);
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
  node_ = rollup(*sample, *classifier_);
  if (metrics_) {
    metrics_->update(node_, *sample);
    if (ticks_ % 5 == 1) metrics_->update_bpf_cost(meas_.bpf->prog_stats());
  }
  if (cfg_.fast_path.enabled) {
    std::unordered_map<uint64_t, uint64_t> prot;
    for (auto id : node_.online_cgroups) prot[id] = cfg_.fast_path.wait_threshold_ns;
    if (auto r = meas_.bpf->sync_protected(prot); !r) spdlog::warn("{}", r.error().str());
  }
  targets_ = targets(node_, *sample);
  online_.clear();
  for (const auto& p : node_.pods)
    if (p.cls == CgroupClass::Online) online_.push_back(p.path);
  wakeups_->sync(online_, warned_);
  const uint64_t now = mono_ns();
  const TickSnapshot snap(*reads_, now);
  const TickView v = view(snap, now);
  std::vector<std::pair<const Controller*, Outcome>> outs;
  outs.reserve(controllers_.size());
  for (auto& c : controllers_) outs.emplace_back(c.get(), c->step(v));
  apply(outs, 0, 0);
  if (yarn_ && metrics_) metrics_->update_yarn(yarn_->status());
  if (batch_) {
    const CapacityStatus cs = batch_->status();
    if (metrics_) metrics_->update_capacity(cs);
    exporter_->capacity(cs, mono_ns());
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
