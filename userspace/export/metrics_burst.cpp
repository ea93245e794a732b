// Online pods given CPU burst because their waits were their own throttling
// (the family appears on the first call).
#include <array>

#include "metrics_parts.h"

namespace khagent::metrics {

namespace {

enum BurstFamily : size_t { kBurst, kNrBurstFamilies };
constexpr std::array<FamilySpec, kNrBurstFamilies> kBurstFamilies = {{
    {kBurst,
     "khagent_online_burst",
     MetricType::Gauge,
     {"what"},
     "Online pods given CPU burst because their waits were their own throttling (what=\"pods\"), "
     "and their cgroups with a quota that carry it (what=\"cgroups\")"},
}};
static_assert(rows_in_order(kBurstFamilies));

}  // namespace

void BurstMetrics::record(size_t pods, size_t cgroups) {
  if (!pods_) {
    TableFamily<Gauge> f(r_, kBurstFamilies[kBurst]);
    pods_ = &f.add({"pods"});
    cgroups_ = &f.add({"cgroups"});
  }
  pods_->Set(static_cast<double>(pods));
  cgroups_->Set(static_cast<double>(cgroups));
}

}  // namespace khagent::metrics
