// The memory controller's report: problems reading the node, OOM kills,
// online stalls, the node's critical state and the budget's moves.
#include <spdlog/spdlog.h>

#include "khagent/export/controller_reports.h"
#include "khagent/util/bytes.h"

namespace khagent {

namespace {

void log_events(const MemoryReport& r) {
  for (const auto& [p, n] : r.events.online_killed)
    spdlog::error(
        "online {}: {} process{} taken by the kernel's OOM killer since the last tick (offline working set {}, "
        "budget {})",
        p, n, n == 1 ? "" : "es", mib_text(r.input.offline_used), mib_text(r.decision.budget));
  if (r.events.offline_oom_kills)
    spdlog::info("offline: {} OOM kill{} inside the offline parents since the last tick", r.events.offline_oom_kills,
                 r.events.offline_oom_kills == 1 ? "" : "s");
}

void log_decision(const MemoryReport& r) {
  const MemoryInput& in = r.input;
  const MemoryDecision& d = r.decision;
  if (spdlog::should_log(spdlog::level::debug))  // its strings are built each tick otherwise
    spdlog::debug(
        "memory: capacity {}, in use {} (working sets {}), offline {} (working set {}); stall {:.0f}%{}{} -> budget "
        "{}{}",
        mib_text(in.capacity), mib_text(in.node_usage), mib_text(in.node_used), mib_text(in.offline_usage),
        mib_text(in.offline_used), in.online_stall_share * 100,
        in.stall_trigger ? ", trigger on " + *in.stall_trigger : "",
        in.stall_own_limit ? ", at its own limit: " + *in.stall_own_limit : "", mib_text(d.budget),
        d.stalled ? " (stall cut)" : "");
  if (r.critical_began)
    spdlog::warn("node memory critical: {}; {}", d.critical.value_or(""),
                 r.yarn_last_resort
                     ? "the highest-ranked YARN container that holds memory goes at once (yarn.memory_emergency)"
                     : "no YARN last resort (no YARN, or yarn.reclaim / yarn.memory_emergency off)");
  else if (r.critical_ended) spdlog::info("node memory no longer critical");
  if (d.changed) spdlog::info("memory budget {} for offline: {}", mib_text(d.budget), d.reason);
}

}  // namespace

void ReportExporter::operator()(const MemoryReport& r) {
  for (const auto& p : r.problems)
    if (warned_.allow(p.what, now_ns_)) spdlog::warn("memory of {}: {}", p.what, p.error.str());
  if (r.tick) {
    log_events(r);
    if (metrics_) metrics_->record_memory_events(r.events);
    if (metrics_ && r.stall) metrics_->record_memory_stall(*r.stall);
    if (r.stall_unreadable && warned_.allow("psi", now_ns_))
      spdlog::warn(
          "no online pod's memory.pressure is readable (a kernel without PSI, or psi=0): the cut on an online "
          "memory stall is off");
  }
  for (const auto& [path, bytes] : r.backstop_foreign)
    if (warned_.allow("backstop " + path, now_ns_))
      spdlog::warn("memory.max of {} is {}, set by someone else: no backstop written there (left alone)", path,
                   mib_text(bytes));
  if (!r.decided) return;
  log_decision(r);
  if (metrics_) metrics_->record_memory(r.input, r.decision);
}

}  // namespace khagent
