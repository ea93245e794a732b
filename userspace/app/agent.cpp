#include "khagent/app/agent.h"
#include "khagent/app/bootstrap.h"
#include "khagent/app/peers.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "khagent/abi/runq.h"
#include "khagent/actuate/actuator.h"
#include "khagent/actuate/oom_order.h"
#include "khagent/collect/cgroupfs.h"
#include "khagent/collect/collector.h"
#include "khagent/collect/kubelet_pods.h"
#include "khagent/collect/topology.h"
#include "khagent/export/agent_log.h"
#include "khagent/export/metrics.h"
#include "khagent/loader/runq_loader.h"
#include "khagent/policy/controller.h"
#include "khagent/policy/ladder.h"
#include "khagent/policy/lever_table.h"
#include "khagent/policy/memory.h"
#include "khagent/policy/partition.h"
#include "khagent/signals/offline_candidates.h"
#include "khagent/signals/offline_memory.h"
#include "khagent/signals/workload.h"
#include "khagent/util/bytes.h"
#include "khagent/util/clock.h"
#include "khagent/util/log_limit.h"
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
  // The memory budget into levers_ (`triggers`: the online cgroups whose
  // PSI triggers fired, between ticks); whether it changed.
  bool memory_step(uint64_t now_ns, const std::vector<std::string>& triggers = {});
  // The online pods that get CPU burst (levers_.online), from the verdicts.
  void burst_step(const Decision& d, uint64_t now_ns);
  void wait(int timeout_ms);                                   // for wait events, PSI triggers or the timeout
  void memory_event(const std::vector<std::string>& stalled);  // PSI triggers fired: the memory lever only
  void fast_step();
  std::vector<OfflineTarget> targets(const NodeSignals& node);
  // What the levers need this step (without the cpuset partition), in levers_.
  LeverInput& lever_input(const Decision& d, bool fast);
  std::optional<CpuSet> offline_cpus(const Decision& d, bool fast);
  void ladder(const Decision& d, const ControllerInput& in);
  void apply(const Decision& d, bool fast, uint64_t first_event_ns);

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
  LeverInput levers_;  // its targets are the last tick's
  CgroupBackend backend_ = CgroupBackend::V2;
  bool idle_supported_ = true;
  LadderState ladder_;
  std::unique_ptr<MemoryReader> memory_;  // none: the memory lever is off or has nothing to write
  MemoryState memory_state_;
  std::unique_ptr<MemoryStallMeter> stall_;        // online pods' memory.pressure
  MemoryEventMeter memory_events_;                 // OOM kills and refaults
  std::unique_ptr<PsiTriggers> psi_;               // on the same files: wakes the loop between ticks
  std::vector<std::string> online_;                // the last tick's online pods
  ReclaimCounters online_reclaim_;                 // the direct reclaim they paid in the last tick
  uint64_t online_reclaim_interval_ns_ = 0;        // that tick's interval
  std::map<std::string, std::string> burst_pods_;  // online pods given CPU burst, and why
  bool psi_noted_ = false;                         // psi_->note() logged
  std::string memory_why_;                         // the last memory budget change, for its writes' log lines
  std::string memory_critical_;                    // why the node's memory is critical; "" not
  std::map<std::string, uint64_t> memory_last_;    // each offline parent's last working set read
  std::unique_ptr<OomOrder> oom_;                  // offline processes first in the OOM killer's order
  uint64_t fast_breaches_ = 0;                     // since the last tick
  std::vector<kh_wait_event> pending_;
  uint64_t last_scan_ns_ = 0;             // mono_ns of the last scan for waits still going on
  LogLimiter warned_;                     // a problem that lasts is logged once a minute
  std::optional<CpuSet> exclusive_cpus_;  // from the tick's cpu_manager_state read
  uint64_t ticks_ = 0;
  ReactionTimes reactions_;
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
  NodeSetup node;
  if (auto rc = khagent::setup_node(mounts_, node)) return rc;
  topo_ = std::move(node.topo);
  backend_ = node.backend;
  idle_supported_ = node.idle_supported;
  if (cfg_.memory.enabled) {
    const CgroupRoots roots = roots_of(mounts_);
    if (auto ok = memory_controller_for(backend_, roots); !ok) {
      spdlog::warn("memory lever off: {}", ok.error().message);
      cfg_.memory.enabled = false;
    } else {
      const bool v1 = backend_ == CgroupBackend::V1Hybrid;
      memory_ = std::make_unique<MemoryReader>(v1 ? roots.memory_v1 : roots.unified, v1);
      stall_ = std::make_unique<MemoryStallMeter>(roots.unified);
      if (cfg_.memory.stall_window_ns) {
        const uint64_t window_us = cfg_.memory.stall_window_ns / 1000;
        psi_ = std::make_unique<PsiTriggers>(
            roots.unified, static_cast<uint64_t>(static_cast<double>(window_us) * cfg_.memory.stall_limit), window_us);
      }
      if (cfg_.memory.oom_order && !cfg_.dry_run) oom_ = std::make_unique<OomOrder>(roots.unified);
    }
  }
  spdlog::info("levers: {}", levers_summary(cfg_, idle_supported_));
  return std::nullopt;
}

