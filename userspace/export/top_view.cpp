#include "khagent/export/top_view.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "khagent/export/observe.h"
#include "khagent/util/bytes.h"
#include "khagent/util/strings.h"

namespace khagent {

const char* top_sort_name(TopSort s) {
  switch (s) {
    case TopSort::P99: return "p99";
    case TopSort::Wait: return "wait";
    case TopSort::Cpu: return "cpu";
  }
  return "";
}

TopSort next_top_sort(TopSort s) {
  switch (s) {
    case TopSort::P99: return TopSort::Wait;
    case TopSort::Wait: return TopSort::Cpu;
    case TopSort::Cpu: return TopSort::P99;
  }
  return TopSort::P99;
}

TopModel make_top_model(const Signals& sig, const NodeSignals& node, Classifier& classifier, size_t node_cpus,
                        const std::string& prefix) {
  TopModel m;
  m.node_cpus = node_cpus;
  m.throttle_source = throttle_source_name(sig.throttle_source);
  m.interval_ns = sig.interval_ns;
  for (size_t i = 0; i < m.classes.size(); i++) {
    m.classes[i].cpu_cores = node.classes[i].cpu_cores;
    m.classes[i].wait_p99_us = node.classes[i].wait_p99_us;
    m.classes[i].waits = node.classes[i].interval.waits;
  }
  for (const auto& c : sig.cgroups) {
    const auto& i = c.interval;
    if (i.cpu_ns == 0 && i.waits == 0 && i.wait_ns == 0) continue;  // idle this interval
    if (!path_matches(c.path, prefix)) continue;
    TopRow r;
    r.path = c.path;
    r.cls = classifier.get(c.id, c.path).cls;
    r.cpu_pct = c.cpu_pct;
    r.wait_p50_us = c.wait_p50_us;
    r.wait_p99_us = c.wait_p99_us;
    r.wait_ns = i.wait_ns;
    r.waits = i.waits;
    if (i.wait_ns) {
      r.other_share = static_cast<double>(i.cause_ns[KH_WAIT_OTHER_CGROUP]) / static_cast<double>(i.wait_ns);
      r.throttled_share = static_cast<double>(i.cause_ns[KH_WAIT_THROTTLED]) / static_cast<double>(i.wait_ns);
    }
    // Of the aggressors since start, the one that held the CPU longest while
    // this cgroup waited in this interval.
    for (const auto& a : c.top_aggressors) {
      if (a.wait_ns_interval > r.aggressor_ns) {
        r.aggressor_ns = a.wait_ns_interval;
        r.aggressor = a.path.empty() ? "id " + std::to_string(a.id) : a.path;
      }
    }
    m.rows.push_back(std::move(r));
  }
  return m;
}

std::vector<const TopRow*> top_sorted_rows(const TopModel& m) {
  std::vector<const TopRow*> rows;
  for (const auto& r : m.rows)
    if (!m.online_only || r.cls == CgroupClass::Online) rows.push_back(&r);
  auto key = [&](const TopRow* r) -> std::pair<double, double> {
    switch (m.sort) {
      case TopSort::P99: return {r->waits ? r->wait_p99_us : -1.0, static_cast<double>(r->wait_ns)};
      case TopSort::Wait: return {static_cast<double>(r->wait_ns), r->waits ? r->wait_p99_us : -1.0};
      case TopSort::Cpu: return {r->cpu_pct, static_cast<double>(r->wait_ns)};
    }
    return {0, 0};
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const TopRow* a, const TopRow* b) {
    bool ao = a->cls == CgroupClass::Online, bo = b->cls == CgroupClass::Online;
    if (ao != bo) return ao;
    auto ka = key(a), kb = key(b);
    if (ka != kb) return ka > kb;
    return a->path < b->path;
  });
  return rows;
}

