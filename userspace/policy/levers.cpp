#include "khagent/policy/levers.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "khagent/policy/controller.h"
#include "khagent/signals/workload.h"

namespace khagent {

const char* target_kind_name(TargetKind k) {
  switch (k) {
    case TargetKind::YarnRoot: return "yarn-root";
    case TargetKind::BestEffortQos: return "besteffort-qos";
    case TargetKind::BestEffortPod: return "besteffort-pod";
    case TargetKind::Configured: return "configured";
  }
  return "configured";
}

const char* ladder_action_name(LadderAction a) {
  switch (a) {
    case LadderAction::Hold: return "hold";
    case LadderAction::Escalate: return "escalate";
    case LadderAction::Kept: return "kept";
    case LadderAction::Undone: return "undone";
    case LadderAction::Relaxed: return "relaxed";
    case LadderAction::Skipped: return "skipped";
  }
  return "hold";
}

std::vector<OfflineTarget> select_targets(const TargetCandidates& c, const OfflineConfig& cfg) {
  std::vector<OfflineTarget> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& p, TargetKind k) {
    if (p.empty() || p == "/" || !seen.insert(p).second) return;
    out.push_back({p, k, 0});
  };
  if (cfg.yarn)
    for (const auto& p : c.yarn_roots) add(p, TargetKind::YarnRoot);
  if (cfg.besteffort) {
    for (const auto& p : c.besteffort_qos) add(p, TargetKind::BestEffortQos);
    for (const auto& p : c.besteffort_pods) add(p, TargetKind::BestEffortPod);
  }
  for (const auto& p : c.configured) {
    // A configured path keeps the rules of what it is: the kubelet's QoS
    // cgroups and pods, and the NodeManager's containers, own their weight.
    auto id = identify_cgroup(p, cfg.yarn_hierarchy);
    TargetKind k = TargetKind::Configured;
    if (id.k8s && id.pod_uid.empty()) k = TargetKind::BestEffortQos;
    else if (id.k8s && id.container_id.empty()) k = TargetKind::BestEffortPod;
    else if (id.yarn && id.yarn_container.empty()) k = TargetKind::YarnRoot;
    else if (id.k8s || !id.yarn_container.empty()) continue;  // containers: never written
    add(p, k);
  }
  return out;
}

namespace {

// Whether khagent sets cpu.idle (or, without it, the weight) on this kind.
bool takes_idle(TargetKind k) { return k != TargetKind::BestEffortQos; }
// Whether it is a parent that gets the quota and the cpuset.
bool takes_limits(TargetKind k) { return k != TargetKind::BestEffortPod; }

}  // namespace

std::vector<DesiredValue> offline_writes(const LeverInput& in, const Config& cfg) {
  std::vector<DesiredValue> want;
  const bool idle = cfg.offline.idle;
  // A quota throttles whatever runs below it. Where the kernel has cpu.idle,
  // it only goes on offline work that is idle itself (the QoS cgroup's pods
  // are), never on a group an online waker would have to wait behind after
  // each unthrottle.
  const bool quota_allowed = !in.idle_supported || idle;
  double total = 0;
  size_t limited = 0;
  for (const auto& t : in.targets)
    if (takes_limits(t.kind)) {
      total += t.usage_cores;
      limited++;
    }
  for (const auto& t : in.targets) {
    if (idle && takes_idle(t.kind)) {
      if (in.idle_supported) want.push_back({t.path, CgroupFile::CpuIdle, "1"});
      else if (t.kind != TargetKind::BestEffortPod)  // the kubelet gave pods the minimum already
        want.push_back({t.path, CgroupFile::CpuWeight, "1"});
    } else if (!idle && cfg.offline.weight && t.kind != TargetKind::BestEffortQos &&
               t.kind != TargetKind::BestEffortPod) {
      want.push_back({t.path, CgroupFile::CpuWeight, std::to_string(cfg.offline.weight)});
    }
    if (!takes_limits(t.kind)) continue;
    if (in.cpuset && !in.offline_cpus.empty()) want.push_back({t.path, CgroupFile::CpusetCpus, in.offline_cpus});
    const bool partition_failed = in.cpuset && in.offline_cpus.empty();
    const bool quota =
        quota_allowed && (in.quota || (cfg.cpuset.throttle && in.cpuset) || (partition_failed && cfg.cpuset.throttle));
    if (quota) {
      // Split the budget by recent use, each target keeping a small share.
      double share = limited == 1 ? 1.0
                     : total > 0  ? std::max(t.usage_cores / total, 0.1)
                                  : 1.0 / static_cast<double>(limited);
      want.push_back({t.path, CgroupFile::CpuMax,
                      budget_to_cpu_max(in.budget_cores * share, in.node_cpus, cfg.budget.cpu_max_period_us)});
    }
  }
  return want;
}

bool lever_on(const LadderState& st, Lever lever) {
  return std::find(st.active.begin(), st.active.end(), lever) != st.active.end();
}