std::optional<int> Agent::setup_peers() {
  Peers p;
  if (auto rc = start_peers(cfg_, opts_, mounts_, p)) return rc;
  metrics_ = std::move(p.metrics);
  pods_ = std::move(p.pods);
  yarn_ = std::move(p.yarn);
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
    wait(timeout_ms);
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

void Agent::wait(int timeout_ms) {
  if (!psi_ || psi_->size() == 0) {
    if (auto n = meas_.bpf->poll_events(timeout_ms); !n) spdlog::warn("{}", n.error().str());
    return;
  }
  std::vector<pollfd> fds{{meas_.bpf->events_fd(), POLLIN, 0}};
  psi_->add_to(fds);
  if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
    if (errno != EINTR && warned_.allow("poll", mono_ns())) spdlog::warn("waiting for events: {}", strerror(errno));
    return;
  }
  if (fds[0].revents)
    if (auto n = meas_.bpf->drain_events(); !n) spdlog::warn("{}", n.error().str());
  std::vector<std::string> fired;
  for (size_t i = 1; i < fds.size(); i++) {
    const std::string* p = fds[i].revents ? psi_->path_of(fds[i].fd) : nullptr;
    if (!p) continue;
    if (fds[i].revents & (POLLERR | POLLNVAL)) {  // the cgroup is gone
      psi_->drop(std::string(*p));
      continue;
    }
    if (fds[i].revents & POLLPRI) fired.push_back(*p);
  }
  if (!fired.empty()) memory_event(fired);
}

void Agent::memory_event(const std::vector<std::string>& stalled) {
  const uint64_t t0 = mono_ns();
  if (metrics_) metrics_->record_psi_triggers(stalled.size());
  if (ticks_ == 0) return;  // no targets yet
  // Only the stall cut is made between ticks: a budget that would grow (or
  // move for another reason) waits for the tick, as if nothing happened.
  const MemoryState before = memory_state_;
  const std::optional<uint64_t> budget_before = levers_.memory_budget;
  if (!memory_step(t0, stalled) || !memory_state_.last_cut_ns || memory_state_.last_cut_ns != t0) {
    memory_state_ = before;
    levers_.memory_budget = budget_before;
    spdlog::debug("PSI trigger fired on {}: no cut (node not short, or cut less than a second ago)", stalled.front());
    return;
  }
  LeverInput li = levers_;
  li.budget_only = false;  // (a fast step may have left it set) the memory lever does not carry the CPU budget
  auto want = lever_writes(li, cfg_);
  std::erase_if(want, [](const Setting& s) { return !std::holds_alternative<MemoryLimit>(s.value); });
  auto recs = actuator_->apply_plan(actuator_->plan(backend_, want), mono_ns());
  if (metrics_) metrics_->record_actions(recs);
  log_actions(recs,
              fmt::format("{}; {:.1f} ms after the trigger woke the agent", memory_why_,
                          static_cast<double>(mono_ns() - t0) / 1e6),
              warned_, mono_ns());
  if (yarn_) {  // YARN's memory follows at once too
    yarn_offer_.now_ns = t0;
    yarn_offer_.memory_budget_bytes = levers_.memory_budget;
    yarn_offer_.memory_emergency = memory_critical_;
    yarn_->offer(yarn_offer_);
  }
}