namespace {
// CLASS CPU% P50 P99 WAIT WAITS OTHER THR, then the cgroup. 60 columns: an
// 80-column terminal keeps 20 for the path.
constexpr const char* kRowFormat = "{:<7} {:>6} {:>7} {:>7} {:>8} {:>6} {:>5} {:>4}  ";

// The title, a line per class and the memory line, then a blank line.
std::vector<std::string> summary_lines(const TopModel& m) {
  std::vector<std::string> out;
  // (The online-only state is in the footer: this line fits 80 columns.)
  out.push_back(fmt::format("khagent top  {} CPUs  interval {}  throttling from {}  sort {}", m.node_cpus,
                            m.interval_ns ? human_ns(static_cast<double>(m.interval_ns)) : "-", m.throttle_source,
                            top_sort_name(m.sort)));
  for (CgroupClass c : {CgroupClass::Online, CgroupClass::Offline, CgroupClass::System}) {
    const auto& s = m.classes[static_cast<size_t>(c)];
    out.push_back(fmt::format("{:<8} cpu {:>6.2f} cores   wait p99 {:>8}   waits {:>8}", class_name(c), s.cpu_cores,
                              s.waits ? human_ns(s.wait_p99_us * 1e3) : "-", s.waits));
  }
  if (m.memory.capacity)
    out.push_back(fmt::format(
        "memory   node {} of {}   online stalled {:.1f}%{}{}", mib_text(m.memory.working_set),
        mib_text(m.memory.capacity), m.memory.online_stall_share * 100,
        m.memory.worst.empty() || m.memory.online_stall_share == 0 ? "" : " (" + m.memory.worst + ")",
        m.memory.online_reclaim_ns && m.interval_ns
            ? fmt::format("   in reclaim {:.1f} ms/s",
                          static_cast<double>(*m.memory.online_reclaim_ns) / static_cast<double>(m.interval_ns) * 1e3)
            : std::string()));
  else out.push_back("memory   -");
  out.push_back("");
  return out;
}

// One cgroup's row: the fixed columns, its path in cg_w and, when agg_w is
// not 0, what held the CPU meanwhile.
std::string row_text(const TopRow& r, size_t cg_w, size_t agg_w) {
  auto pct = [&](double share) { return r.wait_ns ? fmt::format("{:.0f}%", 100 * share) : std::string("-"); };
  std::string line =
      fmt::format(kRowFormat, class_name(r.cls), fmt::format("{:.1f}", r.cpu_pct),
                  r.waits ? human_ns(r.wait_p50_us * 1e3) : "-", r.waits ? human_ns(r.wait_p99_us * 1e3) : "-",
                  human_ns(static_cast<double>(r.wait_ns)), r.waits, pct(r.other_share), pct(r.throttled_share));
  if (agg_w) {
    line += pad_right(shorten_left(r.path, cg_w), cg_w + 2);
    if (!r.aggressor.empty()) {
      std::string t = " (" + human_ns(static_cast<double>(r.aggressor_ns)) + ")";
      line += shorten_left(r.aggressor, agg_w > t.size() ? agg_w - t.size() : 1) + t;
    }
  } else {
    line += shorten_left(r.path, cg_w);
  }
  return line;
}

}  // namespace

std::string render_top(const TopModel& m, int rows_i, int cols_i) {
  if (rows_i <= 0 || cols_i <= 0) return "";
  const size_t rows = static_cast<size_t>(rows_i), cols = static_cast<size_t>(cols_i);

  std::vector<std::string> lines = summary_lines(m);

  // Fixed columns, then the cgroup and (when there is room) its aggressor.
  auto mark = [&](const char* name, TopSort s) { return std::string(name) + (m.sort == s ? "*" : ""); };
  std::string fixed_head = fmt::format(kRowFormat, "CLASS", mark("CPU%", TopSort::Cpu), "P50",
                                       mark("P99", TopSort::P99), mark("WAIT", TopSort::Wait), "WAITS", "OTHER", "THR");
  auto sorted = top_sorted_rows(m);
  size_t fixed = width_of(fixed_head);
  size_t rest = cols > fixed ? cols - fixed : 0;
  size_t cg_w = std::max<size_t>(rest, 6), agg_w = 0;
  const std::string agg_head = "HELD THE CPU MEANWHILE";
  if (rest >= 50) {
    // Two columns: the path takes what it needs, leaving the aggressor at
    // least half of the room (or what it needs, if less); the aggressor gets
    // the rest.
    size_t path_need = 6, agg_need = agg_head.size();
    for (const TopRow* r : sorted) {
      path_need = std::max(path_need, width_of(r->path));
      if (!r->aggressor.empty()) agg_need = std::max(agg_need, width_of(r->aggressor) + 10);
    }
    size_t agg_min = std::min(agg_need, (rest - 2) / 2);
    cg_w = std::min(path_need, rest - 2 - agg_min);
    agg_w = rest - 2 - cg_w;
  }
  lines.push_back(fixed_head + (agg_w ? pad_right("CGROUP", cg_w + 2) + agg_head : "CGROUP"));
  // kTopColumnHeaderLine is where the runner highlights the header.
  static_assert(kTopColumnHeaderLine == 6, "title, three class lines, memory, a blank line, then the header");

  size_t room = rows > lines.size() + 1 ? rows - lines.size() - 1 : 0;
  size_t shown = 0;
  if (m.interval_ns == 0) {
    if (room) lines.push_back("collecting the first interval...");
  } else if (sorted.empty() && room) {
    lines.push_back(m.online_only ? "no online cgroup ran or waited in this interval (o: show all)"
                                  : "no cgroup ran or waited in this interval");
  } else {
    for (const TopRow* r : sorted) {
      if (shown >= room) break;
      lines.push_back(row_text(*r, cg_w, agg_w));
      shown++;
    }
  }
  std::string footer = fmt::format("q quit  o online only: {}  s sort: {}   {} of {} cgroups",
                                   m.online_only ? "on" : "off", top_sort_name(m.sort), shown, sorted.size());
  if (!m.note.empty()) footer += "  | " + m.note;
  lines.push_back(footer);

  std::string out;
  for (size_t i = 0; i < lines.size() && i < rows; i++) {
    std::string l = cut_to_width(lines[i], cols);
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + '\n';
  }
  return out;
}

}  // namespace khagent
