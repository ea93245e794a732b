// The CPU controller's report: the budget line, the ladder's steps, the
// levers in force and the cpuset partition's problems.
#include <spdlog/spdlog.h>

#include "khagent/export/agent_log.h"
#include "khagent/export/controller_reports.h"

namespace khagent {

void ReportExporter::operator()(const CpuReport& r) {
  const Decision& d = r.decision;
  if (metrics_) metrics_->record_decision(d);
  if (!r.tick) return;
  if (metrics_) {
    std::vector<std::pair<std::string, bool>> act;
    act.reserve(r.in_force.size());
    for (auto [l, on] : r.in_force) act.emplace_back(lever_name(l), on);
    metrics_->record_levers(act);
  }
  if (r.ladder && r.ladder->action != LadderAction::Hold) {
    const LadderDecision& ld = *r.ladder;
    const bool verdict = ld.action == LadderAction::Kept || ld.action == LadderAction::Undone;
    if (metrics_)
      metrics_->record_ladder_step(ld.lever ? lever_name(*ld.lever) : "", ladder_action_name(ld.action),
                                   ld.before_rate / 1e9, ld.after_rate / 1e9, verdict);
    if (ld.action == LadderAction::Undone) spdlog::warn("ladder: {}", ld.reason);
    else spdlog::info("ladder {}: {}", ladder_action_name(ld.action), ld.reason);
  }
  if (d.changed || r.first) spdlog::info("{}", budget_line(d, r.input, r.targets));
  // A lasting problem: once a minute, not every tick.
  if (r.partition_skipped && warned_.allow("cpuset partition", now_ns_))
    spdlog::warn("cpuset partition skipped: {}", *r.partition_skipped);
  if (!r.partition_note.empty()) spdlog::debug("cpuset: {}", r.partition_note);
}

}  // namespace khagent