int Agent::shutdown() {
  if (pods_) pods_->stop();
  const char* sig = g_stop > 0 ? sigabbrev_np(static_cast<int>(g_stop)) : nullptr;
  spdlog::info("stopping on SIG{}: restoring original values", sig ? sig : "?");
  const size_t failed = log_restore(actuator_->restore(), false);
  if (oom_) {
    auto back = oom_->restore();
    if (!back.empty())
      spdlog::info("restore oom_score_adj of {} offline processes (e.g. pid {}: {} -> {})", back.size(),
                   back.front().pid, back.front().from, back.front().to);
  }
  // After the cgroups (local and fast): give YARN the node's configured
  // resources back; this may wait on the ResourceManager.
  if (yarn_) yarn_->stop(true);
  if (reactions_.count) spdlog::info("{}", reactions_.summary());
  spdlog::info("stopped after {} ticks{}", ticks_, failed ? "; some originals could not be restored" : "");
  return failed ? 1 : 0;
}

std::vector<OfflineTarget> Agent::targets(const NodeSignals& node) {
  std::vector<std::string> refused;
  auto c = find_target_candidates(mounts_.cgroup2, cfg_.offline, node.offline_parents, &refused);
  for (const auto& r : refused)
    if (warned_.allow("target " + r, mono_ns())) spdlog::error("offline target ignored: {}", r);
  auto out = select_targets(c, cfg_.offline);
  if (out.empty() && warned_.allow("no targets", mono_ns()))
    spdlog::warn(
        "no offline cgroup to restrain: no YARN hierarchy /{}, no BestEffort QoS cgroup under kubepods, no "
        "offline.targets that exist; measuring only (`khagent doctor` says more)",
        cfg_.offline.yarn_hierarchy);
  return out;
}

