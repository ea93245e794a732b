#include "khagent/policy/io_controller.h"

#include <algorithm>

#include "khagent/policy/controllers.h"

namespace khagent {

IoReport io_judge(IoSignals s, const IoConfig& cfg) {
  IoReport r;
  for (const auto& p : s.online) {
    if (!(p.some_share > cfg.stall_limit)) continue;
    r.stalled_pods++;
    if (!r.stalled || p.some_share > r.stalled->some_share) r.stalled = p;
  }
  if (r.stalled) {
    // s.offline is sorted by bytes: the first on one of the pod's devices.
    for (const auto& u : s.offline)
      if (r.stalled->devices.count(u.device)) {
        r.aggressor = u;
        r.aggressor_on_pods_device = true;
        break;
      }
    if (!r.aggressor && r.stalled->devices.empty() && !s.offline.empty()) r.aggressor = s.offline.front();
  }
  r.signals = std::move(s);
  return r;
}

namespace {

class IoController : public Controller {
 public:
  explicit IoController(const Config& cfg) : cfg_(cfg) {}
  const char* name() const override { return "io"; }
  std::span<const Lever> levers() const override { return {}; }
  Outcome step(const TickView& v) override {
    std::vector<std::string> offline;
    offline.reserve(v.targets.size());
    for (const auto& t : v.targets) offline.push_back(t.path);
    Outcome o;
    o.report = io_judge(tracker_.step(v.snap, v.online_pods, offline), cfg_.io);
    return o;
  }

 private:
  const Config& cfg_;
  IoTracker tracker_;
};

}  // namespace

std::unique_ptr<Controller> make_io_controller(const Config& cfg) { return std::make_unique<IoController>(cfg); }

}  // namespace khagent
