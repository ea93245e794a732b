#include "khagent/policy/controller.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace khagent {

const char* verdict_name(PodVerdictKind k) {
  switch (k) {
    case PodVerdictKind::Ok: return "ok";
    case PodVerdictKind::FewSamples: return "few-samples";
    case PodVerdictKind::Breach: return "breach";
    case PodVerdictKind::SelfThrottled: return "self-throttled";
  }
  return "ok";
}

const char* action_name(BudgetAction a) {
  switch (a) {
    case BudgetAction::Hold: return "hold";
    case BudgetAction::Init: return "init";
    case BudgetAction::Decrease: return "decrease";
    case BudgetAction::Increase: return "increase";
    case BudgetAction::Ceiling: return "ceiling";
    case BudgetAction::Floor: return "floor";
  }
  return "hold";
}

namespace {

double share(uint64_t part, uint64_t whole) {
  return whole ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

}  // namespace

PodVerdict judge_pod(const OnlinePodLoad& p, const OnlineConfig& o) {
  PodVerdict v;
  v.uid = p.uid;
  v.path = p.path;
  v.wait_p99_us = p.wait_p99_us;
  v.offline_share = share(p.offline_wait_ns, p.wait_ns);
  v.throttled_share = share(p.throttled_wait_ns, p.wait_ns);
  if (p.waits < o.min_waits) {
    v.kind = PodVerdictKind::FewSamples;
    return v;
  }
  bool over = p.wait_p99_us > o.wait_p99_target_us;
  if (over && v.throttled_share >= o.self_throttle_share) {
    // Its own CFS quota made it wait: squeezing offline would not help.
    v.kind = PodVerdictKind::SelfThrottled;
    v.why = fmt::format(
        "p99 {:.0f}us over target {:.0f}us but {:.0f}% of its wait is its own "
        "throttling: its CPU limit is too small",
        p.wait_p99_us, o.wait_p99_target_us, 100 * v.throttled_share);
    return v;
  }
  if (over && v.offline_share >= o.min_offline_share) {
    v.kind = PodVerdictKind::Breach;
    v.why = fmt::format("p99 {:.0f}us over target {:.0f}us, {:.0f}% of its wait behind offline", p.wait_p99_us,
                        o.wait_p99_target_us, 100 * v.offline_share);
    return v;
  }
  // Interference share alone counts once the latency is at least half way to
  // the target, so a pod with tiny waits does not starve offline for nothing.
  if (v.offline_share > o.interference_share_limit && p.wait_p99_us > o.wait_p99_target_us / 2) {
    v.kind = PodVerdictKind::Breach;
    v.why = fmt::format("{:.0f}% of its wait behind offline (limit {:.0f}%), p99 {:.0f}us", 100 * v.offline_share,
                        100 * o.interference_share_limit, p.wait_p99_us);
    return v;
  }
  v.kind = PodVerdictKind::Ok;
  return v;
}

ControllerInput controller_input(const NodeSignals& node, double node_cpus, uint64_t now_ns) {
  ControllerInput in;
  in.now_ns = now_ns;
  in.node_cpus = node_cpus;
  in.online_cpu_cores = node.classes[static_cast<size_t>(CgroupClass::Online)].cpu_cores;
  in.offline_cpu_cores = node.classes[static_cast<size_t>(CgroupClass::Offline)].cpu_cores;
  in.online_pods = online_loads(node);
  return in;
}

namespace {

// Judges the pods and the fast-path events into d; the first breach's why, empty when none.
std::string judge_breaches(const ControllerInput& in, const Config& cfg, Decision& d) {
  std::string breach_why;
  for (const auto& p : in.online_pods) {
    PodVerdict v = judge_pod(p, cfg.online);
    if (v.kind == PodVerdictKind::Breach && breach_why.empty()) breach_why = p.path + ": " + v.why;
    if (v.kind != PodVerdictKind::FewSamples) d.verdicts.push_back(std::move(v));
  }
  for (const auto& e : in.fast_events) {
    // A breach when offline held the CPU for at least the share of the wait
    // a tick's verdict asks for: not when it held a sliver of it.
    if (e.throttled || !e.aggressor_offline ||
        static_cast<double>(e.aggressor_ns) < cfg.online.interference_share_limit * static_cast<double>(e.wait_ns))
      continue;
    d.fast_breaches++;
    if (breach_why.empty())
      breach_why = fmt::format("cgroup {} {} {:.1f}ms, {:.1f}ms of it behind offline (fast path)", e.cgroup_id,
                               e.ongoing ? "has been waiting for" : "waited", static_cast<double>(e.wait_ns) / 1e6,
                               static_cast<double>(e.aggressor_ns) / 1e6);
  }
  return breach_why;
}

// The first step: the initial budget (the ceiling when unset) within the bounds; returns it.
double init_budget(const ControllerInput& in, const BudgetConfig& b, ControllerState& st, Decision& d) {
  double next = b.initial_cores >= 0 ? b.initial_cores : d.ceiling_cores;
  next = std::clamp(next, d.floor_cores, d.ceiling_cores);
  st.initialized = true;
  st.budget_cores = next;
  st.last_increase_ns = in.now_ns;
  d.budget_cores = next;
  d.changed = true;
  d.action = BudgetAction::Init;
  d.reason = fmt::format("start at {:.2f} cores (floor {:.2f}, ceiling {:.2f})", next, d.floor_cores, d.ceiling_cores);
  return next;
}

// The rate-limited move from prev: a cut on a breach, a step up after a calm spell; returns the new budget.
double rate_limited_move(const ControllerInput& in, const BudgetConfig& b, const std::string& breach_why, double prev,
                         ControllerState& st, Decision& d) {
  double next = prev;
  if (!breach_why.empty()) {
    st.last_breach_ns = in.now_ns;
    if (st.last_decrease_ns == 0 || in.now_ns - st.last_decrease_ns >= b.min_decrease_interval_ns) {
      // Cut from what offline actually uses if that is below the budget, so
      // the first cut bites.
      double base = std::min(prev, std::max(in.offline_cpu_cores, d.floor_cores));
      next = std::max(d.floor_cores, base * b.decrease_factor);
      st.last_decrease_ns = in.now_ns;
      d.action = next <= d.floor_cores ? BudgetAction::Floor : BudgetAction::Decrease;
      d.reason = fmt::format("{:.2f} -> {:.2f} cores: {}", prev, next, breach_why);
    } else {
      d.reason = "breach inside the decrease rate limit: " + breach_why;
    }
  } else if (in.now_ns - st.last_breach_ns >= b.calm_period_ns &&
             in.now_ns - st.last_increase_ns >= b.increase_interval_ns && prev < d.ceiling_cores) {
    next = std::min(d.ceiling_cores, prev + b.increase_step_cores);
    st.last_increase_ns = in.now_ns;
    d.action = BudgetAction::Increase;
    d.reason = st.last_breach_ns == 0 ? fmt::format("{:.2f} -> {:.2f} cores: no breach since the start", prev, next)
                                      : fmt::format("{:.2f} -> {:.2f} cores: calm for {:.1f}s", prev, next,
                                                    static_cast<double>(in.now_ns - st.last_breach_ns) / 1e9);
  }
  return next;
}

}  // namespace

Decision controller_step(const ControllerInput& in, const Config& cfg, ControllerState& st) {
  const BudgetConfig& b = cfg.budget;
  Decision d;
  d.floor_cores = std::min(b.floor_cores, in.node_cpus);
  d.ceiling_cores = std::max(d.floor_cores, in.node_cpus - in.online_cpu_cores - b.reserve_cores);

  const std::string breach_why = judge_breaches(in, cfg, d);
  bool breach = !breach_why.empty();

  double prev = st.budget_cores;
  if (!st.initialized) {
    prev = init_budget(in, b, st, d);
    if (!breach) return d;
  }
  double next = rate_limited_move(in, b, breach_why, prev, st, d);

  // The ceiling follows online usage at once, whatever the rate limits say.
  if (next > d.ceiling_cores) {
    next = d.ceiling_cores;
    d.action = BudgetAction::Ceiling;
    d.reason = fmt::format("{:.2f} -> {:.2f} cores: online uses {:.2f} of {:.0f} CPUs", prev, next, in.online_cpu_cores,
                           in.node_cpus);
  }
  next = std::max(next, d.floor_cores);

  // Deadband: small moves are not worth a write (and would flap), except to
  // reach the floor or the ceiling exactly, or to leave a budget that the
  // bounds no longer allow (the ceiling fell below it since the last step).
  bool to_bound = next == d.floor_cores || next == d.ceiling_cores;
  bool prev_in_bounds = prev >= d.floor_cores && prev <= d.ceiling_cores;
  if (std::fabs(next - prev) < b.deadband_cores && !(to_bound && next != prev) && prev_in_bounds) next = prev;
  if (d.changed) {  // initialized in this step, then decreased at once
    st.budget_cores = next;
    d.budget_cores = next;
    return d;
  }
  d.changed = next != prev;
  if (!d.changed) d.action = BudgetAction::Hold;
  st.budget_cores = next;
  d.budget_cores = next;
  return d;
}

CpuQuota budget_to_quota(double budget_cores, double node_cpus, uint64_t period_us) {
  if (budget_cores >= node_cpus) return {std::nullopt, period_us};
  auto quota = static_cast<uint64_t>(std::llround(std::max(budget_cores, 0.0) * static_cast<double>(period_us)));
  return {std::max<uint64_t>(quota, 1000), period_us};  // the kernel's minimum quota is 1 ms
}

}  // namespace khagent
