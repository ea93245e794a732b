// One controller per resource (CPU, memory, online CPU burst, proactive
// reclaim of offline page cache, IO (measuring so far); later network), behind one small interface, registered in one
// list (make_controllers). The agent's loop takes one snapshot per tick, runs every controller over it, applies the
// union of their settings as one plan and exports their reports; it knows none of them by name.
//
// A controller reads the node only through the snapshot (collect/
// snapshot.h), owns its state, its ownership rules and its reasons, and
// returns plain data: settings for the lever table's knobs, what it adds
// to the offline budget offered to YARN, and a typed report that export/
// turns into log lines and metrics.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "khagent/collect/snapshot.h"
#include "khagent/collect/topology.h"
#include "khagent/config/config.h"
#include "khagent/model/cgroup_value.h"
#include "khagent/model/lever.h"
#include "khagent/policy/burst_controller.h"
#include "khagent/policy/cache_reclaim.h"
#include "khagent/policy/cpu_controller.h"
#include "khagent/policy/io_controller.h"
#include "khagent/policy/memory_controller.h"
#include "khagent/policy/targets.h"
#include "khagent/policy/tick_view.h"
#include "khagent/policy/yarn.h"
#include "khagent/signals/fast_events.h"
#include "khagent/signals/workload.h"

namespace khagent {

// Every controller's report type: export/ has one overload per alternative.
using ControllerReport = std::variant<CpuReport, MemoryReport, BurstReport, CacheReclaimReport, IoReport>;

struct Outcome {
  // The knob values it wants. At a tick: all of them (the actuator puts
  // back what no controller wants any more); at a wake-up: only what moves.
  std::vector<Setting> settings;
  // Why, for the log lines of its writes.
  std::string why;
  // What it adds to the offer made to YARN (merged into one offer).
  OfferPart offer;
  // Offline parents whose processes go first in the OOM killer's order.
  std::vector<std::string> oom_first;
  ControllerReport report;
};

class Controller {
 public:
  virtual ~Controller() = default;
  virtual const char* name() const = 0;
  // The levers whose writes it asks for (its records are logged with its
  // `why`).
  virtual std::span<const Lever> levers() const = 0;
  virtual Outcome step(const TickView& v) = 0;
  // Between ticks: a wake-up it may act on at once (none: not its own, or
  // nothing to do before the next tick).
  virtual std::optional<Outcome> on_wakeup(const Wakeup& /*w*/, const TickView& /*v*/) { return std::nullopt; }
};

// The controllers the configuration and the node enable, in the order
// their settings are planned: the one list of them. They keep a reference
// to `cfg`, which must outlive them.
std::vector<std::unique_ptr<Controller>> make_controllers(const Config& cfg, const NodeFacts& facts);

// Each controller, defined in its own file.
std::unique_ptr<Controller> make_cpu_controller(const Config& cfg, const NodeFacts& facts);
std::unique_ptr<Controller> make_memory_controller(const Config& cfg, const NodeFacts& facts);
std::unique_ptr<Controller> make_burst_controller(const Config& cfg);
std::unique_ptr<Controller> make_cache_reclaim_controller(const Config& cfg, const NodeFacts& facts);
std::unique_ptr<Controller> make_io_controller(const Config& cfg, const NodeFacts& facts);

}  // namespace khagent
