#include "khagent/policy/capacity.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace khagent {

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

double batch_share_of(const SideUse& use, bool with_yarn, const CapacityConfig& cfg) {
  if (!with_yarn) return 1.0;
  if (cfg.split == CapacitySplitRule::Fixed) return cfg.batch_share;
  const double total = std::max(0.0, use.yarn_cores) + std::max(0.0, use.batch_cores);
  if (!(total > 0)) return cfg.batch_share;
  return std::clamp(std::max(0.0, use.batch_cores) / total, cfg.min_share, 1.0 - cfg.min_share);
}

// One resource: batch's part and whether the floor set it.
template <typename T>
std::pair<T, bool> batch_part(T budget, T share_part, T floor, bool breach) {
  if (breach || share_part >= floor) return {share_part, false};
  return {std::min(budget, floor), true};
}

// A value below `published` by more than the deadband, or above it.
bool below(int64_t target, int64_t published, double deadband) {
  return static_cast<double>(target) < static_cast<double>(published) * (1.0 - deadband);
}
bool above(int64_t target, int64_t published, double deadband) {
  if (published <= 0) return target > 0;
  return static_cast<double>(target) > static_cast<double>(published) * (1.0 + deadband);
}

// One resource's step. `target` < 0: no value for it now.
PublishAction step_one(int64_t target, int64_t most, int64_t published, bool stale, uint64_t now_ns,
                       const CapacityConfig& cfg, PublishState::Grow& g, uint64_t last_grow_ns, int64_t& out) {
  out = published;
  if (stale) {
    g.pending = false;
    return PublishAction::Stale;
  }
  if (target < 0) {
    g.pending = false;
    return PublishAction::Unknown;
  }
  if (published < 0) {
    out = target;
    return PublishAction::First;
  }
  // Lower by more than the deadband, or more than the whole budget (YARN
  // gets the budget less what batch holds: batch alone must fit).
  if (below(target, published, cfg.deadband) || (target == 0 && published > 0) || published > most) {
    g.pending = false;
    out = target;
    return PublishAction::Shrink;
  }
  if (!above(target, published, cfg.deadband)) {
    g.pending = false;
    return PublishAction::Hold;
  }
  if (!g.pending) {
    g.pending = true;
    g.since_ns = now_ns;
    g.min = target;
  }
  g.min = std::min(g.min, target);
  if (now_ns - g.since_ns < cfg.grow_stable_ns) return PublishAction::WaitStable;
  if (last_grow_ns != 0 && now_ns - last_grow_ns < cfg.grow_interval_ns) return PublishAction::WaitInterval;
  out = g.min;
  g.pending = false;
  return PublishAction::Grow;
}

bool moved(PublishAction a) {
  return a == PublishAction::First || a == PublishAction::Shrink || a == PublishAction::Grow;
}

}  // namespace

SideUse side_use(const NodeSignals& node) {
  SideUse u;
  for (const auto& c : node.yarn) u.yarn_cores += c.cpu_cores;
  const double offline = node.classes[static_cast<size_t>(CgroupClass::Offline)].cpu_cores;
  u.batch_cores = std::max(0.0, offline - u.yarn_cores);
  return u;
}

CapacitySplit split_budget(const YarnOffer& offer, const SideUse& use, bool with_yarn, const CapacityConfig& cfg) {
  CapacitySplit s;
  s.budget_cores = std::max(0.0, offer.budget_cores);
  s.batch_share = batch_share_of(use, with_yarn, cfg);
  auto [cores, cpu_floored] =
      batch_part(s.budget_cores, s.budget_cores * s.batch_share, cfg.floor_cores, offer.online_breach);
  s.batch_cores = cores;
  s.cpu_floored = cpu_floored;
  s.yarn_cores = std::max(0.0, s.budget_cores - s.batch_cores);
  if (offer.memory_budget_bytes) {
    const uint64_t m = *offer.memory_budget_bytes;
    s.budget_memory = m;
    const auto share_part = static_cast<uint64_t>(std::floor(static_cast<double>(m) * s.batch_share));
    auto [mem, mem_floored] =
        batch_part<uint64_t>(m, std::min(m, share_part), cfg.floor_memory_bytes, offer.online_breach);
    s.batch_memory = mem;
    s.memory_floored = mem_floored;
    s.yarn_memory = m - mem;
  }
  return s;
}

YarnOffer yarn_part(const YarnOffer& offer, const CapacitySplit& split, const BatchQuantity& held) {
  YarnOffer y = offer;
  const double batch = std::max(split.batch_cores, static_cast<double>(std::max<int64_t>(0, held.cpu_milli)) / 1000.0);
  y.budget_cores = std::max(0.0, split.budget_cores - batch);
  if (split.budget_memory) {
    const uint64_t m = *split.budget_memory;
    const uint64_t b =
        std::max(split.batch_memory.value_or(0), static_cast<uint64_t>(std::max<int64_t>(0, held.memory_bytes)));
    y.memory_budget_bytes = m - std::min(m, b);
  }
  return y;
}

BatchQuantity batch_most(const CapacitySplit& s) {
  BatchQuantity q;
  q.cpu_milli = static_cast<int64_t>(std::floor(s.budget_cores * 1000.0 + 1e-6));
  if (s.budget_memory) q.memory_bytes = static_cast<int64_t>(*s.budget_memory);
  return q;
}

