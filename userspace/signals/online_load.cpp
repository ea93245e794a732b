#include "khagent/signals/online_load.h"

#include <algorithm>

namespace khagent {

std::vector<OnlinePodLoad> online_loads(const NodeSignals& node) {
  std::vector<OnlinePodLoad> out;
  for (const auto& p : node.pods) {
    if (p.cls != CgroupClass::Online) continue;
    OnlinePodLoad l;
    l.uid = p.uid;
    l.path = p.path;
    l.waits = p.interval.waits;
    l.wait_ns = p.interval.wait_ns;
    l.throttled_wait_ns = p.interval.cause_ns[KH_WAIT_THROTTLED];
    l.offline_wait_ns = p.offline_wait_ns;
    l.stolen_wait_ns = p.interval.cause_ns[KH_WAIT_STOLEN];
    l.wait_p99_us = p.wait_p99_us;
    l.hist = p.interval.hist;
    l.throttled_periods = p.throttled_periods_max;
    l.throttled_ns = p.throttle_interval.throttled_ns;
    out.push_back(std::move(l));
  }
  const auto& on = node.classes[static_cast<size_t>(CgroupClass::Online)];
  uint64_t pod_waits = 0;
  for (const auto& p : out) pod_waits += p.waits;
  if (on.interval.waits <= pod_waits) return out;
  OnlinePodLoad rest;
  rest.path = "(online cgroups outside pods)";
  rest.waits = on.interval.waits - pod_waits;
  rest.wait_ns = on.interval.wait_ns;
  rest.throttled_wait_ns = on.interval.cause_ns[KH_WAIT_THROTTLED];
  rest.stolen_wait_ns = on.interval.cause_ns[KH_WAIT_STOLEN];
  rest.offline_wait_ns = on.wait_by_aggressor_class_ns[static_cast<size_t>(CgroupClass::Offline)];
  for (const auto& p : out) {
    rest.wait_ns -= std::min(rest.wait_ns, p.wait_ns);
    rest.offline_wait_ns -= std::min(rest.offline_wait_ns, p.offline_wait_ns);
    rest.throttled_wait_ns -= std::min(rest.throttled_wait_ns, p.throttled_wait_ns);
    rest.stolen_wait_ns -= std::min(rest.stolen_wait_ns, p.stolen_wait_ns);
  }
  rest.wait_p99_us = on.wait_p99_us;
  // Its waits by duration: the class's less its pods'.
  rest.hist = on.interval.hist;
  for (const auto& p : out)
    for (size_t i = 0; i < rest.hist.size(); i++) rest.hist[i] -= std::min(rest.hist[i], p.hist[i]);
  out.push_back(std::move(rest));
  return out;
}

}  // namespace khagent
