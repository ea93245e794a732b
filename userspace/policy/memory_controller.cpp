#include "khagent/policy/memory_controller.h"

#include <algorithm>
#include <array>
#include <map>

#include <fmt/format.h>

#include "khagent/policy/controllers.h"
#include "khagent/policy/lever_table.h"
#include "khagent/signals/workload.h"
#include "khagent/util/bytes.h"

namespace khagent {

namespace {

constexpr std::array<Lever, 3> kMemoryLevers = {Lever::Memory, Lever::Backstop, Lever::OomGroup};
constexpr std::array<Lever, 1> kLimitLever = {Lever::Memory};
constexpr std::array<Lever, 1> kBackstopLever = {Lever::Backstop};
constexpr std::array<Lever, 1> kOomGroupLever = {Lever::OomGroup};

// The YARN containers under the YARN roots among `targets`: their children
// that the workload classifier names as containers (container_<id>).
std::vector<OfflineTarget> yarn_containers(const TickView& v, const std::vector<OfflineTarget>& targets) {
  std::vector<OfflineTarget> out;
  for (const auto& t : targets) {
    if (t.kind != TargetKind::YarnRoot) continue;
    for (const auto& c : v.snap.children(t.path)) {
      if (identify_cgroup(c, t.path).yarn_container_path != c) continue;
      OfflineTarget ct;
      ct.path = c;
      ct.kind = TargetKind::YarnContainer;
      out.push_back(std::move(ct));
    }
  }
  return out;
}

class MemoryController : public Controller {
 public:
  MemoryController(const Config& cfg, const NodeFacts& facts) : cfg_(cfg), facts_(facts) {}
  const char* name() const override { return "memory"; }
  std::span<const Lever> levers() const override { return kMemoryLevers; }
  Outcome step(const TickView& v) override;
  std::optional<Outcome> on_wakeup(const Wakeup& w, const TickView& v) override;

 private:
  // The budget from this snapshot (`triggers`: the online cgroups whose PSI
  // triggers fired, between ticks); `targets` get their memory filled in.
  MemoryReport decide(const TickView& v, const std::vector<std::string>& triggers, std::vector<OfflineTarget>& targets);
  // The online pods that stalled past the limit, the most stalled first, with their shares.
  void tick_signals(const TickView& v, const std::vector<std::string>& parents, MemoryReport& r,
                    std::vector<std::pair<std::string, double>>& stalled);
  // Which stalled pod is the node's (not at its own limit) into r.input.
  void own_limits(const TickView& v, const std::vector<std::pair<std::string, double>>& stalled, bool trigger,
                  MemoryReport& r) const;
  Outcome outcome(MemoryReport r, std::vector<OfflineTarget> targets);
  // Each YARN root's backstop from its limit among `limits` (the memory
  // lever's writes) and its use; a root whose use is unknown keeps its last.
  std::map<std::string, uint64_t> backstops(const std::vector<OfflineTarget>& targets,
                                            const std::vector<Setting>& limits);
  // The budget in force (the last decided); none before the first.
  std::optional<uint64_t> budget_in_force() const {
    return state_.initialized ? std::optional<uint64_t>(state_.budget) : std::nullopt;
  }

