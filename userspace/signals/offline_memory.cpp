#include "khagent/signals/offline_memory.h"

#include <algorithm>
#include <set>

#include <unistd.h>

namespace khagent {

MemorySignals offline_memory(const TickSnapshot& snap, const std::string& node_cgroup,
                             const std::vector<std::string>& parents) {
  MemorySignals s;
  s.input.now_ns = snap.now_ns();
  for (const auto& path : parents) {
    const auto& u = snap.memory(path);
    if (!u) {
      s.problems.push_back({"offline " + path, u.error()});
      continue;
    }
    s.used[path] = u.value().working_set();
    s.usage[path] = u.value().usage;
    s.input.offline_used += u.value().working_set();
    s.input.offline_usage += u.value().usage;
  }
  const auto& node = snap.node_memory(node_cgroup);
  if (!node) {
    s.problems.push_back({"the node" + (node_cgroup.empty() ? "" : " (" + node_cgroup + ")"), node.error()});
    return s;
  }
  s.input.capacity = node.value().limit.value_or(0);
  s.input.watermark_high = node.value().watermark_high.value_or(0);
  s.input.node_used = node.value().working_set();
  // Use with page cache says something only of a node cgroup: the whole
  // node's MemFree is small whenever its cache has filled it.
  if (!node_cgroup.empty()) s.input.node_usage = node.value().usage;
  return s;
}

MemoryStall MemoryStallMeter::step(const TickSnapshot& snap, const std::vector<std::string>& paths) {
  MemoryStall out;
  const uint64_t now_ns = snap.now_ns();
  const uint64_t interval_us = last_ns_ && now_ns > last_ns_ ? (now_ns - last_ns_) / 1000 : 0;
  std::map<std::string, PsiTotals> now;
  for (const auto& p : paths) {
    const auto& read = snap.memory_pressure(p);
    if (!read) {
      out.unreadable++;
      continue;
    }
    const PsiTotals* t = &read.value();
    now[p] = *t;
    auto it = last_.find(p);
    if (it == last_.end()) continue;
    const uint64_t some = t->some_us >= it->second.some_us ? t->some_us - it->second.some_us : 0;
    const uint64_t full = t->full_us >= it->second.full_us ? t->full_us - it->second.full_us : 0;
    out.some_us += some;
    out.full_us += full;
    const double share = std::min(interval_us ? static_cast<double>(some) / static_cast<double>(interval_us) : 0, 1.0);
    if (share > 0) out.shares.emplace_back(p, share);
    if (share > out.max_share) {
      out.max_share = share;
      out.worst = p;
    }
  }
  std::stable_sort(out.shares.begin(), out.shares.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  last_ = std::move(now);
  last_ns_ = now_ns;
  return out;
}

FileRefaultMeter::FileRefaultMeter(uint64_t page_bytes)
    : page_(page_bytes ? page_bytes : static_cast<uint64_t>(::sysconf(_SC_PAGESIZE))) {}

FileRefaults FileRefaultMeter::step(const TickSnapshot& snap, const std::vector<std::string>& pods) {
  FileRefaults out;
  std::map<std::string, uint64_t> now;
  uint64_t pages = 0;
  std::set<std::string> seen;
  for (const auto& p : pods) {
    const auto& u = snap.memory(p);
    if (!u || !seen.insert(p).second) continue;
    out.inactive_file += u.value().inactive_file;
    const std::optional<uint64_t> file = u.value().refaults_file;
    if (!file) continue;
    now[p] = *file;
    auto it = last_.find(p);
    if (it != last_.end() && *file > it->second) pages += *file - it->second;
  }
  out.known = !now.empty();
  out.bytes = pages * page_;
  last_ = std::move(now);
  return out;
}

MemoryEvents MemoryEventMeter::step(const TickSnapshot& snap, const std::vector<std::string>& online,
                                    const std::vector<std::string>& offline) {
  MemoryEvents out;
  std::map<std::string, Counts> now;
  for (bool is_online : {true, false}) {
    for (const auto& p : is_online ? online : offline) {
      if (now.count(p)) continue;
      const auto& u = snap.memory(p);
      const auto& k = snap.oom_kill_counts(p);
      if (!u || !k) continue;
      Counts& c = now[p];
      c.kills = k.value();
      c.refaults = u.value().refaults;
      auto it = last_.find(p);
      if (it == last_.end()) continue;
      uint64_t kills = 0;
      for (const auto& [g, n] : c.kills) {
        auto was = it->second.kills.find(g);
        const uint64_t before = was == it->second.kills.end() ? 0 : was->second;
        if (n > before) kills += n - before;
      }
      uint64_t refaults = 0;
      if (c.refaults && it->second.refaults && *c.refaults > *it->second.refaults)
        refaults = *c.refaults - *it->second.refaults;
      (is_online ? out.online_oom_kills : out.offline_oom_kills) += kills;
      (is_online ? out.online_refaults : out.offline_refaults) += refaults;
      if (is_online && kills) out.online_killed.emplace_back(p, kills);
    }
  }
  last_ = std::move(now);
  return out;
}

}  // namespace khagent
