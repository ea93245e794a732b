// Proactive reclaim of offline page cache: steps asked and their verdicts,
// bytes asked, and the pace (the families appear on the first call).
#include <array>

#include "metrics_parts.h"

namespace khagent::metrics {

namespace {

enum ReclaimFamily : size_t { kSteps, kBytes, kPace, kNrReclaimFamilies };
constexpr std::array<FamilySpec, kNrReclaimFamilies> kReclaimFamilies = {{
    {kSteps,
     "khagent_memory_proactive_reclaim_steps_total",
     MetricType::Counter,
     {"outcome"},
     "Steps of proactive reclaim of offline page cache while online pods refaulted: asked, and each step's "
     "verdict over the next memory.reclaim_interval (helped: online refaults fell; useless: they did not; "
     "costly: online stalled more)"},
    {kBytes,
     "khagent_memory_proactive_reclaim_asked_bytes_total",
     MetricType::Counter,
     {},
     "Offline page cache asked of the offline parents by proactive reclaim (memory.reclaim, a v1 limit pulse)"},
    {kPace,
     "khagent_memory_proactive_reclaim_pace",
     MetricType::Gauge,
     {},
     "The pace of proactive reclaim: at most one step per memory.reclaim_interval times this (1 after a step "
     "that helped, up to 32 while steps do not)"},
}};
static_assert(rows_in_order(kReclaimFamilies));

}  // namespace

void CacheReclaimMetrics::record(const CacheReclaimReport& r) {
  if (!bytes_) {
    TableFamily<Counter> steps(r_, kReclaimFamilies[kSteps]);
    steps_[0] = &steps.add({"asked"});
    steps_[1] = &steps.add({cache_reclaim_verdict_name(CacheReclaimVerdict::Helped)});
    steps_[2] = &steps.add({cache_reclaim_verdict_name(CacheReclaimVerdict::Useless)});
    steps_[3] = &steps.add({cache_reclaim_verdict_name(CacheReclaimVerdict::Costly)});
    TableFamily<Counter> bytes(r_, kReclaimFamilies[kBytes]);
    bytes_ = &bytes.add({});
    TableFamily<Gauge> pace(r_, kReclaimFamilies[kPace]);
    pace_ = &pace.add({});
  }
  if (!r.asks.empty()) steps_[0]->Increment();
  for (const auto& [path, bytes] : r.asks) bytes_->Increment(static_cast<double>(bytes));
  if (r.verdict) steps_[1 + static_cast<size_t>(*r.verdict)]->Increment();
  pace_->Set(static_cast<double>(r.backoff));
}

}  // namespace khagent::metrics
