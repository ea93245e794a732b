#include "khagent/policy/lever_table.h"

#include <algorithm>
#include <array>
#include <ranges>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "khagent/policy/controller.h"
#include "khagent/policy/memory.h"

namespace khagent {

namespace {

// Whether it is a parent that gets the quota and the cpuset (not a pod).
bool parent(TargetKind k) {
  return k == TargetKind::YarnRoot || k == TargetKind::BestEffortQos || k == TargetKind::Configured;
}
bool offline(TargetKind k) { return k != TargetKind::OnlinePod && k != TargetKind::YarnContainer; }

// The offline parents' working sets, and how many there are.
std::pair<uint64_t, size_t> parents_memory(const LeverInput& in) {
  uint64_t total = 0;
  size_t n = 0;
  for (const auto& t : in.targets)
    if (parent(t.kind) && t.memory_known) {
      total += t.memory_used;
      n++;
    }
  return {total, n};
}

constexpr std::array<LeverSpec, 10> kTable = {{
    {
        Lever::Idle,
        Knob::Idle,
        false,
        false,
        "cpu.idle: kernel 5.15+, cgroup v2 and the v1 cpu hierarchy; older kernels: the minimum cpu.weight "
        "(cpu.shares 2 on v1)",
        "YARN roots, BestEffort pods, offline.targets; never the BestEffort QoS cgroup, whose weight the kubelet "
        "writes",
        "the original cpu.idle from the state file, then the weight saved with it (clearing idle resets the "
        "weight to the default)",
        [](TargetKind k) { return offline(k) && k != TargetKind::BestEffortQos; },
        [](const LeverInput&, const Config& cfg) { return cfg.offline.idle; },
        [](const LeverInput& in, const Config&, const OfflineTarget& t, double) -> std::optional<KnobValue> {
          if (in.idle_supported) return CpuIdle{true};
          if (t.kind == TargetKind::BestEffortPod) return std::nullopt;  // the kubelet gave pods the minimum
          return CpuWeight{1};
        },
    },
    {
        Lever::Weight,
        Knob::Weight,
        false,
        false,
        "cpu.weight (cpu.shares on v1): every kernel",
        "YARN roots and offline.targets, whose weight no one else owns",
        "the original weight from the state file",
        [](TargetKind k) { return k == TargetKind::YarnRoot || k == TargetKind::Configured; },
        [](const LeverInput&, const Config& cfg) { return !cfg.offline.idle && cfg.offline.weight != 0; },
        [](const LeverInput&, const Config& cfg, const OfflineTarget&, double) -> std::optional<KnobValue> {
          return CpuWeight{cfg.offline.weight};
        },
    },
    {
        Lever::Cpuset,
        Knob::Cpus,
        true,
        true,
        "cpuset.cpus: cgroup v2 with the cpuset controller, or the v1 cpuset hierarchy (there on every "
        "descendant too)",
        "the offline parents (YARN roots, the BestEffort QoS cgroup, offline.targets), not pods",
        "the original cpu list from the state file, parents widened before children",
        parent,
        [](const LeverInput& in, const Config&) { return in.cpuset; },
        [](const LeverInput& in, const Config&, const OfflineTarget&, double) -> std::optional<KnobValue> {
          if (!in.offline_cpus || in.offline_cpus->empty()) return std::nullopt;
          return CpuList{*in.offline_cpus};
        },
    },
    {
        Lever::Quota,
        Knob::Quota,
        true,
        false,
        "cpu.max (cpu.cfs_quota_us and cpu.cfs_period_us on v1): every kernel; only over idle offline work "
        "where the kernel has cpu.idle",
        "the offline parents, not pods (the kubelet owns pod quotas)",
        "lifted first, before the idle it needs, from the original in the state file",
        parent,
        [](const LeverInput& in, const Config& cfg) {
          // A quota throttles whatever runs below it: where the kernel has
          // cpu.idle, only offline work that is idle itself, never a group an
          // online waker would wait behind after each unthrottle.
          const bool allowed = !in.idle_supported || cfg.offline.idle;
          return allowed && (in.quota || (cfg.cpuset.throttle && in.cpuset));
        },
        [](const LeverInput& in, const Config& cfg, const OfflineTarget&, double share) -> std::optional<KnobValue> {
          return budget_to_quota(in.budget_cores * share, in.node_cpus, cfg.budget.cpu_max_period_us);
        },
    },
    {
        Lever::Memory,
        Knob::Memory,
        false,
        false,
        "memory.high: cgroup v2 with the memory controller; memory.limit_in_bytes: the v1 memory hierarchy "
        "(there a limit under what the group holds is refused with EBUSY when the kernel finds nothing to reclaim)",
        "the offline parents (YARN roots, the BestEffort QoS cgroup, offline.targets), not pods (the kubelet "
        "owns pod limits)",
        "the original limit from the state file",
        parent,
        [](const LeverInput& in, const Config& cfg) { return cfg.memory.enabled && in.memory_budget.has_value(); },
        [](const LeverInput& in, const Config& cfg, const OfflineTarget& t, double) -> std::optional<KnobValue> {
          if (!t.memory_known) return std::nullopt;  // not in the memory hierarchy
          auto [total, n] = parents_memory(in);
          return MemoryLimit{memory_share(*in.memory_budget, t.memory_used, total, n, cfg.memory)};
        },
    },
    {
        Lever::Burst,
        Knob::Burst,
        false,
        false,
        "cpu.max.burst (cpu.cfs_burst_us on v1): kernel 5.14+",
        "online pods whose waits were their own throttling (the self-throttled verdict) and that have a quota; "
        "the kubelet writes the pod's quota, never its burst",
        "the original burst from the state file (0 unless someone set one)",
        [](TargetKind k) { return k == TargetKind::OnlinePod; },
        [](const LeverInput& in, const Config& cfg) { return cfg.online.burst_share > 0 && !in.online.empty(); },
        [](const LeverInput&, const Config& cfg, const OfflineTarget& t, double) -> std::optional<KnobValue> {
          if (!t.quota || !t.quota->quota_us) return std::nullopt;  // no quota: nothing throttles it
          const auto q = *t.quota->quota_us;
          return CpuBurst{std::min(q, static_cast<uint64_t>(static_cast<double>(q) * cfg.online.burst_share))};
        },
    },
    {
        Lever::Backstop,
        Knob::Backstop,
        false,
        false,
        "memory.max: cgroup v2 with the memory controller (v1's memory.limit_in_bytes is hard already)",
        "YARN roots only: never a cgroup the kubelet owns (the BestEffort QoS cgroup, pods)",
        "the original memory.max from the state file",
        [](TargetKind k) { return k == TargetKind::YarnRoot; },
        [](const LeverInput& in, const Config& cfg) {
          return cfg.memory.enabled && cfg.memory.backstop && in.memory_v2 && in.memory_budget.has_value();
        },
        [](const LeverInput& in, const Config&, const OfflineTarget& t, double) -> std::optional<KnobValue> {
          auto it = in.memory_backstops.find(t.path);
          if (it == in.memory_backstops.end()) return std::nullopt;
          return MemoryMax{it->second};
        },
    },
    {
        Lever::Reclaim,
        Knob::Reclaim,
        false,
        false,
        "memory.reclaim: cgroup v2, kernel 5.19+; the v1 memory hierarchy: a pulse of memory.limit_in_bytes "
        "(lowered to the group's use less the bytes asked, put back at once; only where khagent holds the "
        "limit's original)",
        "the offline parents (YARN roots, the BestEffort QoS cgroup, offline.targets), never online cgroups",
        "nothing to undo: reclaimed pages are read back on demand; a pulse puts the limit back in the same call",
        parent,
        [](const LeverInput& in, const Config& cfg) {
          return cfg.memory.enabled && cfg.memory.reclaim && !in.reclaim_asks.empty();
        },
        [](const LeverInput& in, const Config&, const OfflineTarget& t, double) -> std::optional<KnobValue> {
          auto it = in.reclaim_asks.find(t.path);
          if (it == in.reclaim_asks.end() || it->second == 0) return std::nullopt;
          return MemoryReclaim{it->second};
        },
    },
    {
        Lever::OomGroup,
        Knob::OomGroup,
        false,
        false,
        "memory.oom.group: cgroup v2, kernel 4.19+ (v1 has none)",
        "YARN containers (the YARN roots' children), and only with memory.oom_group: true; never a pod",
        "the original memory.oom.group from the state file",
        [](TargetKind k) { return k == TargetKind::YarnContainer; },
        [](const LeverInput& in, const Config& cfg) {
          return cfg.memory.enabled && cfg.memory.oom_group && in.memory_v2 && !in.containers.empty();
        },
        [](const LeverInput&, const Config&, const OfflineTarget&, double) -> std::optional<KnobValue> {
          return MemoryOomGroup{true};
        },
    },
    {
        Lever::IoLimit,
        Knob::IoLimit,
        false,
        false,
        "io.max: cgroup v2 with the io controller enabled above the target (blk-throttle, any IO scheduler); not "
        "on a hybrid host, whose v1 blk-throttle is flat (a parent's limit misses its children's tasks)",
        "the offline target the IO controller names for an online pod's IO stall, on the device that pod used; "
        "never an online cgroup, never a device no stalled online pod used",
        "that device's original line from the state file (no limit, usually); the other devices' lines are "
        "never touched",
        [](TargetKind k) { return k != TargetKind::OnlinePod && k != TargetKind::YarnContainer; },
        [](const LeverInput& in, const Config& cfg) { return cfg.io.enabled && cfg.io.limit && !in.io_limits.empty(); },
        [](const LeverInput& in, const Config&, const OfflineTarget& t, double) -> std::optional<KnobValue> {
          auto it = in.io_limits.find(t.path);
          if (it == in.io_limits.end()) return std::nullopt;
          return it->second;
        },
    },
}};

}  // namespace

std::span<const LeverSpec> lever_table() { return kTable; }

const LeverSpec& lever_spec(Lever l) {
  for (const auto& s : kTable)
    if (s.lever == l) return s;
  return kTable.front();  // unreachable: every Lever has an entry (levers_test checks)
}

bool rung_in_force(Lever l, const Config& cfg, const LadderState& st) {
  return lever_on(st, l) || (l == Lever::Cpuset && cfg.cpuset.enabled) ||
         std::find(cfg.ladder.always.begin(), cfg.ladder.always.end(), l) != cfg.ladder.always.end();
}

std::vector<std::pair<Lever, bool>> levers_in_force(const LeverInput& in, const Config& cfg) {
  std::vector<std::pair<Lever, bool>> out;
  out.reserve(kTable.size());
  for (const auto& s : kTable) out.emplace_back(s.lever, s.in_force(in, cfg));
  return out;
}

std::vector<Setting> lever_writes(const LeverInput& in, const Config& cfg, std::span<const Lever> only) {
  // The budget is split by recent use between the parents, each keeping a
  // small share.
  double total = 0;
  size_t parents = 0;
  for (const auto& t : in.targets)
    if (parent(t.kind)) {
      total += t.usage_cores;
      parents++;
    }
  std::vector<Setting> want;
  auto add = [&](const OfflineTarget& t, double share) {
    for (const auto& s : kTable) {
      if (in.budget_only && !s.carries_budget) continue;
      if (std::find(only.begin(), only.end(), s.lever) == only.end()) continue;
      if (!s.touches(t.kind) || !s.in_force(in, cfg)) continue;
      if (auto v = s.value(in, cfg, t, share)) want.push_back({t.path, std::move(*v), s.lever});
    }
  };
  for (const auto& t : in.online) add(t, 0);
  for (const auto& t : in.containers) add(t, 0);
  for (const auto& t : in.targets)
    add(t, parents == 1 ? 1.0
           : total > 0  ? std::max(t.usage_cores / total, 0.1)
                        : 1.0 / static_cast<double>(std::max<size_t>(parents, 1)));
  return want;
}

namespace {

// The memory lever's files, in words.
std::string memory_summary(const MemoryConfig& m, bool v2) {
  if (!m.enabled) return "";
  std::vector<std::string> files = {v2 ? "memory.high" : "memory.limit_in_bytes"};
  if (v2 && m.backstop) files.emplace_back("memory.max backstop on YARN roots");
  if (v2 && m.oom_group) files.emplace_back("memory.oom.group on YARN containers");
  if (m.reclaim) files.emplace_back(v2 ? "memory.reclaim while online refaults" : "limit pulses while online refaults");
  return fmt::format("; offline memory limited to the memory budget ({}){}", fmt::join(files, ", "),
                     !v2 && m.oom_group ? "; memory.oom_group needs cgroup v2's memory controller: not written" : "");
}

}  // namespace

std::string levers_summary(const Config& cfg, bool idle_supported, bool memory_v2) {
  std::string base = cfg.offline.idle ? (idle_supported ? "cpu.idle=1" : "minimum weight (no cpu.idle in this kernel)")
                     : cfg.offline.weight ? fmt::format("cpu.weight {}", cfg.offline.weight)
                                          : "no idle lever";
  LadderState none;
  std::vector<std::string> always;
  for (Lever l : kAllLevers)
    if (lever_is_rung(l) && rung_in_force(l, cfg, none)) always.emplace_back(lever_name(l));
  return fmt::format("{} on offline targets{}{}; ladder [{}] on a lasting breach", base,
                     always.empty() ? "" : fmt::format(", {} always", fmt::join(always, " and ")),
                     fmt::format("{}{}", memory_summary(cfg.memory, memory_v2),
                                 cfg.online.burst_share > 0
                                     ? fmt::format("; CPU burst {:.0f}% of the quota for self-throttled online pods",
                                                   cfg.online.burst_share * 100)
                                     : ""),
                     fmt::join(cfg.ladder.rungs | std::views::transform([](Lever l) { return lever_name(l); }), ", "));
}

}  // namespace khagent
