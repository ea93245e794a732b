// The IO controller. Each tick it takes the online pods' IO stall
// (io.pressure) and the offline cgroups' IO per device (io.stat, or v1
// blkio), and when an online pod stalled on IO more than io.stall_limit of
// the tick it names the offline cgroup that moved the most bytes on a
// device that pod used. With io.limit, that cgroup gets an IO limit on
// that device (the io_limit lever: io.max, cgroup v2 only), each step
// judged and undone when it did not help, raised step by step and lifted
// when online is calm. Nothing is written on a device no stalled online
// pod used.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "khagent/config/config.h"
#include "khagent/model/cgroup_value.h"
#include "khagent/signals/io.h"

namespace khagent {

// A limit khagent holds on one offline cgroup and device.
struct IoLimitHeld {
  std::string cgroup;
  std::string pod;          // the online pod whose stall it is for
  IoLimit limit;            // in force (limit.device: the device)
  IoLimit previous;         // before the last step (the first's: no limit)
  IoLimit before;           // what the cgroup moved per second before the first step (the keys limited)
  double stall_before = 0;  // the pod's stall share when the last step was taken
  double wait_before = 0;   // and its wait per IO (signals/io.h: wait_per_io_us)
  uint64_t step_ns = 0;     // when the last step was taken
  // The pod's IO stall, IOs and time over the window of ticks since
  // window_ns (the last step, then io.verdict_after long each), for the
  // verdicts and the tighter steps.
  uint64_t window_ns = 0;
  uint64_t since_stall_us = 0, since_ios = 0, since_ns = 0;
  bool judged = false;         // the last step's verdict is in
  bool settled = false;        // a tighter step did not help: no tighter until raised
  uint64_t calm_since_ns = 0;  // 0: the device is not calm
  int steps = 0;               // steps in force (the first limit, then each tighter one)
};

struct IoLimitState {
  std::vector<IoLimitHeld> held;
  // (cgroup, device) whose limit did not help: not limited again before then.
  std::map<std::pair<std::string, std::string>, uint64_t> hold_off_until;
  // Each online pod's wait per IO while no offline target moved IO on its
  // devices (a moving average over such ticks): what its IO costs alone.
  std::map<std::string, double> baseline_wait_us;
  // The (cgroup, device) a first limit is due for, and on how many ticks
  // in a row: it is set on the second, so that its rate is a whole tick's
  // (a writer that just started is caught in its ramp-up).
  std::pair<std::string, std::string> due;
  int due_ticks = 0;
};

// A pod's wait per IO within this much of its baseline is not slowed by
// others: no limit for it, and no tighter one.
inline constexpr double kIoBaselineSlack = 1.25;

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
  // The limits in force after this tick, and what changed.
  std::vector<IoLimitHeld> limits;
  struct Step {
    const char* kind;  // limited, tightened, helped, useless (lifted), raised, lifted (calm)
    std::string text;  // in words, for the log
  };
  std::vector<Step> steps;
};

// The judgement over one tick's signals.
IoReport io_judge(IoSignals s, const IoConfig& cfg);

// The limits' step at one tick (r: the tick's judgement; io.limit on):
//   - a step is judged io.verdict_after it, over the ticks since: it
//     helped when the pod's wait per IO fell by a quarter or its stall to
//     io.stall_limit; a first limit that did not help is lifted (and that cgroup and device held
//     off for io.hold_off), a tighter one goes back to the last limit and
//     stays there;
//   - a limit is tightened by io.limit_step while its pod still stalls and
//     waits more per IO than kIoBaselineSlack times its baseline (when one
//     was measured: ticks with no offline IO on its devices);
//   - it is raised by 1/io.limit_step after io.calm_after with its pod
//     and the device's pods under half of io.stall_limit, or with the
//     cgroup moving less than half of the limit, and lifted once above
//     what the cgroup moved before the first step;
//   - the aggressor named on the stalled pod's device gets a first limit
//     when named on two ticks in a row, unless the pod's wait per IO is
//     within kIoBaselineSlack of its baseline (it stalls on its own IO,
//     not behind others').
// Fills r.limits and r.steps.
void io_limit_step(IoReport& r, const IoConfig& cfg, uint64_t now_ns, IoLimitState& st);

}  // namespace khagent
