#include "khagent/export/agent_log.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

namespace khagent {

void log_actions(const std::vector<ActionRecord>& recs, const std::string& why, LogLimiter& limit, uint64_t now_ns) {
  for (const auto& r : recs) {
    switch (r.outcome) {
      case ActionOutcome::Unchanged:
      case ActionOutcome::Backoff: break;
      case ActionOutcome::Written:
        spdlog::info("{} {}: '{}' -> '{}' ({}){}", r.cgroup, cgroup_file_name(r.file), r.from, r.to, why,
                     r.message.empty() ? "" : ": " + r.message);
        break;
      case ActionOutcome::DryRun:
        // Nothing is written, so the same change comes back every tick:
        // logged once, and again when what is there or wanted changes.
        if (r.repeat) break;
        spdlog::info("dry run: would write {} {}: '{}' -> '{}' ({})", r.cgroup, cgroup_file_name(r.file), r.from, r.to,
                     why);
        break;
      default:
        if (!limit.allow(r.cgroup + " " + cgroup_file_name(r.file) + " " + outcome_name(r.outcome), now_ns)) break;
        spdlog::warn("{} {} '{}': {}: {}", r.cgroup, cgroup_file_name(r.file), r.to, outcome_name(r.outcome),
                     r.message);
    }
  }
}

size_t log_restore(const std::vector<ActionRecord>& recs, bool unchanged_too) {
  size_t rejected = 0;
  for (const auto& r : recs) {
    if (r.outcome == ActionOutcome::Rejected) rejected++;
    if (r.outcome == ActionOutcome::Unchanged && !unchanged_too) continue;
    spdlog::info("restore {} {}: '{}' -> '{}' ({}){}", r.cgroup, cgroup_file_name(r.file), r.from, r.to,
                 outcome_name(r.outcome), r.message.empty() ? "" : ": " + r.message);
  }
  return rejected;
}

std::string budget_line(const Decision& d, const ControllerInput& in, const std::vector<OfflineTarget>& targets) {
  std::vector<std::string> names;
  names.reserve(targets.size());
  for (const auto& t : targets) names.push_back(t.path + " (" + target_kind_name(t.kind) + ")");
  return fmt::format("budget {:.2f} cores ({}): {}; online {:.2f} cores, offline {:.2f} cores, targets [{}]",
                     d.budget_cores, action_name(d.action), d.reason, in.online_cpu_cores, in.offline_cpu_cores,
                     fmt::join(names, ", "));
}

std::string ReactionTimes::summary() const {
  if (!count) return "";
  return fmt::format("fast path: {} reactions, mean {:.2f} ms, max {:.2f} ms (wait event to cgroup write)", count,
                     sum_ms / static_cast<double>(count), max_ms);
}

std::string describe_ongoing_waits(const kh_wait_event& longest, size_t ongoing,
                                   const std::function<std::string(uint64_t)>& name_of) {
  std::string held;
  switch (longest.cause) {
    case KH_WAIT_THROTTLED: held = "its cgroup throttled"; break;
    case KH_WAIT_SAME_CGROUP: held = "a task of its own cgroup on the CPU"; break;
    case KH_WAIT_STOLEN: held = "its CPU stalled (ran nothing: time taken by the hypervisor)"; break;
    case KH_WAIT_OTHER_CGROUP:
      held = fmt::format("{} on the CPU for {:.1f} ms", name_of(longest.aggressor_id),
                         static_cast<double>(longest.aggressor_ns) / 1e6);
      break;
    default: held = "who holds the CPU unknown"; break;
  }
  return fmt::format(
      "{} protected wait{} still going on past the threshold; longest: {} waiting {:.1f} ms on CPU {}, {}", ongoing,
      ongoing == 1 ? "" : "s", name_of(longest.cgroup_id), static_cast<double>(longest.wait_ns) / 1e6, longest.cpu,
      held);
}

void log_oom_raised(const std::vector<OomChange>& raised) {
  if (raised.empty()) return;
  spdlog::info(
      "oom_score_adj 1000 on {} offline process{} (e.g. pid {} in {}: {} -> 1000): the OOM killer takes offline "
      "before online",
      raised.size(), raised.size() == 1 ? "" : "es", raised.front().pid, raised.front().cgroup, raised.front().from);
}

void log_oom_restored(const std::vector<OomChange>& back) {
  if (back.empty()) return;
  spdlog::info("restore oom_score_adj of {} offline processes (e.g. pid {}: {} -> {})", back.size(), back.front().pid,
               back.front().from, back.front().to);
}

void log_actions(const std::vector<ActionRecord>& recs, std::span<const Lever> levers, const std::string& why,
                 LogLimiter& limit, uint64_t now_ns) {
  std::vector<ActionRecord> mine;
  for (const auto& r : recs)
    if (r.lever && std::find(levers.begin(), levers.end(), *r.lever) != levers.end()) mine.push_back(r);
  log_actions(mine, why, limit, now_ns);
}

void log_ongoing_waits(const kh_wait_event& longest, size_t ongoing, const CgroupIndex& index) {
  spdlog::info("{}", describe_ongoing_waits(longest, ongoing, [&index](uint64_t id) {
                 auto p = index.path_of(id);
                 return p ? *p : fmt::format("cgroup {}", id);
               }));
}

std::string ReactionTimes::note(const std::vector<ActionRecord>& recs, uint64_t first_event_ns, uint64_t woke_ns,
                                uint64_t now_ns, Metrics* metrics) {
  if (first_event_ns && budget_written(recs)) {
    const double ms = static_cast<double>(now_ns - first_event_ns) / 1e6;
    if (metrics) metrics->record_reaction(ms / 1e3);
    add(ms);
    return fmt::format("; reaction {:.2f} ms from the first over-threshold wait", ms);
  }
  return fmt::format("; {:.1f} ms after the trigger woke the agent", static_cast<double>(now_ns - woke_ns) / 1e6);
}

}  // namespace khagent