  const Config& cfg_;
  NodeFacts facts_;
  MemoryState state_;
  MemoryEventMeter events_;
  MemoryStallMeter stall_;
  FileRefaultMeter refaults_;
  RefaultCredit credit_;                       // online cache shown in use
  uint64_t last_credit_ = 0;                   // its last reading
  std::map<std::string, uint64_t> last_used_;  // each offline parent's last working set read
  std::map<std::string, uint64_t> usage_;      // and its last use, page cache included
  std::map<std::string, uint64_t> backstops_;  // each YARN root's backstop in force
  std::map<std::string, uint64_t> foreign_;    // YARN roots with a memory.max khagent did not write
  uint64_t reserve_ = 0;                       // the reserve of the last decision
  OnlineGrowth growth_;                        // online's growth, for the reserve
  std::optional<uint64_t> last_growth_;        // its last reading (wake-ups use it)
  std::optional<std::string> critical_;        // why the node's memory is critical
  ReclaimCounters online_reclaim_;             // the direct reclaim online paid in the last tick
  uint64_t reclaim_interval_ns_ = 0;           // that tick's interval
  std::string why_;                            // the last change of the budget, for its writes' log lines
  bool ticked_ = false;
};

void MemoryController::tick_signals(const TickView& v, const std::vector<std::string>& parents, MemoryReport& r,
                                    std::vector<std::pair<std::string, double>>& stalled) {
  r.events = events_.step(v.snap, v.online_pods, parents);
  MemoryStall stall = stall_.step(v.snap, v.online_pods);
  r.input.online_stall_share = stall.max_share;
  for (const auto& [path, share] : stall.shares)  // the most stalled first
    if (share > cfg_.memory.stall_limit) stalled.emplace_back(path, share);
  r.stall_unreadable = !v.online_pods.empty() && stall.unreadable == v.online_pods.size();
  r.stall = std::move(stall);
}

void MemoryController::own_limits(const TickView& v, const std::vector<std::pair<std::string, double>>& stalled,
                                  bool trigger, MemoryReport& r) const {
  // In a node cgroup full of page cache, a stall is the node's only for a
  // pod with room under its own limits (and those above it): the first
  // such pod, the most stalled at a tick, is the one named (its share the
  // tick's). Unreadable counts as at its limit.
  for (size_t i = 0; r.input.node_usage && i < stalled.size(); i++) {
    const auto& own = v.snap.at_own_limit(stalled[i].first, cfg_.memory.node_cgroup);
    const std::string why = own ? own.value() : "unknown (" + own.error().str() + ")";
    if (i == 0) r.input.stall_own_limit = why;  // all at their limits: the first is the one logged
    if (why.empty()) {
      r.input.stall_own_limit.reset();
      if (trigger) r.input.stall_trigger = stalled[i].first;
      else r.input.online_stall_share = stalled[i].second;
      break;
    }
  }
  if (r.input.stall_own_limit && r.input.stall_own_limit->empty()) r.input.stall_own_limit.reset();
}

MemoryReport MemoryController::decide(const TickView& v, const std::vector<std::string>& triggers,
                                      std::vector<OfflineTarget>& targets) {
  MemoryReport r;
  r.tick = triggers.empty();
  r.yarn_last_resort = facts_.yarn_last_resort;
  std::vector<std::string> parents;  // BestEffort pods are counted in their QoS cgroup
  for (const auto& t : targets)
    if (t.kind != TargetKind::BestEffortPod) parents.push_back(t.path);
  MemorySignals ms = offline_memory(v.snap, cfg_.memory.node_cgroup, parents);
  r.input = ms.input;
  r.problems = std::move(ms.problems);
  // A parent that could not be read keeps its last reading (and its
  // limit): a failed read must not lift a limit.
  std::map<std::string, uint64_t> last;
  last.swap(last_used_);
  for (auto& t : targets) {
    std::optional<uint64_t> u;
    if (auto a = ms.used.find(t.path); a != ms.used.end()) u = a->second;
    else if (auto b = last.find(t.path); b != last.end()) u = b->second;
    t.memory_known = u.has_value();
    t.memory_used = u.value_or(0);
    if (u) last_used_[t.path] = *u;
  }
  for (const auto& [path, use] : ms.usage) usage_[path] = use;
  // A memory.max on a YARN root that khagent did not write (the
  // NodeManager's, an operator's) is theirs: no backstop over it.
  foreign_.clear();
  for (const auto& t : targets) {
    if (t.kind != TargetKind::YarnRoot || (v.ours && v.ours(t.path, Knob::Backstop))) continue;
    const auto& m = v.snap.memory(t.path);
    if (!m) continue;
    if (const std::optional<uint64_t> max = m.value().limit) foreign_[t.path] = *max;
  }
  std::erase_if(usage_, [&](const auto& kv) { return !last_used_.count(kv.first); });
  std::vector<std::pair<std::string, double>> stalled;  // online pods whose stall may cut offline
  if (r.tick) tick_signals(v, parents, r, stalled);
  else
    for (const auto& p : triggers) stalled.emplace_back(p, 0.0);
  if (!r.tick) r.input.stall_trigger = triggers.front();
  own_limits(v, stalled, !r.tick, r);
  r.input.online_node_reclaim_ns = online_reclaim_.ns[KH_RECLAIM_NODE];
  r.input.online_memcg_reclaim_ns = online_reclaim_.ns[KH_RECLAIM_MEMCG];
  r.input.interval_ns = reclaim_interval_ns_;
  if (r.input.capacity == 0) {  // the node's memory is unknown: the last budget stays
    critical_.reset();
    return r;
  }
  r.decided = true;
  if (r.tick)
    last_growth_ = growth_.step(
        r.input.now_ns, r.input.node_used > r.input.offline_used ? r.input.node_used - r.input.offline_used : 0);
  r.input.online_growth = last_growth_;
  if (r.tick) {
    const FileRefaults f = refaults_.step(v.snap, v.online_pods);
    last_credit_ = credit_.step(r.input.now_ns, f.bytes, f.inactive_file, cfg_.memory.refault_halflife_ns);
  }
  r.input.online_refault_credit = last_credit_;
  r.decision = memory_step(r.input, cfg_.memory, state_);
  reserve_ = r.decision.reserve;
  r.critical_began = r.decision.critical && !critical_;
  r.critical_ended = !r.decision.critical && critical_;
  critical_ = r.decision.critical;
  if (r.decision.changed) why_ = fmt::format("memory budget {}: {}", mib_text(r.decision.budget), r.decision.reason);
  return r;
}

std::map<std::string, uint64_t> MemoryController::backstops(const std::vector<OfflineTarget>& targets,
                                                            const std::vector<Setting>& limits) {
  std::map<std::string, uint64_t> out;
  for (const auto& t : targets) {
    if (t.kind != TargetKind::YarnRoot || foreign_.count(t.path)) continue;
    auto s = std::find_if(limits.begin(), limits.end(), [&](const Setting& x) { return x.cgroup == t.path; });
    const auto* limit = s == limits.end() ? nullptr : std::get_if<MemoryLimit>(&s->value);
    if (!limit || !limit->bytes) continue;
    auto prev = backstops_.find(t.path);
    auto use = usage_.find(t.path);
    if (use != usage_.end())
      out[t.path] = memory_backstop(*limit->bytes, reserve_, use->second,
                                    prev == backstops_.end() ? std::nullopt : std::optional<uint64_t>(prev->second));
    else if (prev != backstops_.end()) out[t.path] = prev->second;
  }
  backstops_ = out;
  return out;
}

Outcome MemoryController::outcome(MemoryReport r, std::vector<OfflineTarget> targets) {
  Outcome o;
  const auto budget = budget_in_force();
  if (budget) {
    LeverInput in;
    in.targets = std::move(targets);
    in.memory_budget = budget;
    in.memory_v2 = facts_.memory_v2;
    // The limits first; each YARN root's backstop is taken from its limit.
    o.settings = lever_writes(in, cfg_, kLimitLever);
    if (cfg_.memory.backstop && facts_.memory_v2) {
      in.memory_backstops = backstops(in.targets, o.settings);
      for (auto& s : lever_writes(in, cfg_, kBackstopLever)) o.settings.push_back(std::move(s));
    }
    r.backstops = in.memory_backstops;
    if (cfg_.memory.backstop && facts_.memory_v2) r.backstop_foreign = foreign_;
  }
  o.why = why_;
  o.offer.memory = true;
  o.offer.memory_budget_bytes = budget;
  o.offer.memory_emergency = critical_;
  if (budget && r.decided) {
    const auto& in = r.input;
    const auto& d = r.decision;
    const uint64_t online = in.node_used - std::min(in.node_used, in.offline_used) + in.online_refault_credit;
    const double ceiling = static_cast<double>(d.ceiling);
    o.offer.memory_terms = BudgetTerms{
        static_cast<double>(in.capacity), static_cast<double>(online), static_cast<double>(d.reserve + d.eviction),
        std::max(0.0, ceiling - static_cast<double>(*budget)), static_cast<double>(*budget)};
  }
  o.report = std::move(r);
  return o;
}

Outcome MemoryController::step(const TickView& v) {
  online_reclaim_ = v.node.reclaim[static_cast<size_t>(CgroupClass::Online)];
  reclaim_interval_ns_ = v.node.interval_ns;
  std::vector<OfflineTarget> targets = v.targets;
  MemoryReport r = decide(v, {}, targets);
  ticked_ = true;
  Outcome o = outcome(std::move(r), targets);
  // A whole container per OOM kill, where the operator allows it (each
  // tick: a container that appeared gets it, one gone is forgotten).
  if (cfg_.memory.oom_group && facts_.memory_v2) {
    LeverInput in;
    in.memory_v2 = true;
    in.containers = yarn_containers(v, targets);
    for (auto& s : lever_writes(in, cfg_, kOomGroupLever)) o.settings.push_back(std::move(s));
  }
  // The kubelet already puts BestEffort pods at 1000; YARN containers and
  // configured targets go first in the OOM order too.
  if (cfg_.memory.oom_order)
    for (const auto& t : targets)
      if (t.kind == TargetKind::YarnRoot || t.kind == TargetKind::Configured) o.oom_first.push_back(t.path);
  return o;
}

std::optional<Outcome> MemoryController::on_wakeup(const Wakeup& w, const TickView& v) {
  if (w.memory_stalled.empty() || !ticked_) return std::nullopt;  // no targets yet
  // Only the stall cut is made between ticks: a budget that would grow (or
  // move for another reason) waits for the tick, as if nothing happened.
  const MemoryState state = state_;
  const auto critical = critical_;
  const std::string why = why_;
  std::vector<OfflineTarget> targets = v.targets;
  MemoryReport r = decide(v, w.memory_stalled, targets);
  if (!r.decision.changed || !r.decision.stalled) {  // stalled: the step cut, now
    state_ = state;
    critical_ = critical;
    why_ = why;
    return std::nullopt;
  }
  return outcome(std::move(r), std::move(targets));
}

}  // namespace

std::unique_ptr<Controller> make_memory_controller(const Config& cfg, const NodeFacts& facts) {
  return std::make_unique<MemoryController>(cfg, facts);
}

}  // namespace khagent