namespace {

double mean_since(const std::deque<std::pair<uint64_t, double>>& h, uint64_t since) {
  double sum = 0;
  size_t n = 0;
  for (const auto& [t, r] : h)
    if (t >= since) {
      sum += r;
      n++;
    }
  return n ? sum / static_cast<double>(n) : 0;
}

}  // namespace

LadderDecision ladder_step(const LadderInput& in, const LadderConfig& cfg, LadderState& st) {
  LadderDecision d;
  st.history.emplace_back(in.now_ns, in.offline_wait_rate);
  // Keep two windows: the one before a step is needed when it is taken.
  while (!st.history.empty() && in.now_ns - st.history.front().first > 2 * cfg.verify_window_ns) st.history.pop_front();
  if (in.breach) {
    if (st.breach_since_ns == 0) st.breach_since_ns = in.now_ns;
    st.last_breach_ns = in.now_ns;
  } else {
    st.breach_since_ns = 0;
  }

  // A step waiting for its verdict: after one window, compare.
  if (st.verifying) {
    if (in.now_ns - st.last_step_ns < cfg.verify_window_ns) {
      d.level = st.active.size();
      d.reason = std::string("verifying ") + lever_name(st.active.back());
      return d;
    }
    st.verifying = false;
    double after = mean_since(st.history, st.last_step_ns + 1);
    d.lever = lever_name(st.active.back());
    d.before_rate = st.before_rate;
    d.after_rate = after;
    bool helped = after <= st.before_rate * (1.0 - cfg.min_improvement);
    if (helped) {
      d.action = LadderAction::Kept;
      d.reason = fmt::format("{} cut online waits behind offline from {:.2f} to {:.2f} ms/s", d.lever,
                             st.before_rate / 1e6, after / 1e6);
    } else {
      st.active.pop_back();
      st.blocked_until[d.lever] = in.now_ns + cfg.retry_after_ns;
      st.last_step_ns = in.now_ns;
      st.breach_since_ns = in.breach ? in.now_ns : 0;  // a fresh wait before the next rung
      d.action = LadderAction::Undone;
      d.changed = true;
      d.reason = fmt::format(
          "{} did not help: online waits behind offline {:.2f} ms/s before, {:.2f} after "
          "(needed a {:.0f}% cut); undone, not retried for {:.0f}s",
          d.lever, st.before_rate / 1e6, after / 1e6, 100 * cfg.min_improvement,
          static_cast<double>(cfg.retry_after_ns) / 1e9);
    }
    d.level = st.active.size();
    return d;
  }

  // Escalate: a breach that lasted, a rung left that is not blocked.
  if (in.breach && in.now_ns - st.breach_since_ns >= cfg.escalate_after_ns) {
    const Lever* next = nullptr;
    std::string skipped;
    for (const Lever& l : cfg.rungs) {
      if (lever_on(st, l)) continue;
      const std::string name = lever_name(l);
      auto b = st.blocked_until.find(name);
      bool blocked = b != st.blocked_until.end() && in.now_ns < b->second;
      bool impossible = l == Lever::Cpuset && !in.can_cpuset;
      if (!blocked && !impossible) {
        next = &l;
        break;
      }
      skipped += (skipped.empty() ? "" : ", ") + name + (blocked ? " (did not help recently)" : " (no core to spare)");
    }
    if (next) {
      double before = mean_since(st.history, in.now_ns - std::min(in.now_ns, cfg.verify_window_ns));
      st.active.push_back(*next);
      st.verifying = true;
      st.before_rate = before;
      st.last_step_ns = in.now_ns;
      d.action = LadderAction::Escalate;
      d.changed = true;
      d.lever = lever_name(*next);
      d.before_rate = before;
      d.reason = fmt::format(
          "online in breach for {:.1f}s with cpu.idle{}: adding {} (waits behind offline "
          "{:.2f} ms/s before){}",
          static_cast<double>(in.now_ns - st.breach_since_ns) / 1e9, st.active.size() > 1 ? " and the rungs below" : "",
          d.lever, before / 1e6, skipped.empty() ? "" : "; skipped " + skipped);
      d.level = st.active.size();
      return d;
    }
  }

  // Relax: calm for long enough, one rung down.
  const uint64_t calm_since = std::max(st.last_breach_ns, st.last_step_ns);
  if (!in.breach && !st.active.empty() && in.now_ns - calm_since >= cfg.relax_after_ns) {
    d.action = LadderAction::Relaxed;
    d.changed = true;
    d.lever = lever_name(st.active.back());
    d.reason = fmt::format("calm for {:.0f}s: removing {}", static_cast<double>(in.now_ns - calm_since) / 1e9, d.lever);
    st.active.pop_back();
    st.last_step_ns = in.now_ns;
  }
  d.level = st.active.size();
  return d;
}

}  // namespace khagent