LeverInput& Agent::lever_input(const Decision& d, bool fast) {
  LeverInput& li = levers_;
  li.offline_cpus.reset();
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
    if (auto cms = read_cpu_manager_state(cfg_.cpuset.cpu_manager_state)) exclusive_cpus_ = cms->exclusive;
    else if (warned_.allow("cpuset partition", mono_ns()))  // a lasting problem: once a minute, not every tick
      spdlog::warn("cpuset partition skipped: {}", cms.error().str());
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
  LadderInput li = ladder_input(d, in, fast_breaches_, cfg_.tick_ns, cfg_.cpuset.enabled || topo_.cpus.size() >= 2);
  fast_breaches_ = 0;
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

void Agent::apply(const Decision& d, bool fast, uint64_t first_event_ns) {
  LeverInput& li = lever_input(d, fast);
  if (li.cpuset) li.offline_cpus = offline_cpus(d, fast);
  auto plan = actuator_->plan(backend_, lever_writes(li, cfg_));
  auto recs = actuator_->apply_plan(plan, mono_ns());
  if (!fast && !store_->empty()) {
    // Put back what is no longer wanted: a lever released, a target gone.
    auto back = actuator_->restore_outside(plan);
    log_actions(back, "no longer wanted (lever released, or no longer a target)", warned_, mono_ns());
    recs.insert(recs.end(), back.begin(), back.end());
  }
  if (metrics_) {
    metrics_->record_decision(d);
    metrics_->record_actions(recs);
  }
  std::string why = fmt::format("{}: {}", action_name(d.action), d.reason);
  if (first_event_ns && budget_written(recs)) {
    double ms = static_cast<double>(mono_ns() - first_event_ns) / 1e6;
    if (metrics_) metrics_->record_reaction(ms / 1e3);
    reactions_.add(ms);
    why += fmt::format("; reaction {:.2f} ms from the first over-threshold wait", ms);
  }
  // Memory writes follow the memory budget, bursts the online pods'
  // verdicts, not the CPU decision.
  auto take = [&recs](std::initializer_list<CgroupFile> files) {
    auto it = std::stable_partition(recs.begin(), recs.end(), [&](const ActionRecord& r) {
      return std::find(files.begin(), files.end(), r.file) == files.end();
    });
    std::vector<ActionRecord> out(std::make_move_iterator(it), std::make_move_iterator(recs.end()));
    recs.erase(it, recs.end());
    return out;
  };
  auto memory_recs = take({CgroupFile::MemoryHigh, CgroupFile::V1MemoryLimit});
  auto burst_recs = take({CgroupFile::CpuMaxBurst, CgroupFile::V1CpuCfsBurst});
  log_actions(recs, why, warned_, mono_ns());
  log_actions(memory_recs, memory_why_, warned_, mono_ns());
  // A burst someone else changed is theirs from then on: not written again,
  // and not restored over their value.
  for (const auto& r : burst_recs)
    if (r.outcome == ActionOutcome::Reverted) {
      store_->forget(r.cgroup, r.file);
      if (auto s = store_->save(); !s) spdlog::warn("saving the state file: {}", s.error().str());
    }
  log_actions(burst_recs,
              fmt::format("CPU burst {:.0f}% of the quota: an online pod's waits were its own throttling",
                          cfg_.online.burst_share * 100),
              warned_, mono_ns());
  if (oom_ && !fast) {
    // The kubelet already puts BestEffort pods at 1000; YARN containers and
    // configured targets are raised here, each new process once.
    std::vector<std::string> parents;
    for (const auto& t : li.targets)
      if (t.kind == TargetKind::YarnRoot || t.kind == TargetKind::Configured) parents.push_back(t.path);
    auto raised = oom_->raise(parents, 1000);
    if (!raised.empty())
      spdlog::info(
          "oom_score_adj 1000 on {} offline process{} (e.g. pid {} in {}: {} -> 1000): the OOM killer takes "
          "offline before online",
          raised.size(), raised.size() == 1 ? "" : "es", raised.front().pid, raised.front().cgroup,
          raised.front().from);
  }
}

bool Agent::memory_step(uint64_t now_ns, const std::vector<std::string>& triggers) {
  levers_.memory_budget.reset();
  if (!memory_) return false;
  std::vector<std::string> parents;  // BestEffort pods are counted in their QoS cgroup
  for (const auto& t : levers_.targets)
    if (t.kind != TargetKind::BestEffortPod) parents.push_back(t.path);
  MemorySignals ms = offline_memory(*memory_, cfg_.memory.node_cgroup, parents, now_ns);
  // A parent that could not be read this tick keeps its last reading (and
  // its limit): a failed read must not lift a limit.
  std::map<std::string, uint64_t> last;
  last.swap(memory_last_);
  for (auto& t : levers_.targets) {
    std::optional<uint64_t> v;
    if (auto a = ms.used.find(t.path); a != ms.used.end()) v = a->second;
    else if (auto b = last.find(t.path); b != last.end()) v = b->second;
    t.memory_known = v.has_value();
    t.memory_used = v.value_or(0);
    if (v) memory_last_[t.path] = *v;
  }
  for (const auto& p : ms.problems)
    if (warned_.allow(p.substr(0, p.find(':')), now_ns)) spdlog::warn("{}", p);
  std::vector<std::string> stalled = triggers;  // online pods whose stall may cut offline
  std::vector<double> stall_shares;             // at a tick: their shares of it
  if (triggers.empty()) {                       // the tick reads the stall and the events; a trigger says it
    MemoryEvents ev = memory_events_.step(*memory_, online_, parents);
    for (const auto& [p, n] : ev.online_killed)
      spdlog::error(
          "online {}: {} process{} taken by the kernel's OOM killer since the last tick (offline working set {}, "
          "budget {})",
          p, n, n == 1 ? "" : "es", mib_text(ms.input.offline_used), mib_text(memory_state_.budget));
    if (ev.offline_oom_kills)
      spdlog::info("offline: {} OOM kill{} inside the offline parents since the last tick", ev.offline_oom_kills,
                   ev.offline_oom_kills == 1 ? "" : "s");
    if (metrics_) metrics_->record_memory_events(ev);
    MemoryStall stall = stall_->step(online_, now_ns);
    ms.input.online_stall_share = stall.max_share;
    for (const auto& [path, share] : stall.shares)  // the most stalled first
      if (share > cfg_.memory.stall_limit) {
        stalled.push_back(path);
        stall_shares.push_back(share);
      }
    if (metrics_) metrics_->record_memory_stall(stall);
    if (!online_.empty() && stall.unreadable == online_.size() && warned_.allow("psi", now_ns))
      spdlog::warn(
          "no online pod's memory.pressure is readable (a kernel without PSI, or psi=0): the cut on an online "
          "memory stall is off");
    if (psi_) {
      for (const auto& p : psi_->sync(online_))
        if (warned_.allow("psi trigger", now_ns))
          spdlog::warn("{} (the tick's reading still cuts on a stall, up to a tick later)", p);
      if (psi_->size() && !psi_noted_)
        spdlog::info("PSI triggers \"{}\" on {} online pod{}{}", psi_->spec(), psi_->size(),
                     psi_->size() == 1 ? "" : "s", psi_->note().empty() ? "" : ": " + psi_->note());
      psi_noted_ = psi_noted_ || psi_->size();
    }
  }
  ms.input.stall_trigger = triggers.empty() ? std::string() : triggers.front();
  // In a node cgroup full of page cache, a stall is the node's only for a
  // pod with room under its own limits (and those above it): the first
  // such pod, the most stalled at a tick, is the one named (its share the
  // tick's). Unreadable counts as at its limit.
  for (size_t i = 0; ms.input.node_usage && i < stalled.size(); i++) {
    auto own = memory_->at_own_limit(stalled[i], cfg_.memory.node_cgroup);
    const std::string why = own ? *own : "unknown (" + own.error().str() + ")";
    if (i == 0) ms.input.stall_own_limit = why;  // all at their limits: the first is the one logged
    if (why.empty()) {
      ms.input.stall_own_limit.clear();
      if (!triggers.empty()) ms.input.stall_trigger = stalled[i];
      else ms.input.online_stall_share = stall_shares.at(i);
      break;
    }
  }
  ms.input.online_node_reclaim_ns = online_reclaim_.ns[KH_RECLAIM_NODE];
  ms.input.online_memcg_reclaim_ns = online_reclaim_.ns[KH_RECLAIM_MEMCG];
  ms.input.interval_ns = online_reclaim_interval_ns_;
  if (ms.input.capacity == 0) {  // the node's memory is unknown: the last budget stays
    if (memory_state_.initialized) levers_.memory_budget = memory_state_.budget;
    memory_critical_.clear();
    return false;
  }
  MemoryDecision d = khagent::memory_step(ms.input, cfg_.memory, memory_state_);
  if (spdlog::should_log(spdlog::level::debug))  // its strings are built each tick otherwise
    spdlog::debug(
        "memory: capacity {}, in use {} (working sets {}), offline {} (working set {}); stall {:.0f}%{}{} -> budget "
        "{}{}",
        mib_text(ms.input.capacity), mib_text(ms.input.node_usage), mib_text(ms.input.node_used),
        mib_text(ms.input.offline_usage), mib_text(ms.input.offline_used), ms.input.online_stall_share * 100,
        ms.input.stall_trigger.empty() ? "" : ", trigger on " + ms.input.stall_trigger,
        ms.input.stall_own_limit.empty() ? "" : ", at its own limit: " + ms.input.stall_own_limit, mib_text(d.budget),
        d.stalled ? " (stall cut)" : "");
  if (!d.critical.empty() && memory_critical_.empty())
    spdlog::warn("node memory critical: {}; {}", d.critical,
                 yarn_ && cfg_.yarn.reclaim && cfg_.yarn.memory_emergency
                     ? "the highest-ranked YARN container that holds memory goes at once (yarn.memory_emergency)"
                     : "no YARN last resort (no YARN, or yarn.reclaim / yarn.memory_emergency off)");
  else if (d.critical.empty() && !memory_critical_.empty()) spdlog::info("node memory no longer critical");
  memory_critical_ = d.critical;
  if (d.changed) {
    memory_why_ = fmt::format("memory budget {}: {}", mib_text(d.budget), d.reason);
    spdlog::info("{} for offline: {}", memory_why_.substr(0, memory_why_.find(':')), d.reason);
  }
  levers_.memory_budget = d.budget;
  if (metrics_) metrics_->record_memory(ms.input, d);
  return d.changed;
}

void Agent::burst_step(const Decision& d, uint64_t now_ns) {
  levers_.online.clear();
  const bool on = cfg_.online.burst_share > 0;
  for (const auto& v : d.verdicts) {
    if (v.kind != PodVerdictKind::SelfThrottled) continue;
    // Online cgroups outside pods are summed under one name: not a cgroup.
    const bool pod = std::find(online_.begin(), online_.end(), v.path) != online_.end();
    if (!on || !pod) {
      if (warned_.allow("quota " + v.path, now_ns))
        spdlog::warn("online {}: {} (not acted on: {})", v.path, v.why,
                     on ? "not a pod's cgroup" : "online.burst_share is 0");
    } else if (burst_pods_.emplace(v.path, v.why).second) {
      spdlog::info("online {}: {}; CPU burst of {:.0f}% of its quota on the pod and its containers", v.path, v.why,
                   cfg_.online.burst_share * 100);
    } else if (warned_.allow("quota " + v.path, now_ns)) {
      spdlog::warn(
          "online {}: {} with its CPU burst in place (a burst lends only what earlier periods left unused: a "
          "pod busy at its limit needs a larger limit)",
          v.path, v.why);
    }
  }
  // A pod keeps its burst while it lives (a burst costs nothing while unused);
  // one no longer online is forgotten, its originals restored by apply().
  std::erase_if(burst_pods_,
                [&](const auto& kv) { return std::find(online_.begin(), online_.end(), kv.first) == online_.end(); });
  if (!on) return;
  if (metrics_) metrics_->record_burst(burst_pods_.size(), 0);
  for (const auto& [pod, _] : burst_pods_) {
    // The kubelet puts the pod's limit on the pod and each container's on
    // the container: either can throttle, so each gets its burst.
    std::vector<std::string> cgroups{pod};
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(mounts_.cgroup2 + pod, ec))
      if (e.is_directory(ec)) cgroups.push_back(pod + "/" + e.path().filename().string());
    for (const auto& cg : cgroups) {
      OfflineTarget t;
      t.path = cg;
      t.kind = TargetKind::OnlinePod;
      t.quota = read_cpu_quota(mounts_.cgroup2, mounts_.cpu_v1, cg);
      if (!t.quota || !t.quota->quota_us) continue;  // no quota: nothing throttles it
      // A burst khagent did not write is someone else's: left alone.
      if (!store_->has(cg, file_for(backend_, Knob::Burst))) {
        auto cur = read_cpu_burst(mounts_.cgroup2, mounts_.cpu_v1, cg);
        if (!cur) {
          if (warned_.allow("no burst", now_ns))
            spdlog::warn("CPU burst: {} has no burst file (kernels before 5.14): no burst for it", cg);
          continue;
        }
        if (*cur != 0) {
          if (warned_.allow("foreign burst " + cg, now_ns))
            spdlog::info("CPU burst: {} already has a burst of {} us that khagent did not write: left alone", cg, *cur);
          continue;
        }
      }
      levers_.online.push_back(std::move(t));
    }
  }
  if (metrics_) metrics_->record_burst(burst_pods_.size(), levers_.online.size());
}

