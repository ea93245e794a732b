// The online burst controller's report: which pods got a burst, which were
// refused one and why.
#include <spdlog/spdlog.h>

#include "khagent/export/controller_reports.h"

namespace khagent {

void ReportExporter::operator()(const BurstReport& r) {
  for (const auto& n : r.notes) {
    switch (n.kind) {
      case BurstNote::Kind::NotActed:
        if (warned_.allow("quota " + n.path, now_ns_))
          spdlog::warn("online {}: {} (not acted on: {})", n.path, n.why,
                       n.lever_off ? "online.burst_share is 0" : "not a pod's cgroup");
        break;
      case BurstNote::Kind::Given:
        spdlog::info("online {}: {}; CPU burst of {:.0f}% of its quota on the pod and its containers", n.path, n.why,
                     r.share * 100);
        break;
      case BurstNote::Kind::StillThrottled:
        if (warned_.allow("quota " + n.path, now_ns_))
          spdlog::warn(
              "online {}: {} with its CPU burst in place (a burst lends only what earlier periods left unused: a "
              "pod busy at its limit needs a larger limit)",
              n.path, n.why);
        break;
      case BurstNote::Kind::NoBurstFile:
        if (warned_.allow("no burst", now_ns_))
          spdlog::warn("CPU burst: {} has no burst file (kernels before 5.14): no burst for it", n.path);
        break;
      case BurstNote::Kind::Foreign:
        if (warned_.allow("foreign burst " + n.path, now_ns_))
          spdlog::info("CPU burst: {} already has a burst of {} us that khagent did not write: left alone", n.path,
                       n.burst_us);
        break;
    }
  }
  if (metrics_ && r.share > 0) metrics_->record_burst(r.pods, r.cgroups);
}

}  // namespace khagent
