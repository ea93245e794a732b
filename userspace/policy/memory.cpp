#include "khagent/policy/memory.h"

#include <algorithm>

#include <fmt/format.h>

#include "khagent/util/bytes.h"

namespace khagent {

namespace {

uint64_t sub_sat(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }
constexpr uint64_t kMiB = uint64_t{1} << 20;

}  // namespace

uint64_t memory_reserve(uint64_t capacity, const MemoryConfig& cfg) {
  const auto share = static_cast<uint64_t>(static_cast<double>(capacity) * cfg.reserve_share);
  return std::max(cfg.reserve_bytes, share);
}

MemoryDecision memory_step(const MemoryInput& in, const MemoryConfig& cfg, MemoryState& st) {
  MemoryDecision d;
  d.reserve = memory_reserve(in.capacity, cfg);
  const uint64_t others = sub_sat(in.node_used, in.offline_used);
  d.eviction = cfg.eviction_threshold_bytes;
  d.ceiling = sub_sat(sub_sat(sub_sat(in.capacity, d.eviction), d.reserve), others) / kMiB * kMiB;
  std::string why = "capacity " + mib_text(in.capacity) +
                    (d.eviction ? " - kubelet eviction threshold " + mib_text(d.eviction) : std::string()) +
                    " - reserve " + mib_text(d.reserve) + " - online and system " + mib_text(others) + " = " +
                    mib_text(d.ceiling);
  // Only when the node is short of memory (a pod stalling against its own
  // limit on a roomy node is not offline's doing), and at most once a second.
  const uint64_t free_above = sub_sat(sub_sat(in.capacity, d.eviction), in.node_used);
  const bool tight = free_above < 2 * d.reserve;
  if (free_above < d.reserve / 2 && in.offline_used > 0)
    d.critical = fmt::format("{} free above the eviction threshold, under half the {} reserve; offline holds {}",
                             mib_text(free_above), mib_text(d.reserve), mib_text(in.offline_used));
  const bool cut_due = st.last_cut_ns == 0 || sub_sat(in.now_ns, st.last_cut_ns) >= 1'000'000'000;
  const bool stalled = in.online_stall_share > cfg.stall_limit || in.stall_trigger.has_value();
  // Online tasks spent stall_limit of the interval reclaiming for the node
  // (the page allocator ran short for small allocations): the node is
  // short whatever the working sets say (page cache they count as free was
  // not free fast enough). A moment of it is not enough.
  const bool node_reclaim = in.interval_ns > 0 && static_cast<double>(in.online_node_reclaim_ns) >=
                                                      cfg.stall_limit * static_cast<double>(in.interval_ns);
  // The node is full by use, page cache included, and the stalled cgroup is
  // not at its own limit: it stalls at the node's (a node cgroup's limit,
  // or the page allocator), where offline's cache, counted as free above,
  // was not free fast enough.
  const uint64_t unused = sub_sat(sub_sat(in.capacity, d.eviction), in.node_usage);
  const bool node_full = in.node_usage > 0 && unused < 2 * d.reserve && !in.stall_own_limit;
  // What offline holds: its use with its page cache where known (the cut
  // reclaims that too), else its working set.
  const uint64_t held = std::max(in.offline_usage, in.offline_used);
  const bool pressed = stalled && (tight || node_reclaim || node_full);  // online stalls for want of room
  if (pressed && held > 0 && cut_due) {
    // The arithmetic left online short (its page cache counted as free, a
    // burst within a tick): offline gives back part of what it holds.
    const auto cut = static_cast<uint64_t>(static_cast<double>(held) * (1 - cfg.stall_cut)) / kMiB * kMiB;
    // A cut only: never above the ceiling or the budget in force (offline
    // may hold more than its budget, at the min_offline floor).
    if (cut < (st.initialized ? std::min(d.ceiling, st.budget) : d.ceiling)) {
      d.ceiling = cut;
      d.stalled = true;
      st.last_cut_ns = in.now_ns;
      const std::string what =
          !in.stall_trigger
              ? fmt::format("an online cgroup stalled on memory {:.0f}% of the tick (limit {:.0f}%)",
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
          tight || node_reclaim
              ? std::string()
              : fmt::format(
                    " (the node is full: {} unused of {}, page cache counted as used; the cgroup is not at "
                    "its own limit)",
                    mib_text(unused), mib_text(in.capacity));
      why = fmt::format("{}{}{}: offline held {}{}, cut by {:.0f}% to {}", what, reclaim, full, mib_text(held),
                        held != in.offline_used ? " (working set " + mib_text(in.offline_used) + ")" : std::string(),
                        cfg.stall_cut * 100, mib_text(cut));
    }
  }
  if (!st.initialized) {
    st.initialized = true;
    st.budget = d.ceiling;
    st.last_ns = in.now_ns;
    d.budget = d.ceiling;
    d.changed = true;
    d.reason = "first budget: " + why;
    return d;
  }
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
    return d;
  }
  d.reason = (want < st.budget    ? "cut to the ceiling: "
              : want == d.ceiling ? "grown to the ceiling: "
                                  : "growing toward the ceiling: ") +
             why;
  st.budget = want;
  st.last_ns = in.now_ns;
  d.budget = want;
  d.changed = true;
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

}  // namespace khagent
