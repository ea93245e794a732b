// The isolation controller: a pure function of signals, configuration and its
// previous state. It decides the offline CPU budget (AIMD with a deadband,
// floor, ceiling and rate limits). No files, no sockets, no clocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "khagent/config/config.h"
#include "khagent/model/cgroup_value.h"
#include "khagent/signals/fast_events.h"
#include "khagent/signals/online_load.h"
#include "khagent/signals/workload.h"

namespace khagent {

struct ControllerInput {
  uint64_t now_ns = 0;  // monotonic
  double node_cpus = 0;
  double online_cpu_cores = 0;  // usage over the last tick
  double offline_cpu_cores = 0;
  std::vector<OnlinePodLoad> online_pods;
  std::vector<FastEvent> fast_events;  // since the last step
};

// The input of a tick: the node's usage by class and its online pods' waits.
ControllerInput controller_input(const NodeSignals& node, double node_cpus, uint64_t now_ns);

enum class PodVerdictKind { Ok, FewSamples, Breach, SelfThrottled };
const char* verdict_name(PodVerdictKind k);

struct PodVerdict {
  std::string uid;
  std::string path;
  PodVerdictKind kind = PodVerdictKind::Ok;
  double wait_p99_us = 0;
  double offline_share = 0;    // of its wait
  double throttled_share = 0;  // of its wait
  std::string why;
};

// One pod's verdict over the last tick.
PodVerdict judge_pod(const OnlinePodLoad& p, const OnlineConfig& o);

struct ControllerState {
  bool initialized = false;
  double budget_cores = 0;  // last decided (and applied) budget
  uint64_t last_breach_ns = 0;
  uint64_t last_decrease_ns = 0;
  uint64_t last_increase_ns = 0;
};

enum class BudgetAction { Hold, Init, Decrease, Increase, Ceiling, Floor };
const char* action_name(BudgetAction a);

struct Decision {
  double budget_cores = 0;  // the offline CPU budget to apply
  double ceiling_cores = 0;
  double floor_cores = 0;
  bool changed = false;  // differs from the previous budget (beyond the deadband)
  BudgetAction action = BudgetAction::Hold;
  std::string reason;                // one line for the log
  std::vector<PodVerdict> verdicts;  // every online pod with enough samples
  uint64_t fast_breaches = 0;        // fast-path events acted on
};

// One step. `state` is updated in place (it is the controller's memory).
Decision controller_step(const ControllerInput& in, const Config& cfg, ControllerState& state);

// The budget as a CPU quota per period (at least 1000 us, the kernel's
// minimum), or no limit when the budget covers the whole node.
CpuQuota budget_to_quota(double budget_cores, double node_cpus, uint64_t period_us);

}  // namespace khagent
