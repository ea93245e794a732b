#include "khagent/policy/memory.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "khagent/util/bytes.h"

namespace khagent {

namespace {

uint64_t sub_sat(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }
constexpr uint64_t kMiB = uint64_t{1} << 20;

// Why online may stall for want of room this tick, and what offline holds.
struct Pressure {
  bool tight = false;         // under twice the reserve free above the eviction threshold
  bool node_reclaim = false;  // online paid stall_limit of the interval in the node's direct reclaim
  uint64_t unused = 0;        // unused above the eviction threshold, page cache counted as used
  uint64_t held = 0;          // what offline holds, page cache included where known
  bool pressed = false;       // online stalls for want of room
};

// The ceiling's arithmetic in words: capacity less the eviction threshold, the reserve and what the rest uses.
std::string ceiling_text(const MemoryInput& in, const MemoryDecision& d, uint64_t others) {
  return "capacity " + mib_text(in.capacity) +
         (d.eviction ? " - kubelet eviction threshold " + mib_text(d.eviction) : std::string()) + " - reserve " +
         mib_text(d.reserve) +
         (d.reserve_measured ? fmt::format(" (measured: online grew at most {} in a second, watermarks {})",
                                           mib_text(in.online_growth.value_or(0)), mib_text(in.watermark_high))
                             : std::string()) +
         " - online and system " + mib_text(others) +
         (in.online_refault_credit
              ? " (with " + mib_text(in.online_refault_credit) + " of online page cache refaulted lately)"
              : std::string()) +
         " = " + mib_text(d.ceiling);
}

// Whether online stalls for want of room: stalled while the node is tight, reclaiming or full.
Pressure assess_pressure(const MemoryInput& in, const MemoryConfig& cfg, const MemoryDecision& d, bool tight) {
  Pressure p;
  p.tight = tight;
  const bool stalled = in.online_stall_share > cfg.stall_limit || in.stall_trigger.has_value();
  // Online tasks spent stall_limit of the interval reclaiming for the node
  // (the page allocator ran short for small allocations): the node is
  // short whatever the working sets say (page cache they count as free was
  // not free fast enough). A moment of it is not enough.
  p.node_reclaim = in.interval_ns > 0 && static_cast<double>(in.online_node_reclaim_ns) >=
                                             cfg.stall_limit * static_cast<double>(in.interval_ns);
  // The node is full by use, page cache included, and the stalled cgroup is
  // not at its own limit: it stalls at the node's (a node cgroup's limit,
  // or the page allocator), where offline's cache, counted as free above,
  // was not free fast enough.
  p.unused = sub_sat(sub_sat(in.capacity, d.eviction), in.node_usage);
  const bool node_full = in.node_usage > 0 && p.unused < 2 * d.reserve && !in.stall_own_limit;
  // What offline holds: its use with its page cache where known (the cut
  // reclaims that too), else its working set.
  p.held = std::max(in.offline_usage, in.offline_used);
  p.pressed = stalled && (p.tight || p.node_reclaim || node_full);
  return p;
}

// Why the stall cut is made, in words: the stall, the reclaim online paid, the node being full, the cut.
std::string stall_cut_text(const MemoryInput& in, const MemoryConfig& cfg, const Pressure& p, uint64_t cut) {
  const std::string what =
      !in.stall_trigger ? fmt::format("an online cgroup stalled on memory {:.0f}% of the tick (limit {:.0f}%)",
                                      in.online_stall_share * 100, cfg.stall_limit * 100)
                        : fmt::format("the kernel's PSI trigger fired: online {} stalled on memory past its threshold",
                                      *in.stall_trigger);
  const uint64_t paid = in.online_node_reclaim_ns + in.online_memcg_reclaim_ns;
  const std::string reclaim =
      paid ? fmt::format(
                 " (online paid {:.1f} ms in direct reclaim: {:.1f} ms for the node, {:.1f} ms at cgroup "
                 "limits)",
                 static_cast<double>(paid) / 1e6, static_cast<double>(in.online_node_reclaim_ns) / 1e6,
                 static_cast<double>(in.online_memcg_reclaim_ns) / 1e6)
           : std::string();
  const std::string full =
      p.tight || p.node_reclaim
          ? std::string()
          : fmt::format(
                " (the node is full: {} unused of {}, page cache counted as used; the cgroup is not at "
                "its own limit)",
                mib_text(p.unused), mib_text(in.capacity));
  return fmt::format("{}{}{}: offline held {}{}, cut by {:.0f}% to {}", what, reclaim, full, mib_text(p.held),
                     p.held != in.offline_used ? " (working set " + mib_text(in.offline_used) + ")" : std::string(),
                     cfg.stall_cut * 100, mib_text(cut));
}

// The stall cut: offline gives back part of what it holds, when that is below the ceiling and the budget in force.
void apply_stall_cut(const MemoryInput& in, const MemoryConfig& cfg, const Pressure& p, MemoryDecision& d,
                     MemoryState& st, std::string& why) {
  // The arithmetic left online short (its page cache counted as free, a
  // burst within a tick): offline gives back part of what it holds.
  const auto cut = static_cast<uint64_t>(static_cast<double>(p.held) * (1 - cfg.stall_cut)) / kMiB * kMiB;
  // A cut only: never above the ceiling or the budget in force (offline
  // may hold more than its budget, at the min_offline floor).
  if (cut < (st.initialized ? std::min(d.ceiling, st.budget) : d.ceiling)) {
    d.ceiling = cut;
    d.stalled = true;
    st.last_cut_ns = in.now_ns;
    why = stall_cut_text(in, cfg, p, cut);
  }
}

// After the first step: cut to the ceiling at once, grow toward it slowly, hold within the deadband.
void move_budget(const MemoryInput& in, const MemoryConfig& cfg, bool pressed, const std::string& why,
                 MemoryDecision& d, MemoryState& st) {
  const uint64_t dt_ns = sub_sat(in.now_ns, st.last_ns);
  uint64_t want = d.ceiling;
  if (want > st.budget && pressed) {
    want = st.budget;        // no growth while online stalls for want of room, and
    st.last_ns = in.now_ns;  // none saved up for after
  } else if (want > st.budget) {
    const double grow = static_cast<double>(cfg.grow_per_second_bytes) * static_cast<double>(dt_ns) / 1e9;
    want = std::min(want, st.budget + static_cast<uint64_t>(grow)) / kMiB * kMiB;
  }
  const uint64_t move = want > st.budget ? want - st.budget : st.budget - want;
  const bool to_zero = want == 0 && st.budget != 0;
  if (move < cfg.deadband_bytes && !to_zero && !d.stalled) {  // a stall cut is made however small
    // Not moved. Growth time counts only while the ceiling stays above the
    // budget: after a steady spell, a higher ceiling is approached from now.
    if (d.ceiling <= st.budget) st.last_ns = in.now_ns;
    d.budget = st.budget;
    return;
  }
  d.reason = (want < st.budget    ? "cut to the ceiling: "
              : want == d.ceiling ? "grown to the ceiling: "
                                  : "growing toward the ceiling: ") +
             why;
  st.budget = want;
  st.last_ns = in.now_ns;
  d.budget = want;
  d.changed = true;
}

}  // namespace

uint64_t memory_reserve(const MemoryInput& in, const MemoryConfig& cfg, bool* measured) {
  const auto share = static_cast<uint64_t>(static_cast<double>(in.capacity) * cfg.reserve_share);
  const uint64_t fixed = std::max(cfg.reserve_bytes, share);
  if (measured) *measured = false;
  if (!in.online_growth || cfg.reserve_min_bytes >= fixed) return fixed;
  const uint64_t need = std::max({cfg.reserve_min_bytes, in.watermark_high, *in.online_growth});
  if (need >= fixed) return fixed;
  if (measured) *measured = true;
  return (need + kMiB - 1) / kMiB * kMiB;
}

MemoryDecision memory_step(const MemoryInput& in, const MemoryConfig& cfg, MemoryState& st) {
  MemoryDecision d;
  d.reserve = memory_reserve(in, cfg, &d.reserve_measured);
  const uint64_t others = sub_sat(in.node_used, in.offline_used) + in.online_refault_credit;
  d.eviction = cfg.eviction_threshold_bytes;
  d.ceiling = sub_sat(sub_sat(sub_sat(in.capacity, d.eviction), d.reserve), others) / kMiB * kMiB;
  std::string why = ceiling_text(in, d, others);
  // Only when the node is short of memory (a pod stalling against its own
  // limit on a roomy node is not offline's doing), and at most once a second.
  const uint64_t free_above = sub_sat(sub_sat(in.capacity, d.eviction), in.node_used);
  const bool tight = free_above < 2 * d.reserve;
  if (free_above < d.reserve / 2 && in.offline_used > 0)
    d.critical = fmt::format("{} free above the eviction threshold, under half the {} reserve; offline holds {}",
                             mib_text(free_above), mib_text(d.reserve), mib_text(in.offline_used));
  const bool cut_due = st.last_cut_ns == 0 || sub_sat(in.now_ns, st.last_cut_ns) >= 1'000'000'000;
  const Pressure p = assess_pressure(in, cfg, d, tight);
  if (p.pressed && p.held > 0 && cut_due) apply_stall_cut(in, cfg, p, d, st, why);
  if (!st.initialized) {
    st.initialized = true;
    st.budget = d.ceiling;
    st.last_ns = in.now_ns;
    d.budget = d.ceiling;
    d.changed = true;
    d.reason = "first budget: " + why;
    return d;
  }
  move_budget(in, cfg, p.pressed, why, d, st);
  return d;
}

uint64_t memory_share(uint64_t budget, uint64_t used, uint64_t total_used, size_t parents, const MemoryConfig& cfg) {
  uint64_t limit = 0;
  if (parents <= 1) {
    limit = budget;
  } else if (budget >= total_used) {
    limit = used + (budget - total_used) / parents;
  } else {
    limit = static_cast<uint64_t>(static_cast<double>(used) * static_cast<double>(budget) /
                                  static_cast<double>(std::max<uint64_t>(total_used, 1)));
  }
  limit = std::max(limit, cfg.min_offline_bytes);
  return std::max(limit / kMiB * kMiB, kMiB);
}

uint64_t memory_backstop(uint64_t limit, uint64_t reserve, uint64_t usage, std::optional<uint64_t> prev) {
  const uint64_t target = limit + reserve / 2;
  // Never under what the root holds: memory.max written below a group's
  // use makes the kernel reclaim, then OOM-kill, inside that write.
  const uint64_t held = usage + kBackstopSlack;
  // Over the target now: held where it is, never above the backstop
  // before (growth is what it stops), nor below its use (one the last
  // backstop did not hold: a write that failed).
  uint64_t b = prev && *prev >= usage ? std::min(*prev, held) : held;
  b = std::max(b, target);
  return (b + kMiB - 1) / kMiB * kMiB;
}

uint64_t RefaultCredit::step(uint64_t now_ns, uint64_t refault_bytes, uint64_t online_inactive, uint64_t halflife_ns) {
  if (halflife_ns == 0) {
    sum_ = 0;
    last_ns_ = now_ns;
    return 0;
  }
  if (last_ns_ && now_ns > last_ns_)
    sum_ *= std::exp2(-static_cast<double>(now_ns - last_ns_) / static_cast<double>(halflife_ns));
  last_ns_ = now_ns;
  // Never more than online's inactive cache in the sum either: a burst of
  // refaults counts once, not for an hour after the cache it protects.
  sum_ = std::min(sum_ + static_cast<double>(refault_bytes), static_cast<double>(online_inactive));
  return static_cast<uint64_t>(sum_) / kMiB * kMiB;
}

std::optional<uint64_t> OnlineGrowth::step(uint64_t now_ns, uint64_t others) {
  constexpr uint64_t kSecond = 1'000'000'000, kWindow = 300 * kSecond, kWarmup = 30 * kSecond;
  if (!first_ns_) first_ns_ = now_ns;
  recent_.emplace_back(now_ns, others);
  while (recent_.front().first + kSecond < now_ns) recent_.pop_front();
  uint64_t lowest = others;
  for (const auto& r : recent_) lowest = std::min(lowest, r.second);
  const uint64_t rise = others - lowest;
  while (!rises_.empty() && rises_.back().second <= rise) rises_.pop_back();
  rises_.emplace_back(now_ns, rise);
  while (rises_.front().first + kWindow < now_ns) rises_.pop_front();
  if (now_ns - first_ns_ < kWarmup) return std::nullopt;
  return rises_.front().second;
}

}  // namespace khagent
