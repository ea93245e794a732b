#include "khagent/signals/signals.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

namespace khagent {

namespace {

// Two containers of one Kubernetes pod: cgroups with the same parent, a pod
// cgroup ("pod<uid>" with the cgroupfs driver, "...-pod<uid>.slice" with
// systemd's). A string test, not identify_cgroup()'s regular expressions:
// this runs for every interference pair at every tick.
bool same_pod_containers(const std::string& a, const std::string& b) {
  size_t sa = a.rfind('/'), sb = b.rfind('/');
  if (sa == std::string::npos || sa == 0 || sa != sb || a.compare(0, sa, b, 0, sb) != 0) return false;
  size_t p = a.rfind('/', sa - 1);
  std::string_view parent(a.data() + p + 1, sa - p - 1);
  return parent.rfind("pod", 0) == 0 || parent.find("-pod") != std::string_view::npos;
}

}  // namespace

Signals compute_signals(const Sample& s, size_t top_n) {
  Signals out;
  out.ts_ns = s.ts_ns;
  out.interval_ns = s.interval_ns;
  out.throttle_source = s.throttle_source;
  out.stall_total = s.stall_total;
  out.stall_interval_ns = s.stall_interval_ns;
  out.stall_interval_count = s.stall_interval_count;
  out.bpf_counters = s.bpf_counters;

  std::unordered_map<uint64_t, const CgroupSample*> by_id;
  for (const auto& c : s.cgroups) by_id[c.id] = &c;
  std::unordered_map<uint64_t, std::vector<const PairSample*>> by_victim;
  for (const auto& p : s.pairs) by_victim[p.victim].push_back(&p);

  out.cgroups.reserve(s.cgroups.size());
  for (const auto& c : s.cgroups) {
    CgroupSignals g;
    g.id = c.id;
    g.path = c.path;
    g.total = c.total;
    g.interval = c.interval;
    g.throttle_total = c.throttle_total;
    g.throttle_interval = c.throttle_interval;
    g.reclaim_total = c.reclaim_total;
    g.reclaim_interval = c.reclaim_interval;
    g.wait_p50_us = hist_quantile(c.interval.hist, 0.50) / 1000.0;
    g.wait_p99_us = hist_quantile(c.interval.hist, 0.99) / 1000.0;
    if (s.interval_ns > 0)
      g.cpu_pct = 100.0 * static_cast<double>(c.interval.cpu_ns) / static_cast<double>(s.interval_ns);

    auto it = by_victim.find(c.id);
    if (it != by_victim.end()) {
      // Not the containers of the victim's own pod: they share its CPU.
      std::vector<const PairSample*> pairs;
      for (const auto* p : it->second) {
        auto ag = by_id.find(p->aggressor);
        if (ag != by_id.end() && same_pod_containers(c.path, ag->second->path)) continue;
        pairs.push_back(p);
      }
      size_t n = std::min(top_n, pairs.size());
      std::partial_sort(pairs.begin(), pairs.begin() + static_cast<long>(n), pairs.end(),
                        [](const PairSample* a, const PairSample* b) {
                          if (a->wait_ns_total != b->wait_ns_total) return a->wait_ns_total > b->wait_ns_total;
                          return a->aggressor < b->aggressor;
                        });
      for (size_t i = 0; i < n; i++) {
        AggressorSignal a;
        a.id = pairs[i]->aggressor;
        auto ag = by_id.find(a.id);
        if (ag != by_id.end()) a.path = ag->second->path;
        a.wait_ns_total = pairs[i]->wait_ns_total;
        a.wait_ns_interval = pairs[i]->wait_ns_interval;
        g.top_aggressors.push_back(std::move(a));
      }
    }
    out.cgroups.push_back(std::move(g));
  }
  return out;
}

}  // namespace khagent
