#include "khagent/export/observe.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "khagent/util/strings.h"

namespace khagent {

namespace {

std::string normalize(std::string p) {
  if (p.empty() || p.front() != '/') p.insert(p.begin(), '/');
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string pct(uint64_t part, uint64_t whole) {
  if (whole == 0) return "-";
  return fmt::format("{:.0f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string shorten(const std::string& s, size_t width) {
  if (s.size() <= width) return s;
  return "…" + s.substr(s.size() - (width - 1));
}

}  // namespace

bool path_matches(const std::string& path, const std::string& prefix) {
  if (prefix.empty()) return true;
  return path_at_or_below(normalize(path), normalize(prefix));
}

// Written as it goes, not built as a tree: with thousands of cgroups a
// tree of JSON objects per tick was most of observe --json's memory. Keys
// are in sorted order, as the tree wrote them (scripts rely on that).
std::string observe_json(const Signals& s, const ObserveView& v) {
  using nlohmann::json;
  fmt::memory_buffer out;
  auto str = [&](const std::string& x) { fmt::format_to(std::back_inserter(out), "{}", json(x).dump()); };
  auto num = [&](double x) { fmt::format_to(std::back_inserter(out), "{}", json(x).dump()); };
  fmt::format_to(std::back_inserter(out), "{{\"cgroups\":[");
  bool first = true;
  for (const auto& c : s.cgroups) {
    if (!path_matches(c.path, v.prefix)) continue;
    fmt::format_to(std::back_inserter(out),
                   "{}{{\"cpu_ns_total\":{},\"id\":{},\"interval\":{{\"cpu_ns\":{},\"runq_wait_ns\":{},"
                   "\"runq_waits\":{}}},\"path\":",
                   first ? "" : ",", c.total.cpu_ns, c.id, c.interval.cpu_ns, c.interval.wait_ns, c.interval.waits);
    first = false;
    str(c.path);
    fmt::format_to(std::back_inserter(out),
                   ",\"preemptions_total\":{},\"reclaim_ns_total\":{{\"memcg\":{},\"node\":{}}},"
                   "\"reclaims_total\":{{\"memcg\":{},\"node\":{}}},\"runq_wait_ns_total\":{},\"runq_wait_p50_us\":",
                   c.total.preemptions, c.reclaim_total.ns[KH_RECLAIM_MEMCG], c.reclaim_total.ns[KH_RECLAIM_NODE],
                   c.reclaim_total.count[KH_RECLAIM_MEMCG], c.reclaim_total.count[KH_RECLAIM_NODE], c.total.wait_ns);
    num(c.wait_p50_us);
    fmt::format_to(std::back_inserter(out), ",\"runq_wait_p99_us\":");
    num(c.wait_p99_us);
    fmt::format_to(
        std::back_inserter(out),
        ",\"runq_waits_total\":{},\"throttle_events_total\":{},\"throttled_ns_total\":{},\"top_aggressors\":[",
        c.total.waits, c.throttle_total.events, c.throttle_total.throttled_ns);
    bool first_agg = true;
    for (const auto& a : c.top_aggressors) {
      fmt::format_to(std::back_inserter(out), "{}{{\"id\":{},\"path\":", first_agg ? "" : ",", a.id);
      first_agg = false;
      str(a.path);
      fmt::format_to(std::back_inserter(out), ",\"wait_ns_total\":{}}}", a.wait_ns_total);
    }
    fmt::format_to(std::back_inserter(out),
                   "],\"wait_ns_total\":{{\"other_cgroup\":{},\"same_cgroup\":{},\"stolen\":{},\"throttled\":{},"
                   "\"unattributed\":{}}}}}",
                   c.total.cause_ns[KH_WAIT_OTHER_CGROUP], c.total.cause_ns[KH_WAIT_SAME_CGROUP],
                   c.total.cause_ns[KH_WAIT_STOLEN], c.total.cause_ns[KH_WAIT_THROTTLED],
                   c.total.cause_ns[KH_WAIT_UNATTRIBUTED]);
  }
  // The node's CPU stalls (null: no stall detector).
  if (s.stall_total.available)
    fmt::format_to(
        std::back_inserter(out),
        "],\"cpu_stalls\":{{\"failed_cpus\":{},\"longest_ns\":{},\"stalls_total\":{},\"stolen_ns_total\":{}}}",
        s.stall_total.cpus_failed, s.stall_total.longest_ns, s.stall_total.stalls, s.stall_total.stolen_ns);
  else fmt::format_to(std::back_inserter(out), "],\"cpu_stalls\":null");
  fmt::format_to(std::back_inserter(out), ",\"interval_ns\":{},\"throttle_source\":", s.interval_ns);
  str(throttle_source_name(s.throttle_source));
  fmt::format_to(std::back_inserter(out), ",\"ts_ns\":{}}}", s.ts_ns);
  return fmt::to_string(out);
}

std::string observe_table(const Signals& s, const ObserveView& v) {
  std::vector<const CgroupSignals*> rows;
  for (const auto& c : s.cgroups)
    if (path_matches(c.path, v.prefix)) rows.push_back(&c);
  std::sort(rows.begin(), rows.end(), [](const CgroupSignals* a, const CgroupSignals* b) {
    if (a->interval.wait_ns != b->interval.wait_ns) return a->interval.wait_ns > b->interval.wait_ns;
    if (a->interval.cpu_ns != b->interval.cpu_ns) return a->interval.cpu_ns > b->interval.cpu_ns;
    return a->path < b->path;
  });

  std::string out =
      fmt::format("khagent observe  interval {}  throttling from {}  cgroups {}",
                  human_ns(static_cast<double>(s.interval_ns)), throttle_source_name(s.throttle_source), rows.size());
  if (s.stall_total.available)
    out +=
        fmt::format("  CPU stalls {} ({} in {})", s.stall_interval_count,
                    human_ns(static_cast<double>(s.stall_interval_ns)), human_ns(static_cast<double>(s.interval_ns)));
  out += "\n";
  out += fmt::format("{:<44} {:>6} {:>8} {:>8} {:>9} {:>5} {:>5} {:>5} {:>5} {:>7} {:>9} {:>9}  {}\n", "CGROUP", "CPU%",
                     "WAIT_P50", "WAIT_P99", "WAIT", "THR", "SAME", "OTHER", "STOLE", "PREEMPT", "THROTTLED", "RECLAIM",
                     "TOP AGGRESSOR");
  size_t n = 0;
  for (const auto* c : rows) {
    if (n++ >= v.limit) break;
    const auto& i = c->interval;
    std::string agg = "-";
    if (!c->top_aggressors.empty()) {
      const auto& a = c->top_aggressors.front();
      agg = fmt::format("{} ({})", a.path.empty() ? std::to_string(a.id) : shorten(a.path, 40),
                        human_ns(static_cast<double>(a.wait_ns_total)));
    }
    out += fmt::format("{:<44} {:>6.1f} {:>8} {:>8} {:>9} {:>5} {:>5} {:>5} {:>5} {:>7} {:>9} {:>9}  {}\n",
                       shorten(c->path, 44), c->cpu_pct, i.waits ? human_ns(c->wait_p50_us * 1e3) : "-",
                       i.waits ? human_ns(c->wait_p99_us * 1e3) : "-", human_ns(static_cast<double>(i.wait_ns)),
                       pct(i.cause_ns[KH_WAIT_THROTTLED], i.wait_ns), pct(i.cause_ns[KH_WAIT_SAME_CGROUP], i.wait_ns),
                       pct(i.cause_ns[KH_WAIT_OTHER_CGROUP], i.wait_ns), pct(i.cause_ns[KH_WAIT_STOLEN], i.wait_ns),
                       i.preemptions, human_ns(static_cast<double>(c->throttle_interval.throttled_ns)),
                       human_ns(static_cast<double>(c->reclaim_interval.total_ns())), agg);
  }
  if (rows.size() > v.limit)
    out += fmt::format("… {} more (narrow with --cgroup, or use --json)\n", rows.size() - v.limit);
  return out;
}

}  // namespace khagent
