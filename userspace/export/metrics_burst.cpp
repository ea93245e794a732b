// Online pods and CPU burst: those given one because their waits were their
// own throttling, those self-throttled, and those refused one, by why (the
// families appear on the first call).
#include <array>

#include "metrics_parts.h"

namespace khagent::metrics {

namespace {

enum BurstFamily : size_t { kBurst, kRefused, kNrBurstFamilies };
constexpr std::array<FamilySpec, kNrBurstFamilies> kBurstFamilies = {{
    {kBurst,
     "khagent_online_burst",
     MetricType::Gauge,
     {"what"},
     "Online pods given CPU burst because their waits were their own throttling (what=\"pods\"), "
     "their cgroups with a quota that carry it (what=\"cgroups\"), and the online pods judged self-throttled "
     "over online.self_throttle_window at the last tick (what=\"self_throttled\")"},
    {kRefused,
     "khagent_online_burst_refused",
     MetricType::Gauge,
     {"reason"},
     "Online pods judged self-throttled with no CPU burst of khagent's at the last tick, by why: lever_off "
     "(online.burst_share 0), "
     "not_a_pod, no_quota (an ancestor's quota throttles it), no_burst_file (kernel before 5.14), foreign_burst "
     "(a burst khagent did not write)"},
}};
static_assert(rows_in_order(kBurstFamilies));

}  // namespace

void BurstMetrics::record(const BurstReport& r) {
  if (!pods_) {
    TableFamily<Gauge> f(r_, kBurstFamilies[kBurst]);
    pods_ = &f.add({"pods"});
    cgroups_ = &f.add({"cgroups"});
    self_throttled_ = &f.add({"self_throttled"});
    TableFamily<Gauge> refused(r_, kBurstFamilies[kRefused]);
    for (size_t i = 1; i < kNrBurstRefusals; i++)
      refused_[i] = &refused.add({refusal_name(static_cast<BurstPod::Refusal>(i))});
  }
  std::array<size_t, kNrBurstRefusals> refused{};
  size_t self_throttled = 0;
  for (const auto& p : r.online) {
    self_throttled += p.verdict == BurstPod::Verdict::SelfThrottled;
    if (p.burst == BurstPod::Burst::Refused) refused[static_cast<size_t>(p.refusal)]++;
  }
  pods_->Set(static_cast<double>(r.pods));
  cgroups_->Set(static_cast<double>(r.cgroups));
  self_throttled_->Set(static_cast<double>(self_throttled));
  for (size_t i = 1; i < kNrBurstRefusals; i++) refused_[i]->Set(static_cast<double>(refused[i]));
}

}  // namespace khagent::metrics
