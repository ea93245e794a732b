// The actuator's results: each value it handled, by cgroup file and outcome.
#include <array>

#include "khagent/actuate/actuator.h"
#include "metrics_parts.h"

namespace khagent::metrics {

namespace {

enum ActionFamily : size_t { kActions, kNrActionFamilies };
constexpr std::array<FamilySpec, kNrActionFamilies> kActionFamilies = {{
    {kActions,
     "khagent_actions_total",
     MetricType::Counter,
     {"file", "outcome"},
     "Values the actuator handled, by cgroup file and outcome"},
}};
static_assert(rows_in_order(kActionFamilies));

}  // namespace

ActionMetrics::ActionMetrics(prometheus::Registry& r) : actions_(r, kActionFamilies[kActions]) {}

void ActionMetrics::record(const std::vector<ActionRecord>& recs) {
  // Bounded: 10 files x 8 outcomes. Add() returns the existing series.
  for (const auto& r : recs) actions_.add({cgroup_file_name(r.file), outcome_name(r.outcome)}).Increment();
}

}  // namespace khagent::metrics
