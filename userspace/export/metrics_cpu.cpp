// The offline CPU budget as the controller decides it, how fast a breach is
// answered, and the ladder of levers that restrain the offline side.
#include <array>

#include "khagent/policy/controller.h"
#include "metrics_parts.h"

namespace khagent::metrics {

namespace {

enum BudgetFamily : size_t { kBudget, kCeiling, kFloor, kDecisions, kReaction, kNrBudgetFamilies };
constexpr std::array<FamilySpec, kNrBudgetFamilies> kBudgetFamilies = {{
    {kBudget,
     "khagent_offline_cpu_budget_cores",
     MetricType::Gauge,
     {},
     "CPU the offline class may use, as decided by the controller"},
    {kCeiling,
     "khagent_offline_cpu_ceiling_cores",
     MetricType::Gauge,
     {},
     "Largest offline budget: node CPUs minus online usage minus the reserve"},
    {kFloor, "khagent_offline_cpu_floor_cores", MetricType::Gauge, {}, "Smallest offline budget"},
    {kDecisions,
     "khagent_budget_decisions_total",
     MetricType::Counter,
     {"action"},
     "Controller steps by the action taken on the offline budget"},
    {kReaction,
     "khagent_reaction_seconds",
     MetricType::Histogram,
     {},
     "Time from a fast-path breach to the new offline budget being applied"},
}};
static_assert(rows_in_order(kBudgetFamilies));

enum LeverFamily : size_t { kLeverActive, kLadderSteps, kLeverEffect, kNrLeverFamilies };
constexpr std::array<FamilySpec, kNrLeverFamilies> kLeverFamilies = {{
    {kLeverActive,
     "khagent_lever_active",
     MetricType::Gauge,
     {"lever"},
     "1 while a lever restrains the offline side (idle is the base lever; cpuset and "
     "quota are ladder rungs)"},
    {kLadderSteps,
     "khagent_ladder_steps_total",
     MetricType::Counter,
     {"lever", "action"},
     "Ladder steps by lever and action (escalate, kept, undone, relaxed)"},
    {kLeverEffect,
     "khagent_lever_effect_offline_wait_ratio",
     MetricType::Gauge,
     {"lever", "window"},
     "Online run-queue wait behind offline work (seconds per second) over the window "
     "before and after the last step of a lever"},
}};
static_assert(rows_in_order(kLeverFamilies));

constexpr std::array<BudgetAction, 6> kBudgetActions = {BudgetAction::Hold,     BudgetAction::Init,
                                                        BudgetAction::Decrease, BudgetAction::Increase,
                                                        BudgetAction::Ceiling,  BudgetAction::Floor};

const std::vector<double> kReactionBounds = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0};

}  // namespace

BudgetMetrics::BudgetMetrics(prometheus::Registry& r) {
  const auto& t = kBudgetFamilies;
  budget_ = &TableFamily<Gauge>(r, t[kBudget]).add({});
  ceiling_ = &TableFamily<Gauge>(r, t[kCeiling]).add({});
  floor_ = &TableFamily<Gauge>(r, t[kFloor]).add({});
  TableFamily<Counter> decisions(r, t[kDecisions]);
  for (auto a : kBudgetActions) decisions_[a] = &decisions.add({action_name(a)});
  reaction_ = &TableFamily<Histogram>(r, t[kReaction]).add({}, kReactionBounds);
}

void BudgetMetrics::record_decision(const Decision& d) {
  budget_->Set(d.budget_cores);
  ceiling_->Set(d.ceiling_cores);
  floor_->Set(d.floor_cores);
  if (auto it = decisions_.find(d.action); it != decisions_.end()) it->second->Increment();
}

void BudgetMetrics::record_reaction(double seconds) { reaction_->Observe(seconds); }

LeverMetrics::LeverMetrics(prometheus::Registry& r)
    : active_(r, kLeverFamilies[kLeverActive]),
      steps_(r, kLeverFamilies[kLadderSteps]),
      effect_(r, kLeverFamilies[kLeverEffect]) {}

void LeverMetrics::record_levers(const std::vector<std::pair<std::string, bool>>& active) {
  for (const auto& [lever, on] : active) active_.add({lever}).Set(on ? 1 : 0);
}

void LeverMetrics::record_ladder_step(const std::string& lever, const std::string& action, double before_ratio,
                                      double after_ratio, bool verdict) {
  steps_.add({lever, action}).Increment();
  effect_.add({lever, "before"}).Set(before_ratio);
  if (verdict) effect_.add({lever, "after"}).Set(after_ratio);
}

}  // namespace khagent::metrics
