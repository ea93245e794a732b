#include "khagent/policy/burst_controller.h"

#include <algorithm>
#include <array>
#include <map>

#include <fmt/format.h>

#include "khagent/policy/controllers.h"
#include "khagent/policy/lever_table.h"

namespace khagent {

namespace {

constexpr std::array<Lever, 1> kBurstLevers = {Lever::Burst};

bool listed(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

class BurstController : public Controller {
 public:
  explicit BurstController(const Config& cfg) : cfg_(cfg) {}
  const char* name() const override { return "burst"; }
  std::span<const Lever> levers() const override { return kBurstLevers; }
  Outcome step(const TickView& v) override;

 private:
  bool on() const { return cfg_.online.burst_share > 0; }
  void judge(const TickView& v, BurstReport& r);
  // The pod's cgroups that get a burst: itself and its containers, those
  // with a quota and no burst of someone else's.
  void cgroups_of(const std::string& pod, const TickView& v, std::vector<OfflineTarget>& out, BurstReport& r) const;

  const Config& cfg_;
  std::map<std::string, std::string> pods_;  // online pods given CPU burst, and why
};

void BurstController::judge(const TickView& v, BurstReport& r) {
  ControllerInput in = controller_input(v.node, 0, v.now_ns);
  for (const auto& p : in.online_pods) {
    PodVerdict pv = judge_pod(p, cfg_.online);
    if (pv.kind != PodVerdictKind::SelfThrottled) continue;
    // Online cgroups outside pods are summed under one name: not a cgroup.
    const bool pod = listed(v.online_pods, pv.path);
    BurstNote n;
    n.path = pv.path;
    n.why = pv.why;
    if (!on() || !pod) {
      n.kind = BurstNote::Kind::NotActed;
      n.lever_off = !on();
    } else {
      n.kind = pods_.emplace(pv.path, pv.why).second ? BurstNote::Kind::Given : BurstNote::Kind::StillThrottled;
    }
    r.notes.push_back(std::move(n));
  }
  // A pod keeps its burst while it lives (a burst costs nothing while
  // unused); one no longer online is forgotten, its originals restored as
  // no longer wanted.
  std::erase_if(pods_, [&](const auto& kv) { return !listed(v.online_pods, kv.first); });
}

void BurstController::cgroups_of(const std::string& pod, const TickView& v, std::vector<OfflineTarget>& out,
                                 BurstReport& r) const {
  // The kubelet puts the pod's limit on the pod and each container's on
  // the container: either can throttle, so each gets its burst.
  std::vector<std::string> cgroups{pod};
  const auto& children = v.snap.children(pod);
  cgroups.insert(cgroups.end(), children.begin(), children.end());
  for (const auto& cg : cgroups) {
    OfflineTarget t;
    t.path = cg;
    t.kind = TargetKind::OnlinePod;
    t.quota = v.snap.cpu_quota(cg);
    if (!t.quota || !t.quota->quota_us) continue;  // no quota: nothing throttles it
    // A burst khagent did not write is someone else's: left alone.
    if (!v.ours(cg, Knob::Burst)) {
      const auto& cur = v.snap.cpu_burst(cg);
      if (!cur || *cur != 0) {
        r.notes.push_back(
            {cur ? BurstNote::Kind::Foreign : BurstNote::Kind::NoBurstFile, cg, "", false, cur.value_or(0)});
        continue;
      }
    }
    out.push_back(std::move(t));
  }
}

Outcome BurstController::step(const TickView& v) {
  BurstReport r;
  r.share = cfg_.online.burst_share;
  judge(v, r);
  LeverInput in;
  if (on())
    for (const auto& [pod, _] : pods_) cgroups_of(pod, v, in.online, r);
  r.pods = on() ? pods_.size() : 0;
  r.cgroups = in.online.size();
  Outcome o;
  o.settings = lever_writes(in, cfg_, kBurstLevers);
  o.why = fmt::format("CPU burst {:.0f}% of the quota: an online pod's waits were its own throttling",
                      cfg_.online.burst_share * 100);
  o.report = std::move(r);
  return o;
}

}  // namespace

std::unique_ptr<Controller> make_burst_controller(const Config& cfg) { return std::make_unique<BurstController>(cfg); }

}  // namespace khagent
