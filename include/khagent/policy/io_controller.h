// The IO controller, first step: it measures, names, and writes nothing.
// Each tick it takes the online pods' IO stall (io.pressure) and the
// offline cgroups' IO per device (io.stat, or v1 blkio), and when an online
// pod stalled on IO more than io.stall_limit of the tick it names the
// offline cgroup that moved the most bytes on a device that pod used (or
// on any device, when the pod's own devices are not known). The levers
// (io.weight, io.max, v1 blkio.throttle) come next, on top of this report.
#pragma once

#include <optional>
#include <string>

#include "khagent/config/config.h"
#include "khagent/signals/io.h"

namespace khagent {

struct IoReport {
  IoSignals signals;
  // The online pod that stalled most, if over io.stall_limit, and how
  // many were over it.
  std::optional<IoPodStall> stalled;
  size_t stalled_pods = 0;
  // The offline cgroup that moved the most bytes on a device the stalled
  // pod used (or on any device when its devices are unknown).
  std::optional<IoOfflineUse> aggressor;
  bool aggressor_on_pods_device = false;  // the device is one the stalled pod used
};

// The judgement over one tick's signals.
IoReport io_judge(IoSignals s, const IoConfig& cfg);

}  // namespace khagent
