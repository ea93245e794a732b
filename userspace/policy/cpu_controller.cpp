#include "khagent/policy/cpu_controller.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "khagent/policy/controllers.h"
#include "khagent/policy/lever_table.h"
#include "khagent/policy/partition.h"

namespace khagent {

namespace {

constexpr std::array<Lever, 4> kCpuLevers = {Lever::Idle, Lever::Weight, Lever::Cpuset, Lever::Quota};

class CpuController : public Controller {
 public:
  CpuController(const Config& cfg, const NodeFacts& facts) : cfg_(cfg), facts_(facts) {}
  const char* name() const override { return "cpu"; }
  std::span<const Lever> levers() const override { return kCpuLevers; }
  Outcome step(const TickView& v) override;
  std::optional<Outcome> on_wakeup(const Wakeup& w, const TickView& v) override;

 private:
  double node_cpus() const { return static_cast<double>(facts_.topo.cpus.size()); }
  bool rung(Lever l) const { return rung_in_force(l, cfg_, ladder_); }
  LeverInput lever_input(const Decision& d, const std::vector<OfflineTarget>& targets, bool fast) const;
  // The cpuset partition for the budget, from the kubelet's exclusive CPUs
  // (read at each tick; the fast path uses the last tick's).
  std::optional<CpuSet> offline_cpus(const Decision& d, const TickView* v, CpuReport& r);
  std::string why(const Decision& d) const { return fmt::format("{}: {}", action_name(d.action), d.reason); }

  const Config& cfg_;
  NodeFacts facts_;
  ControllerState state_;
  ControllerInput last_input_;
  LadderState ladder_;
  uint64_t fast_breaches_ = 0;  // since the last tick
  std::optional<CpuSet> exclusive_;
  std::vector<OfflineTarget> targets_;  // the last tick's
  bool first_ = true;
};

LeverInput CpuController::lever_input(const Decision& d, const std::vector<OfflineTarget>& targets, bool fast) const {
  LeverInput li;
  li.targets = targets;
  li.idle_supported = facts_.idle_supported;
  li.cpuset = rung(Lever::Cpuset);
  li.quota = rung(Lever::Quota);
  li.budget_cores = d.budget_cores;
  li.node_cpus = node_cpus();
  li.budget_only = fast;  // the fast path moves the budget only
  return li;
}

std::optional<CpuSet> CpuController::offline_cpus(const Decision& d, const TickView* v, CpuReport& r) {
  if (v) {  // a tick: read again; no kubelet CPU manager: none exclusive
    exclusive_.reset();
    if (const auto& cms = v->snap.cpu_manager_state()) exclusive_ = cms.value().exclusive;
    else r.partition_skipped = cms.error().str();
  }
  if (!exclusive_) return std::nullopt;
  PartitionInput pi;
  pi.topo = facts_.topo;
  pi.offline_budget_cores = d.budget_cores;
  pi.online_demand_cores = last_input_.online_cpu_cores + cfg_.budget.reserve_cores;
  pi.reserved = cfg_.cpuset.reserved_cpus;
  pi.exclusive = *exclusive_;
  Partition p = partition_cpus(pi);
  r.partition_note = p.note;
  if (p.offline.empty()) return std::nullopt;
  return p.offline;
}

Outcome CpuController::step(const TickView& v) {
  CpuReport r;
  r.first = first_;
  first_ = false;
  r.input = controller_input(v.node, node_cpus(), v.now_ns);
  last_input_ = r.input;
  targets_ = v.targets;
  r.decision = controller_step(r.input, cfg_, state_);
  const Decision& d = r.decision;
  LadderInput li =
      ladder_input(d, r.input, fast_breaches_, cfg_.tick_ns, cfg_.cpuset.enabled || facts_.topo.cpus.size() >= 2);
  fast_breaches_ = 0;
  r.ladder = ladder_step(li, cfg_.ladder, ladder_);
  LeverInput in = lever_input(d, v.targets, false);
  r.in_force = levers_in_force(in, cfg_);
  if (in.cpuset) in.offline_cpus = offline_cpus(d, &v, r);
  r.targets = v.targets;
  Outcome o{lever_writes(in, cfg_, kCpuLevers), why(d), {}, {}, {}};
  YarnOffer y = yarn_offer(d, v.node, cfg_, v.now_ns);
  o.offer.budget_cores = y.budget_cores;
  o.offer.emergency = y.emergency;
  o.offer.containers = std::move(y.containers);
  o.offer.cpu_terms = BudgetTerms{r.input.node_cpus, r.input.online_cpu_cores, cfg_.budget.reserve_cores,
                                  std::max(0.0, d.ceiling_cores - d.budget_cores), d.budget_cores};
  bool breach = false;
  for (const auto& pv : d.verdicts) breach = breach || pv.kind == PodVerdictKind::Breach;
  o.offer.online_breach = breach;
  o.report = std::move(r);
  return o;
}

std::optional<Outcome> CpuController::on_wakeup(const Wakeup& w, const TickView& /*v*/) {
  if (w.waits.empty() || !state_.initialized) return std::nullopt;  // no tick yet: nothing to compare with
  CpuReport r;
  r.tick = false;
  r.input = last_input_;
  r.input.now_ns = w.now_ns;
  r.input.online_pods.clear();
  r.input.fast_events = w.waits;
  r.decision = controller_step(r.input, cfg_, state_);
  const Decision& d = r.decision;
  fast_breaches_ += d.fast_breaches;
  // With cpu.idle alone there is nothing to move between ticks; the ladder
  // decides at the next tick whether to add a rung.
  if (!d.changed || !(rung(Lever::Cpuset) || rung(Lever::Quota))) return std::nullopt;
  LeverInput in = lever_input(d, targets_, true);
  if (in.cpuset) in.offline_cpus = offline_cpus(d, nullptr, r);
  Outcome o{lever_writes(in, cfg_, kCpuLevers), why(d), {}, {}, {}};
  o.offer.budget_cores = d.budget_cores;  // shrink YARN's view at once too, not at the next tick
  o.report = std::move(r);
  return o;
}

}  // namespace

std::unique_ptr<Controller> make_cpu_controller(const Config& cfg, const NodeFacts& facts) {
  return std::make_unique<CpuController>(cfg, facts);
}

}  // namespace khagent
