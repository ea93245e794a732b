#include "khagent/policy/ladder.h"

#include <algorithm>

#include <fmt/format.h>

#include "khagent/policy/lever_table.h"

namespace khagent {

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

// Records this tick's wait rate (two windows kept) and the breach's start and last sighting.
void record_tick(const LadderInput& in, const LadderConfig& cfg, LadderState& st) {
  st.history.emplace_back(in.now_ns, in.offline_wait_rate);
  // Keep two windows: the one before a step is needed when it is taken.
  while (!st.history.empty() && in.now_ns - st.history.front().first > 2 * cfg.verify_window_ns) st.history.pop_front();
  if (in.breach) {
    if (st.breach_since_ns == 0) st.breach_since_ns = in.now_ns;
    st.last_breach_ns = in.now_ns;
  } else {
    st.breach_since_ns = 0;
  }
}

// The verdict on the last step once its window has passed: kept if it helped, else undone and blocked.
LadderDecision verify_step(const LadderInput& in, const LadderConfig& cfg, LadderState& st) {
  LadderDecision d;
  if (in.now_ns - st.last_step_ns < cfg.verify_window_ns) {
    d.level = st.active.size();
    d.reason = std::string("verifying ") + lever_name(st.active.back());
    return d;
  }
  st.verifying = false;
  double after = mean_since(st.history, st.last_step_ns + 1);
  const Lever stepped = st.active.back();
  d.lever = stepped;
  d.before_rate = st.before_rate;
  d.after_rate = after;
  bool helped = after <= st.before_rate * (1.0 - cfg.min_improvement);
  if (helped) {
    d.action = LadderAction::Kept;
    d.reason = fmt::format("{} cut online waits behind offline from {:.2f} to {:.2f} ms/s", lever_name(stepped),
                           st.before_rate / 1e6, after / 1e6);
  } else {
    st.active.pop_back();
    st.blocked_until[stepped] = in.now_ns + cfg.retry_after_ns;
    st.last_step_ns = in.now_ns;
    st.breach_since_ns = in.breach ? in.now_ns : 0;  // a fresh wait before the next rung
    d.action = LadderAction::Undone;
    d.changed = true;
    d.reason = fmt::format(
        "{} did not help: online waits behind offline {:.2f} ms/s before, {:.2f} after "
        "(needed a {:.0f}% cut); undone, not retried for {:.0f}s",
        lever_name(stepped), st.before_rate / 1e6, after / 1e6, 100 * cfg.min_improvement,
        static_cast<double>(cfg.retry_after_ns) / 1e9);
  }
  d.level = st.active.size();
  return d;
}

// The first rung not on, not blocked and possible here; the others passed over, in words, into skipped.
const Lever* next_rung(const LadderInput& in, const LadderConfig& cfg, const LadderState& st, std::string& skipped) {
  for (const Lever& l : cfg.rungs) {
    if (lever_on(st, l)) continue;
    const std::string name = lever_name(l);
    auto b = st.blocked_until.find(l);
    bool blocked = b != st.blocked_until.end() && in.now_ns < b->second;
    bool impossible = lever_spec(l).needs_spare_cpu && !in.can_cpuset;
    if (!blocked && !impossible) return &l;
    skipped += (skipped.empty() ? "" : ", ") + name + (blocked ? " (did not help recently)" : " (no core to spare)");
  }
  return nullptr;
}

// Adds the next rung and starts verifying it; false (d untouched) when no rung is left to add.
bool try_escalate(const LadderInput& in, const LadderConfig& cfg, LadderState& st, LadderDecision& d) {
  std::string skipped;
  const Lever* next = next_rung(in, cfg, st, skipped);
  if (!next) return false;
  double before = mean_since(st.history, in.now_ns - std::min(in.now_ns, cfg.verify_window_ns));
  st.active.push_back(*next);
  st.verifying = true;
  st.before_rate = before;
  st.last_step_ns = in.now_ns;
  d.action = LadderAction::Escalate;
  d.changed = true;
  d.lever = *next;
  d.before_rate = before;
  d.reason = fmt::format(
      "online in breach for {:.1f}s with cpu.idle{}: adding {} (waits behind offline "
      "{:.2f} ms/s before; through CPU stalls {:.2f} ms/s this tick, not counted){}",
      static_cast<double>(in.now_ns - st.breach_since_ns) / 1e9, st.active.size() > 1 ? " and the rungs below" : "",
      lever_name(*next), before / 1e6, in.stolen_wait_rate / 1e6, skipped.empty() ? "" : "; skipped " + skipped);
  d.level = st.active.size();
  return true;
}

// Removes the top rung once calm has lasted relax_after since the last breach or step.
void maybe_relax(const LadderInput& in, const LadderConfig& cfg, LadderState& st, LadderDecision& d) {
  const uint64_t calm_since = std::max(st.last_breach_ns, st.last_step_ns);
  if (in.breach || st.active.empty() || in.now_ns - calm_since < cfg.relax_after_ns) return;
  d.action = LadderAction::Relaxed;
  d.changed = true;
  d.lever = st.active.back();
  d.reason = fmt::format("calm for {:.0f}s: removing {}", static_cast<double>(in.now_ns - calm_since) / 1e9,
                         lever_name(st.active.back()));
  st.active.pop_back();
  st.last_step_ns = in.now_ns;
}

}  // namespace

LadderInput ladder_input(const Decision& d, const ControllerInput& in, uint64_t fast_breaches, uint64_t tick_ns,
                         bool can_cpuset) {
  LadderInput li;
  li.now_ns = in.now_ns;
  li.breach = fast_breaches > 0;
  for (const auto& v : d.verdicts)
    if (v.kind == PodVerdictKind::Breach) li.breach = true;
  uint64_t behind = 0, stolen = 0;
  for (const auto& p : in.online_pods) {
    behind += p.offline_wait_ns;
    stolen += p.stolen_wait_ns;
  }
  const double per_s = 1e9 / static_cast<double>(std::max<uint64_t>(tick_ns, 1));
  li.offline_wait_rate = static_cast<double>(behind) * per_s;
  li.stolen_wait_rate = static_cast<double>(stolen) * per_s;
  li.can_cpuset = can_cpuset;
  return li;
}

LadderDecision ladder_step(const LadderInput& in, const LadderConfig& cfg, LadderState& st) {
  LadderDecision d;
  record_tick(in, cfg, st);

  // A step waiting for its verdict: after one window, compare.
  if (st.verifying) return verify_step(in, cfg, st);

  // Escalate: a breach that lasted, a rung left that is not blocked.
  if (in.breach && in.now_ns - st.breach_since_ns >= cfg.escalate_after_ns && try_escalate(in, cfg, st, d)) return d;

  // Relax: calm for long enough, one rung down.
  maybe_relax(in, cfg, st, d);
  d.level = st.active.size();
  return d;
}

}  // namespace khagent
