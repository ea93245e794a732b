#include "khagent/signals/io.h"

#include <algorithm>

namespace khagent {

namespace {

uint64_t since(uint64_t before, uint64_t now) { return now >= before ? now - before : now; }

uint64_t bytes(const IoCounters& c) { return c.rbytes + c.wbytes; }

bool any(const IoCounters& c) { return c.rbytes || c.wbytes || c.rios || c.wios; }

}  // namespace

IoStat io_delta(const IoStat& before, const IoStat& now) {
  IoStat out;
  for (const auto& [dev, c] : now) {
    IoCounters b;
    if (auto it = before.find(dev); it != before.end()) b = it->second;
    IoCounters d{since(b.rbytes, c.rbytes), since(b.wbytes, c.wbytes), since(b.rios, c.rios), since(b.wios, c.wios)};
    if (any(d)) out[dev] = d;
  }
  return out;
}

double wait_per_io_us(const IoPodStall& p) {
  uint64_t ios = 0;
  for (const auto& [dev, d] : p.devices) ios += d.rios + d.wios;
  return static_cast<double>(p.some_us) / static_cast<double>(std::max<uint64_t>(ios, 1));
}

IoSignals IoTracker::step(const TickSnapshot& snap, const std::vector<std::string>& online_pods,
                          const std::vector<std::string>& offline) {
  IoSignals s;
  const uint64_t now = snap.now_ns();
  const bool first = last_ns_ == 0;
  s.interval_ns = first || now <= last_ns_ ? 0 : now - last_ns_;
  last_ns_ = now;
  std::map<std::string, PsiTotals> psi;
  std::map<std::string, IoStat> stat;
  for (const auto& pod : online_pods) {
    const auto& pr = snap.io_pressure(pod);
    if (!pr) {
      s.unreadable.push_back(pod + ": " + pr.error().str());
      continue;
    }
    const PsiTotals& p = pr.value();
    psi[pod] = p;
    IoPodStall st;
    st.pod = pod;
    if (auto it = psi_.find(pod); it != psi_.end() && s.interval_ns) {
      st.some_us = since(it->second.some_us, p.some_us);
      st.full_us = since(it->second.full_us, p.full_us);
      st.some_share = std::min(1.0, static_cast<double>(st.some_us) * 1000.0 / static_cast<double>(s.interval_ns));
    }
    if (const auto& io = snap.io_stat(pod)) {
      stat[pod] = io.value();
      if (auto it = stat_.find(pod); it != stat_.end()) st.devices = io_delta(it->second, io.value());
    }
    s.online.push_back(std::move(st));
  }
  for (const auto& cg : offline) {
    const auto& io = snap.io_stat(cg);
    if (!io) {
      s.unreadable.push_back(cg + ": " + io.error().str());
      continue;
    }
    stat[cg] = io.value();
    auto it = stat_.find(cg);
    if (it == stat_.end() || !s.interval_ns) continue;
    for (const auto& [dev, d] : io_delta(it->second, io.value())) s.offline.push_back({cg, dev, d});
  }
  std::stable_sort(s.offline.begin(), s.offline.end(),
                   [](const IoOfflineUse& a, const IoOfflineUse& b) { return bytes(a.delta) > bytes(b.delta); });
  psi_ = std::move(psi);
  stat_ = std::move(stat);
  return s;
}

}  // namespace khagent
