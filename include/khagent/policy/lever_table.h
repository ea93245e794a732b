// The lever table: one entry per lever (model/lever.h) saying what it
// writes as a typed value, on which offline targets, when it is in force,
// where the kernel has it and how it is undone. lever_writes(), the
// ladder, the agent's logs and the metrics read it; adding a lever is one
// entry here, its tests, and (for a rung) its name in model/lever.h.
// Pure functions of plain data, no files.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "khagent/config/config.h"
#include "khagent/model/cgroup_value.h"
#include "khagent/policy/ladder.h"
#include "khagent/policy/targets.h"

namespace khagent {

// What the agent knows this step, for every lever.
struct LeverInput {
  std::vector<OfflineTarget> targets;
  bool idle_supported = true;          // the kernel has cpu.idle (5.15+)
  bool cpuset = false;                 // the cpuset rung (or cpuset.enabled) is in force
  bool quota = false;                  // the quota rung is in force
  std::optional<CpuSet> offline_cpus;  // the cpuset partition; none: none could be made
  double budget_cores = 0;
  double node_cpus = 0;
  bool budget_only = false;  // the fast path: only the levers that carry the budget
  // The offline memory budget (policy/memory.h); none: the memory lever is
  // off, or the node has no memory controller to write.
  std::optional<uint64_t> memory_budget;
  bool memory_v2 = false;  // the memory controller is cgroup v2's (memory.max, memory.reclaim)
  // The backstop of each YARN root (policy/memory.h: memory_backstop), by
  // path; a root not listed gets none this step.
  std::map<std::string, uint64_t> memory_backstops;
  // Offline page cache to reclaim now, by parent (policy/reclaim_controller.h).
  std::map<std::string, uint64_t> reclaim_asks;
  // Online pods that get CPU burst (TargetKind::OnlinePod, with their quota).
  std::vector<OfflineTarget> online;
  // YARN containers that get memory.oom.group (TargetKind::YarnContainer).
  std::vector<OfflineTarget> containers;
  // The IO limit on each offline cgroup the IO controller limits, by path
  // (policy/io_controller.h).
  std::map<std::string, IoLimit> io_limits;
};

struct LeverSpec {
  Lever lever;
  Knob knob;             // what it writes (the idle lever: cpu.weight where the kernel has no cpu.idle)
  bool carries_budget;   // moves with the CPU budget, on the fast path too
  bool needs_spare_cpu;  // as a rung: only where a CPU can be left to online
  const char* kernels;   // where it applies (docs, logs)
  const char* where;     // the targets it may touch (docs)
  const char* undo;      // how it is undone
  bool (*touches)(TargetKind k);
  // Whether it is in force, whatever the target.
  bool (*in_force)(const LeverInput& in, const Config& cfg);
  // Its value on one target it touches, `share` being that target's part of
  // the budget; none: nothing to write there.
  std::optional<KnobValue> (*value)(const LeverInput& in, const Config& cfg, const OfflineTarget& t, double share);
};

// Every lever, in the order their values are listed for a target.
std::span<const LeverSpec> lever_table();
const LeverSpec& lever_spec(Lever l);

// Whether a rung is in force: on the ladder now, or configured always
// (ladder.always; cpuset.enabled for the cpuset).
bool rung_in_force(Lever l, const Config& cfg, const LadderState& st);
// Each lever and whether it is in force (for the metrics).
std::vector<std::pair<Lever, bool>> levers_in_force(const LeverInput& in, const Config& cfg);

// The typed values to write, every target and lever in force included.
// Rules (the table's entries):
//   - idle: cpu.idle=1 on YARN roots, BestEffort pods and configured
//     targets, never on a cgroup whose weight the kubelet owns (the QoS
//     cgroup: an idle cgroup refuses weight writes, and the kubelet fails to
//     start); without cpu.idle in the kernel, the minimum weight where
//     khagent owns the weight;
//   - weight: offline.weight where khagent owns the weight, when idle is off;
//   - cpuset: the partition on the parents (not on pods), on the cpuset rung;
//   - quota: the budget, split by recent use, on the parents, only over
//     idle offline work (or where the kernel has no cpu.idle), on the quota
//     rung or on the cpuset rung with cpuset.throttle; never on pods;
//   - memory: the memory budget split between the parents (memory_share),
//     whenever there is a budget; never on pods;
//   - burst: online.burst_share of the quota, on the online pods listed
//     (in.online), those with a quota;
//   - backstop: memory.max on YARN roots (v2 only), the value decided for
//     each (in.memory_backstops), never on a cgroup the kubelet owns;
//   - reclaim: the bytes asked of each offline parent (in.reclaim_asks):
//     memory.reclaim on v2, a limit pulse on v1;
//   - oom_group: memory.oom.group=1 on the YARN containers listed
//     (in.containers), v2 only, when memory.oom_group allows it;
//   - io_limit: the IO limit of each offline target listed
//     (in.io_limits), one device each, when io.limit allows it.
// `only`: the levers whose values are wanted (a controller's own).
std::vector<Setting> lever_writes(const LeverInput& in, const Config& cfg, std::span<const Lever> only = kAllLevers);

// One line for the start-up log: the base lever, the rungs always in force,
// the memory files written (`memory_v2`: the memory controller is cgroup
// v2's; a v2-only setting asked for on v1 is said to be left unwritten) and
// the ladder.
std::string levers_summary(const Config& cfg, bool idle_supported, bool memory_v2);

}  // namespace khagent