BatchQuantity batch_quantity(const CapacitySplit& s) {
  BatchQuantity q;
  q.cpu_milli = static_cast<int64_t>(std::floor(s.batch_cores * 1000.0 + 1e-6));
  if (s.batch_memory) q.memory_bytes = static_cast<int64_t>(*s.batch_memory / kMiB * kMiB);
  return q;
}

const char* publish_action_name(PublishAction a) {
  switch (a) {
    case PublishAction::Hold: return "hold";
    case PublishAction::First: return "first";
    case PublishAction::Shrink: return "shrink";
    case PublishAction::Grow: return "grow";
    case PublishAction::WaitStable: return "wait-stable";
    case PublishAction::WaitInterval: return "wait-interval";
    case PublishAction::Reassert: return "reassert";
    case PublishAction::Stale: return "stale";
    case PublishAction::Unknown: return "unknown";
  }
  return "hold";
}

PublishDecision publish_step(const PublishInput& in, const CapacityConfig& cfg, PublishState& state) {
  PublishDecision d;
  const BatchQuantity prev = state.published.value_or(BatchQuantity{-1, -1});
  d.cpu = step_one(in.target.cpu_milli, in.most.cpu_milli, prev.cpu_milli, in.stale, in.now_ns, cfg, state.cpu,
                   state.last_grow_ns, d.value.cpu_milli);
  d.memory = step_one(in.target.memory_bytes, in.most.memory_bytes, prev.memory_bytes, in.stale, in.now_ns, cfg,
                      state.memory, state.last_grow_ns, d.value.memory_bytes);
  d.patch = moved(d.cpu) || moved(d.memory);
  // The node lost what was published (the kubelet re-registered it, or
  // someone patched it): publish again what stands, whether or not it moves.
  if (state.published && in.on_node && *in.on_node != d.value) {
    const bool cpu_lost = in.on_node->cpu_milli != d.value.cpu_milli;
    const bool mem_lost = in.on_node->memory_bytes != d.value.memory_bytes;
    if (cpu_lost && !moved(d.cpu)) d.cpu = PublishAction::Reassert;
    if (mem_lost && !moved(d.memory)) d.memory = PublishAction::Reassert;
    d.patch = true;
  }
  if (d.cpu == PublishAction::Grow || d.memory == PublishAction::Grow) state.last_grow_ns = in.now_ns;
  if (d.patch) state.published = d.value;
  return d;
}

std::string capacity_explanation(const YarnOffer& offer, const CapacitySplit& s, const BatchQuantity& q) {
  std::string out = fmt::format("batch-cpu {}m: ", q.cpu_milli);
  if (offer.cpu_terms) {
    const auto& t = *offer.cpu_terms;
    out += fmt::format("capacity {:.2f} - online {:.2f} - reserve {:.2f} - margin {:.2f} = budget {:.2f} cores",
                       t.capacity, t.online, t.reserve, t.margin, t.budget);
  } else {
    out += fmt::format("budget {:.2f} cores", s.budget_cores);
  }
  out += fmt::format(", batch {:.0f}%{} = {:.2f} (yarn {:.2f})", s.batch_share * 100.0, s.cpu_floored ? " (floor)" : "",
                     s.batch_cores, s.yarn_cores);
  if (q.cpu_milli != batch_quantity(s).cpu_milli) out += " (held within the deadband)";
  if (q.memory_bytes < 0) return out + "; batch-memory: no memory budget";
  auto mib = [](double b) { return static_cast<uint64_t>(std::max(0.0, b)) / kMiB; };
  out += fmt::format("; batch-memory {}Mi: ", q.memory_bytes / static_cast<int64_t>(kMiB));
  if (offer.memory_terms) {
    const auto& t = *offer.memory_terms;
    out += fmt::format("capacity {} - online {} - reserve {} - margin {} = budget {} MiB", mib(t.capacity),
                       mib(t.online), mib(t.reserve), mib(t.margin), mib(t.budget));
  } else {
    out += fmt::format("budget {} MiB", s.budget_memory.value_or(0) / kMiB);
  }
  out += fmt::format(", batch {:.0f}%{} = {} (yarn {})", s.batch_share * 100.0, s.memory_floored ? " (floor)" : "",
                     s.batch_memory.value_or(0) / kMiB, s.yarn_memory.value_or(0) / kMiB);
  if (q.memory_bytes != batch_quantity(s).memory_bytes) out += " (held within the deadband)";
  return out;
}

CapacityPlan CapacityPlanner::plan(const YarnOffer& offer, const SideUse& use, uint64_t now_ns,
                                   std::optional<BatchQuantity> on_node) {
  CapacityPlan p;
  p.split = split_budget(offer, use, with_yarn_, cfg_);
  p.target = batch_quantity(p.split);
  PublishInput in;
  in.now_ns = now_ns;
  in.stale = offer.now_ns + cfg_.stale_after_ns < now_ns;
  in.target = p.target;
  in.most = batch_most(p.split);
  in.on_node = on_node;
  p.publish = publish_step(in, cfg_, state_);
  p.yarn = yarn_part(offer, p.split, p.publish.value);
  p.cpu_terms = offer.cpu_terms;
  p.memory_terms = offer.memory_terms;
  p.explanation = capacity_explanation(offer, p.split, p.publish.value);
  return p;
}

}  // namespace khagent
