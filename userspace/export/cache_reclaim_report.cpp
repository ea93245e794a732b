// The reclaim controller's report: each step asked, with what online
// refaulted, and each step's verdict.
#include <spdlog/spdlog.h>

#include "khagent/export/controller_reports.h"
#include "khagent/util/bytes.h"

namespace khagent {

namespace {

std::string window_text(const CacheReclaimWindow& w) {
  return fmt::format("{:.1f} MiB/s refaulted, {:.1f}% stalled", w.refault_rate / 1048576.0, w.stall_share * 100);
}

}  // namespace

void ReportExporter::operator()(const CacheReclaimReport& r) {
  if (metrics_) metrics_->record_cache_reclaim(r);
  if (r.verdict) {
    const auto& after = r.window.value_or(CacheReclaimWindow{});
    if (*r.verdict == CacheReclaimVerdict::Helped)
      spdlog::info("memory reclaim helped: online pods {} before the step, {} after", window_text(r.before),
                   window_text(after));
    else
      spdlog::warn("memory reclaim {}: online pods {} before the step, {} after; the next step waits {} interval{}",
                   *r.verdict == CacheReclaimVerdict::Costly ? "cost online more stall than it saved" : "did not help",
                   window_text(r.before), window_text(after), r.backoff, r.backoff == 1 ? "" : "s");
  }
  if (!r.asks.empty()) {
    std::string asks;
    for (const auto& [path, bytes] : r.asks) asks += (asks.empty() ? "" : ", ") + mib_text(bytes) + " of " + path;
    spdlog::info("memory reclaim: asking {} (offline inactive page cache {}): online pods {} over the last {:.1f} s",
                 asks, mib_text(r.offline_inactive), window_text(r.window.value_or(CacheReclaimWindow{})),
                 r.window ? r.window->seconds : 0.0);
  } else if (r.idle == CacheReclaimIdle::NoCounters && warned_.allow("reclaim-counters", now_ns_)) {
    spdlog::warn(
        "memory reclaim: no online pod's memory.stat has workingset_refault_file (kernels before 5.9; v1 before "
        "6.1): proactive reclaim of offline page cache is off");
  } else if (r.idle == CacheReclaimIdle::NoCache && warned_.allow("reclaim-nocache", now_ns_)) {
    spdlog::info("memory reclaim: online pods {}, but the offline parents hold no inactive page cache to ask for",
                 window_text(r.window.value_or(CacheReclaimWindow{})));
  }
}

}  // namespace khagent