void Agent::fast_step() {
  std::vector<kh_wait_event> events;
  events.swap(pending_);
  if (!state_.initialized) return;  // no tick yet: nothing to compare with
  ControllerInput in = last_input_;
  in.now_ns = mono_ns();
  in.online_pods.clear();
  FastBatch batch = fast_batch(events, *classifier_);
  in.fast_events = std::move(batch.events);
  if (batch.longest) {  // one line per scan: a starved task is worth knowing about while it lasts
    spdlog::info("{}", describe_ongoing_waits(*batch.longest, batch.ongoing, [this](uint64_t id) {
                   auto p = meas_.index->path_of(id);
                   return p ? *p : fmt::format("cgroup {}", id);
                 }));
  }
  Decision d = controller_step(in, cfg_, state_);
  fast_breaches_ += d.fast_breaches;
  // With cpu.idle alone there is nothing to move between ticks; the ladder
  // decides at the next tick whether to add a rung.
  bool budget_lever = rung_in_force(Lever::Cpuset, cfg_, ladder_) || rung_in_force(Lever::Quota, cfg_, ladder_);
  if (d.changed && budget_lever) {
    apply(d, true, batch.first_ts_ns);
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

  levers_.targets = targets(node);
  for (auto& t : levers_.targets) t.usage_cores = cores_at_or_below(*sample, t.path);
  online_.clear();
  for (const auto& p : node.pods)
    if (p.cls == CgroupClass::Online) online_.push_back(p.path);
  online_reclaim_ = node.reclaim[static_cast<size_t>(CgroupClass::Online)];
  online_reclaim_interval_ns_ = node.interval_ns;
  memory_step(mono_ns());

  ControllerInput in = controller_input(node, static_cast<double>(topo_.cpus.size()), mono_ns());
  last_input_ = in;
  Decision d = controller_step(in, cfg_, state_);
  burst_step(d, in.now_ns);
  ladder(d, in);
  if (d.changed || ticks_ == 1) spdlog::info("{}", budget_line(d, in, levers_.targets));
  apply(d, false, 0);
  if (yarn_) {
    yarn_offer_ = yarn_offer(d, node, cfg_, in.now_ns);
    yarn_offer_.memory_budget_bytes = levers_.memory_budget;
    yarn_offer_.memory_emergency = memory_critical_;
    yarn_->offer(yarn_offer_);
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
