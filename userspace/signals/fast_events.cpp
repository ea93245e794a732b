#include "khagent/signals/fast_events.h"

#include <algorithm>

namespace khagent {

FastBatch fast_batch(std::span<const kh_wait_event> events, const Classifier& classifier) {
  FastBatch b;
  b.events.reserve(events.size());
  for (const auto& e : events) {
    FastEvent& f = b.events.emplace_back();
    f.cgroup_id = e.cgroup_id;
    f.wait_ns = e.wait_ns;
    f.aggressor_ns = e.aggressor_ns;
    f.throttled = e.cause == KH_WAIT_THROTTLED;
    f.ongoing = e.flags & KH_EVENT_ONGOING;
    const Classifier::Entry* a = classifier.find(e.aggressor_id);
    f.aggressor_offline = a && a->cls == CgroupClass::Offline;
    b.first_ts_ns = std::min<uint64_t>(b.first_ts_ns, e.ts_ns);
    if (f.ongoing) {
      b.ongoing++;
      if (!b.longest || e.wait_ns > b.longest->wait_ns) b.longest = e;
    }
  }
  return b;
}

}  // namespace khagent
