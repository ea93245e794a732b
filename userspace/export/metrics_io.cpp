// The IO controller's signals: online pods' IO stall, offline IO per device.
#include <array>

#include "khagent/policy/io_controller.h"
#include "metrics_parts.h"

namespace khagent::metrics {

namespace {

enum IoFamily : size_t { kStall, kStalled, kBytes, kIos, kLimits, kSteps, kNrIoFamilies };
constexpr std::array<FamilySpec, kNrIoFamilies> kIoFamilies = {{
    {kStall,
     "khagent_online_io_stall_seconds_total",
     MetricType::Counter,
     {"kind"},
     "Time online pods' tasks stalled on IO (io.pressure, summed over the pods): some, or full (all of a pod's "
     "runnable tasks)"},
    {kStalled,
     "khagent_online_io_stalled_pods",
     MetricType::Gauge,
     {},
     "Online pods that stalled on IO more than io.stall_limit of the last tick"},
    {kBytes,
     "khagent_offline_io_bytes_total",
     MetricType::Counter,
     {"device", "op"},
     "Bytes offline cgroups read and wrote, by device (major:minor) and op (io.stat, or v1 blkio: direct IO "
     "and reads only)"},
    {kIos,
     "khagent_offline_io_ops_total",
     MetricType::Counter,
     {"device", "op"},
     "IOs offline cgroups issued, by device and op"},
    {kLimits,
     "khagent_io_limits",
     MetricType::Gauge,
     {},
     "Offline cgroups khagent holds under an IO limit (io.max, or v1 blkio.throttle), one device each"},
    {kSteps,
     "khagent_io_limit_steps_total",
     MetricType::Counter,
     {"step"},
     "IO limit steps: limited (a new limit), tightened, helped and useless (verdicts; useless is lifted), raised "
     "and lifted (online calm)"},
}};
static_assert(rows_in_order(kIoFamilies));

constexpr size_t kMaxDevices = 32;  // devices with series of their own; the rest add to "other"

}  // namespace

void IoMetrics::record(const IoReport& r) {
  const auto& t = kIoFamilies;
  if (!built_) {
    TableFamily<Counter> stall(r_, t[kStall]);
    stall_["some"] = &stall.add({"some"});
    stall_["full"] = &stall.add({"full"});
    stalled_ = &TableFamily<Gauge>(r_, t[kStalled]).add({});
    bytes_ = TableFamily<Counter>(r_, t[kBytes]);
    ios_ = TableFamily<Counter>(r_, t[kIos]);
    limits_ = &TableFamily<Gauge>(r_, t[kLimits]).add({});
    TableFamily<Counter> steps(r_, t[kSteps]);
    for (const char* s : {"limited", "tightened", "helped", "useless", "raised", "lifted"}) steps_[s] = &steps.add({s});
    built_ = true;
  }
  limits_->Set(static_cast<double>(r.limits.size()));
  for (const auto& s : r.steps)
    if (auto it = steps_.find(s.kind); it != steps_.end()) it->second->Increment();
  uint64_t some = 0, full = 0;
  for (const auto& p : r.signals.online) {
    some += p.some_us;
    full += p.full_us;
  }
  stall_["some"]->Increment(static_cast<double>(some) / 1e6);
  stall_["full"]->Increment(static_cast<double>(full) / 1e6);
  stalled_->Set(static_cast<double>(r.stalled_pods));
  for (const auto& u : r.signals.offline) {
    std::string dev = u.device;
    if (!devices_.count(dev)) {
      if (devices_.size() >= kMaxDevices) dev = kOther;
      else devices_.insert(dev);
    }
    bytes_.add({dev, "read"}).Increment(static_cast<double>(u.delta.rbytes));
    bytes_.add({dev, "write"}).Increment(static_cast<double>(u.delta.wbytes));
    ios_.add({dev, "read"}).Increment(static_cast<double>(u.delta.rios));
    ios_.add({dev, "write"}).Increment(static_cast<double>(u.delta.wios));
  }
}

}  // namespace khagent::metrics
