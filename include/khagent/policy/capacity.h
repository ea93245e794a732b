// Offline capacity for the cluster: the offline budget split between the
// YARN NodeManager and Kubernetes batch pods, and when the batch share is
// published to the node's status (docs/capacity.md). Pure: no files, no
// sockets, no clocks (the caller passes `now_ns`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "khagent/config/config.h"
#include "khagent/model/capacity_status.h"
#include "khagent/policy/yarn.h"

namespace khagent {

// What one side (YARN containers, or batch pods) uses now, for the usage
// rule: CPU cores over the last tick.
struct SideUse {
  double yarn_cores = 0;
  double batch_cores = 0;
};

// The offline budget, split. yarn + batch == the budget for each resource
// (memory: when there is a memory budget).
struct CapacitySplit {
  double budget_cores = 0;
  double batch_share = 0;  // of the budget, before the floor
  double yarn_cores = 0;
  double batch_cores = 0;
  bool cpu_floored = false;  // batch got the floor rather than its share
  std::optional<uint64_t> budget_memory;
  std::optional<uint64_t> yarn_memory;
  std::optional<uint64_t> batch_memory;
  bool memory_floored = false;
};

// What each side uses now: YARN's containers, and the rest of the offline
// class (batch pods).
SideUse side_use(const NodeSignals& node);

// The share batch pods get: `batch_share` (fixed), their part of what both
// sides use clamped to [min_share, 1 - min_share] (usage; batch_share when
// neither uses anything), or all of it without YARN. While no online pod
// is over its target (`offer.online_breach`), batch gets at least the floor
// (or the whole budget when it is smaller), taken from YARN's part.
CapacitySplit split_budget(const YarnOffer& offer, const SideUse& use, bool with_yarn, const CapacityConfig& cfg);

// The offer YARN gets: `offer` with each budget replaced by what is left
// of it after batch's part or the value the node holds for batch, the
// larger (the published value may lag the split within the deadband), so
// that YARN's part plus batch's never exceed the budget.
YarnOffer yarn_part(const YarnOffer& offer, const CapacitySplit& split, const BatchQuantity& held);

// Batch's part as node resources: whole milli-cores, memory in whole MiB,
// both rounded down.
BatchQuantity batch_quantity(const CapacitySplit& s);
// The whole budget as node resources: the most batch may ever hold.
BatchQuantity batch_most(const CapacitySplit& s);

enum class PublishAction {
  Hold,          // the published value stands (within the deadband)
  First,         // nothing published yet
  Shrink,        // lower by more than the deadband: at once
  Grow,          // higher for grow_stable: by the lowest value seen meanwhile
  WaitStable,    // higher, not for long enough yet
  WaitInterval,  // higher for long enough, but a grow was published less than grow_interval ago
  Reassert,      // the node does not show what was published (zeroed, removed, changed)
  Stale,         // the offer is old: the last published value stands
  Unknown,       // no budget for this resource: the last published value stands
};
const char* publish_action_name(PublishAction a);

struct PublishInput {
  uint64_t now_ns = 0;
  bool stale = false;    // the offer is older than stale_after
  BatchQuantity target;  // what the budget asks for now (memory < 0: no memory budget)
  BatchQuantity most;    // the whole budget: a published value above it moves at once
  // What the node showed when read this round (none: not read): a resource
  // it lacks, or whose capacity and allocatable differ, as -1.
  std::optional<BatchQuantity> on_node;
};

struct PublishState {
  std::optional<BatchQuantity> published;  // what the node was last patched to
  struct Grow {
    bool pending = false;
    uint64_t since_ns = 0;
    int64_t min = 0;  // lowest target since
  };
  Grow cpu, memory;
  uint64_t last_grow_ns = 0;  // 0 = never
};

struct PublishDecision {
  bool patch = false;
  BatchQuantity value;  // what the node should show (the patch, when `patch`)
  PublishAction cpu = PublishAction::Hold;
  PublishAction memory = PublishAction::Hold;
};

// One step for both resources; `state.published` is set when `patch`
// (the caller puts back the state from before on a failed PATCH).
PublishDecision publish_step(const PublishInput& in, const CapacityConfig& cfg, PublishState& state);

// One tick's capacity: the split, batch's value and YARN's offer.
struct CapacityPlan {
  CapacitySplit split;
  BatchQuantity target;                                // batch's part now
  PublishDecision publish;                             // publish.value: what the node is to show
  YarnOffer yarn;                                      // YARN's part of the offer
  std::optional<BudgetTerms> cpu_terms, memory_terms;  // the offer's
  std::string explanation;                             // of publish.value (capacity_explanation)
};

// Keeps the publishing state between ticks.
class CapacityPlanner {
 public:
  CapacityPlanner(const CapacityConfig& cfg, bool with_yarn) : cfg_(cfg), with_yarn_(with_yarn) {}
  // `on_node`: what the node showed, if it was read since the last call.
  CapacityPlan plan(const YarnOffer& offer, const SideUse& use, uint64_t now_ns,
                    std::optional<BatchQuantity> on_node = std::nullopt);
  const PublishState& state() const { return state_; }

 private:
  CapacityConfig cfg_;
  bool with_yarn_;
  PublishState state_;
};

// The explanation published with a value, in one line:
//   "batch-cpu 1500m: capacity 8.00 - online 3.50 - reserve 1.00 - margin 0.50 = budget 3.00 cores,
//    batch 50% = 1.50 (yarn 1.50); batch-memory 2048Mi: ..."
std::string capacity_explanation(const YarnOffer& offer, const CapacitySplit& split, const BatchQuantity& q);

}  // namespace khagent
