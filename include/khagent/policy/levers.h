// Which levers restrain the offline side, and where each one is written.
// Pure functions of plain data, no files.
//
// Measured on a real 6.18 kernel (docs/controller.md): cpu.idle on the
// offline side gave the best online tail and left offline all the spare
// CPU; a quota alone made the tail worse (after each unthrottle the offline
// group runs ahead of online wakers); a cpuset split helped but halved
// offline. So cpu.idle is the base lever, always on, and the others are
// rungs of a ladder climbed only while an online pod stays in breach, each
// step checked against the waits behind offline before it and undone when
// it did not help.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "khagent/config/config.h"
#include "khagent/model/cgroup_file.h"

namespace khagent {

// An offline cgroup khagent writes, and what owns its weight.
enum class TargetKind {
  YarnRoot,       // the YARN hierarchy root: the NodeManager writes its children only
  BestEffortQos,  // kubepods-besteffort: the kubelet writes its cpu.shares/cpu.weight
  BestEffortPod,  // a BestEffort pod: the kubelet writes its shares once, at creation
  Configured,     // offline.targets
};
const char* target_kind_name(TargetKind k);

struct OfflineTarget {
  std::string path;  // relative to the cgroup2 mount
  TargetKind kind = TargetKind::Configured;
  double usage_cores = 0;  // last tick
};

// Existing cgroups that could be targets, found by the agent; the policy
// decides which are.
struct TargetCandidates {
  std::vector<std::string> configured;       // offline.targets, confined, existing
  std::vector<std::string> besteffort_qos;   // existing BestEffort QoS cgroups
  std::vector<std::string> besteffort_pods;  // pod cgroups below them
  std::vector<std::string> yarn_roots;       // existing YARN hierarchy roots
};
std::vector<OfflineTarget> select_targets(const TargetCandidates& c, const OfflineConfig& cfg);

// What the agent wants written this step.
struct LeverInput {
  std::vector<OfflineTarget> targets;
  bool idle_supported = true;  // the kernel has cpu.idle (5.15+)
  bool cpuset = false;         // the cpuset rung (or cpuset.enabled) is on
  bool quota = false;          // the quota rung is on
  std::string offline_cpus;    // the partition for cpuset ("" = none could be made)
  double budget_cores = 0;
  double node_cpus = 0;
};
// The v2 values to write, every target included. Rules:
//   - cpu.idle=1 on YARN roots, BestEffort pods and configured targets, never
//     on a cgroup whose weight the kubelet owns (the QoS cgroup: an idle
//     cgroup refuses weight writes, and the kubelet fails to start);
//     without cpu.idle, the minimum weight where khagent owns the weight;
//   - a quota (cpu.max) only on targets whose offline tasks are idle, and
//     only on the quota rung (or with a partition that could not be made
//     while cpuset.throttle is set); never on pods;
//   - cpuset.cpus on the cpuset rung, on the parents (not on pods).
std::vector<DesiredValue> offline_writes(const LeverInput& in, const Config& cfg);

// The ladder above the base lever.
struct LadderInput {
  uint64_t now_ns = 0;
  bool breach = false;           // an online pod in breach this tick (or a fast-path event)
  double offline_wait_rate = 0;  // online waits behind offline, ns per second, this tick
  bool can_cpuset = true;        // a partition can be made on this node
};

enum class LadderAction { Hold, Escalate, Kept, Undone, Relaxed, Skipped };
const char* ladder_action_name(LadderAction a);

struct LadderState {
  std::vector<Lever> active;     // rungs in force, in the order they were added
  uint64_t breach_since_ns = 0;  // 0: not in breach
  uint64_t last_breach_ns = 0;
  uint64_t last_step_ns = 0;
  bool verifying = false;                           // a step waits for its verdict
  double before_rate = 0;                           // offline wait rate over the window before the step
  std::deque<std::pair<uint64_t, double>> history;  // (time, rate), one verify window
  std::map<std::string, uint64_t> blocked_until;    // lever name -> no retry before
};

struct LadderDecision {
  size_t level = 0;  // rungs in force after this step
  bool changed = false;
  LadderAction action = LadderAction::Hold;
  std::string lever;       // the rung stepped onto, off or checked
  double before_rate = 0;  // for a verdict: ns/s behind offline before and after
  double after_rate = 0;
  std::string reason;
};

LadderDecision ladder_step(const LadderInput& in, const LadderConfig& cfg, LadderState& st);
// Whether `lever` is among the rungs in force.
bool lever_on(const LadderState& st, Lever lever);

}  // namespace khagent
