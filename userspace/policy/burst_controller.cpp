#include "khagent/policy/burst_controller.h"

#include <algorithm>
#include <array>
#include <deque>
#include <map>

#include <fmt/format.h>

#include "khagent/model/histogram.h"
#include "khagent/policy/controllers.h"
#include "khagent/policy/lever_table.h"

namespace khagent {

const char* verdict_name(BurstPod::Verdict v) {
  switch (v) {
    case BurstPod::Verdict::NoThrottling: return "not-throttled";
    case BurstPod::Verdict::TooFew: return "too-few";
    case BurstPod::Verdict::NotSelfThrottled: return "not-self-throttled";
    case BurstPod::Verdict::SelfThrottled: return "self-throttled";
  }
  return "not-throttled";
}

const char* refusal_name(BurstPod::Refusal r) {
  switch (r) {
    case BurstPod::Refusal::None: return "none";
    case BurstPod::Refusal::LeverOff: return "lever_off";
    case BurstPod::Refusal::NotAPod: return "not_a_pod";
    case BurstPod::Refusal::NoQuota: return "no_quota";
    case BurstPod::Refusal::NoBurstFile: return "no_burst_file";
    case BurstPod::Refusal::Foreign: return "foreign_burst";
  }
  return "none";
}

std::string refusal_text(BurstPod::Refusal r) {
  switch (r) {
    case BurstPod::Refusal::None: return "";
    case BurstPod::Refusal::LeverOff: return "online.burst_share is 0";
    case BurstPod::Refusal::NotAPod: return "these are online cgroups outside pods, summed: no one cgroup to write";
    case BurstPod::Refusal::NoQuota:
      return "neither the pod nor its containers has a CPU quota: an ancestor's quota throttles it";
    case BurstPod::Refusal::NoBurstFile: return "this kernel has no burst file (5.14+ has it)";
    case BurstPod::Refusal::Foreign:
      return "each of its cgroups with a quota already has a burst khagent did not write (left alone)";
  }
  return "";
}

namespace {

constexpr std::array<Lever, 1> kBurstLevers = {Lever::Burst};
// Periods the kernel throttled a pod in, within the window, that are enough
// to judge it with fewer than online.min_waits waits: the count is the
// kernel's, not a sample of waits.
constexpr uint64_t kMinThrottledPeriods = 2;

bool listed(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

void add_load(OnlinePodLoad& sum, const OnlinePodLoad& p, bool minus) {
  auto op = [minus](uint64_t& a, uint64_t b) { a = minus ? a - std::min(a, b) : a + b; };
  op(sum.waits, p.waits);
  op(sum.wait_ns, p.wait_ns);
  op(sum.throttled_wait_ns, p.throttled_wait_ns);
  op(sum.offline_wait_ns, p.offline_wait_ns);
  op(sum.stolen_wait_ns, p.stolen_wait_ns);
  op(sum.throttled_periods, p.throttled_periods);
  op(sum.throttled_ns, p.throttled_ns);
  for (size_t i = 0; i < sum.hist.size(); i++) op(sum.hist[i], p.hist[i]);
}

// A pod's loads over the last ticks, and their sum.
struct Window {
  std::deque<std::pair<uint64_t, OnlinePodLoad>> ticks;  // (time, load), oldest first
  OnlinePodLoad sum;
};

double share(uint64_t part, uint64_t whole) {
  return whole ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

// The verdict on a window's sum.
void judge_window(const OnlinePodLoad& s, const OnlineConfig& o, BurstPod& bp) {
  bp.waits = s.waits;
  bp.wait_ns = s.wait_ns;
  bp.throttled_wait_ns = s.throttled_wait_ns;
  bp.throttled_periods = s.throttled_periods;
  bp.wait_p99_us = hist_count(s.hist) ? hist_quantile(s.hist, 0.99) / 1000.0 : s.wait_p99_us;
  const double thr = share(s.throttled_wait_ns, s.wait_ns);
  const std::string figures = fmt::format(
      "over {:.1f} s: {} waits, {:.1f} ms waited, {:.0f}% of it its own throttling ({} periods throttled), p99 "
      "{:.1f} ms",
      bp.window_s, s.waits, static_cast<double>(s.wait_ns) / 1e6, 100 * thr, s.throttled_periods,
      bp.wait_p99_us / 1000);
  if (s.throttled_wait_ns == 0) {
    bp.verdict = BurstPod::Verdict::NoThrottling;
    bp.why = figures;
  } else if (s.waits < o.min_waits && s.throttled_periods < kMinThrottledPeriods) {
    bp.verdict = BurstPod::Verdict::TooFew;
    bp.why = fmt::format("{}: too few to judge (needs {} waits or {} throttled periods)", figures, o.min_waits,
                         kMinThrottledPeriods);
  } else if (bp.wait_p99_us > o.wait_p99_target_us && thr >= o.self_throttle_share) {
    bp.verdict = BurstPod::Verdict::SelfThrottled;
    bp.why = fmt::format("{}: over the {:.1f} ms target and mostly its own throttling: its CPU limit is too small",
                         figures, o.wait_p99_target_us / 1000);
  } else {
    bp.verdict = BurstPod::Verdict::NotSelfThrottled;
    bp.why = fmt::format("{}: {}", figures,
                         bp.wait_p99_us > o.wait_p99_target_us
                             ? fmt::format("its own throttling under {:.0f}% of its wait", 100 * o.self_throttle_share)
                             : fmt::format("p99 within the {:.1f} ms target", o.wait_p99_target_us / 1000));
  }
}

class BurstController : public Controller {
 public:
  explicit BurstController(const Config& cfg) : cfg_(cfg) {}
  const char* name() const override { return "burst"; }
  std::span<const Lever> levers() const override { return kBurstLevers; }
  Outcome step(const TickView& v) override;

 private:
  bool on() const { return cfg_.online.burst_share > 0; }
  // The pod's window with this tick's load in it, its oldest ticks dropped.
  const Window& advance(const OnlinePodLoad& p, uint64_t now_ns);
  BurstPod judge(const OnlinePodLoad& p, const TickView& v);
  // The pod's cgroups that get a burst: itself and its containers, those
  // with a quota and no burst of someone else's; why none, if none.
  BurstPod::Refusal cgroups_of(const std::string& pod, const TickView& v, std::vector<OfflineTarget>& out,
                               BurstReport& r) const;
  void refuse(BurstPod& bp, BurstPod::Refusal why);

  const Config& cfg_;
  std::map<std::string, Window> windows_;             // online pods with throttled waits in the window
  std::map<std::string, std::string> pods_;           // online pods given CPU burst, and why
  std::map<std::string, BurstPod::Refusal> refused_;  // self-throttled pods refused one, and why
};

const Window& BurstController::advance(const OnlinePodLoad& p, uint64_t now_ns) {
  Window& w = windows_[p.path];
  w.ticks.emplace_back(now_ns, p);
  add_load(w.sum, p, false);
  while (!w.ticks.empty() && now_ns - w.ticks.front().first >= cfg_.online.self_throttle_window_ns) {
    add_load(w.sum, w.ticks.front().second, true);
    w.ticks.pop_front();
  }
  return w;
}

void BurstController::refuse(BurstPod& bp, BurstPod::Refusal why) {
  bp.burst = BurstPod::Burst::Refused;
  bp.refusal = why;
  auto [it, added] = refused_.emplace(bp.path, why);
  bp.first = added || it->second != why;
  it->second = why;
}

BurstPod BurstController::judge(const OnlinePodLoad& p, const TickView& v) {
  BurstPod bp;
  bp.path = p.path;
  // Only pods with throttled waits keep a window: most pods are never
  // throttled, and a window holds a histogram a tick.
  auto it = windows_.find(p.path);
  if (p.throttled_wait_ns || it != windows_.end()) {
    const Window& w = advance(p, v.now_ns);
    bp.window_s = static_cast<double>(v.now_ns - w.ticks.front().first + v.node.interval_ns) / 1e9;
    judge_window(w.sum, cfg_.online, bp);
    if (w.sum.throttled_wait_ns == 0) windows_.erase(p.path);
  } else {
    bp.window_s = static_cast<double>(v.node.interval_ns) / 1e9;  // this tick
    bp.waits = p.waits;
    bp.wait_ns = p.wait_ns;
    bp.wait_p99_us = p.wait_p99_us;
  }
  // A refusal is told once while the pod lives (refused_ is cleared when
  // it goes), however often its verdict comes and goes.
  if (bp.verdict != BurstPod::Verdict::SelfThrottled) {
    if (pods_.count(p.path)) bp.burst = BurstPod::Burst::InForce;  // its cgroups are checked in step()
  } else if (!on()) {
    refuse(bp, BurstPod::Refusal::LeverOff);
  } else if (!listed(v.online_pods, p.path)) {
    refuse(bp, BurstPod::Refusal::NotAPod);
  } else {
    // Wanted: given once its cgroups can take it (step()).
    bp.burst = pods_.count(p.path) ? BurstPod::Burst::InForce : BurstPod::Burst::Given;
  }
  return bp;
}

BurstPod::Refusal BurstController::cgroups_of(const std::string& pod, const TickView& v,
                                              std::vector<OfflineTarget>& out, BurstReport& r) const {
  // The kubelet puts the pod's limit on the pod and each container's on
  // the container: either can throttle, so each gets its burst.
  std::vector<std::string> cgroups{pod};
  const auto& children = v.snap.children(pod);
  cgroups.insert(cgroups.end(), children.begin(), children.end());
  size_t quotas = 0, foreign = 0;
  for (const auto& cg : cgroups) {
    OfflineTarget t;
    t.path = cg;
    t.kind = TargetKind::OnlinePod;
    t.quota = v.snap.cpu_quota(cg);
    if (!t.quota || !t.quota->quota_us) continue;  // no quota: nothing throttles it
    quotas++;
    // A burst khagent did not write is someone else's: left alone.
    if (!v.ours(cg, Knob::Burst)) {
      const auto& cur = v.snap.cpu_burst(cg);
      if (!cur || *cur != 0) {
        r.notes.push_back({cur ? BurstNote::Kind::Foreign : BurstNote::Kind::NoBurstFile, cg, cur.value_or(0), pod});
        foreign += cur ? 1 : 0;
        continue;
      }
    }
    out.push_back(std::move(t));
  }
  if (quotas == 0) return BurstPod::Refusal::NoQuota;
  if (std::any_of(out.begin(), out.end(), [&](const OfflineTarget& t) { return listed(cgroups, t.path); }))
    return BurstPod::Refusal::None;
  return foreign ? BurstPod::Refusal::Foreign : BurstPod::Refusal::NoBurstFile;
}

Outcome BurstController::step(const TickView& v) {
  BurstReport r;
  r.share = cfg_.online.burst_share;
  ControllerInput in = controller_input(v.node, 0, v.now_ns);
  for (const auto& p : in.online_pods) r.online.push_back(judge(p, v));
  // A pod keeps its burst while it lives (a burst costs nothing while
  // unused); one no longer online is forgotten, its originals restored as
  // no longer wanted.
  auto gone = [&](const auto& kv) { return !listed(v.online_pods, kv.first); };
  std::erase_if(pods_, gone);
  std::erase_if(refused_, [&](const auto& kv) {
    return std::none_of(r.online.begin(), r.online.end(), [&](const BurstPod& p) { return p.path == kv.first; });
  });
  std::erase_if(windows_, [&](const auto& kv) {
    return std::none_of(r.online.begin(), r.online.end(), [&](const BurstPod& p) { return p.path == kv.first; });
  });
  LeverInput li;
  std::vector<std::pair<BurstPod*, std::vector<std::string>>> given;  // pods and their cgroups written
  if (on()) {
    for (auto& bp : r.online) {
      if (bp.burst != BurstPod::Burst::Given && bp.burst != BurstPod::Burst::InForce) continue;
      const size_t before = li.online.size();
      const BurstPod::Refusal why = cgroups_of(bp.path, v, li.online, r);
      if (why != BurstPod::Refusal::None) {
        // Not given (or no longer its own: someone else's burst on each
        // cgroup): asked again next tick, told once.
        refuse(bp, why);
        continue;
      }
      if (bp.burst == BurstPod::Burst::Given) {
        pods_.emplace(bp.path, bp.why);
        bp.first = true;
        refused_.erase(bp.path);
        // Judged again on what it does with the burst, not on the waits that won it.
        windows_.erase(bp.path);
      }
      auto& g = given.emplace_back(&bp, std::vector<std::string>{}).second;
      for (size_t i = before; i < li.online.size(); i++) g.push_back(li.online[i].path);
      bp.cgroups = g.size();
      r.pods++;
    }
  }
  r.cgroups = li.online.size();
  Outcome o;
  o.settings = lever_writes(li, cfg_, kBurstLevers);
  for (auto& [bp, cgroups] : given)
    for (const auto& s : o.settings)
      if (const auto* b = std::get_if<CpuBurst>(&s.value); b && listed(cgroups, s.cgroup))
        bp->burst_us = std::max(bp->burst_us, b->burst_us);
  std::sort(r.online.begin(), r.online.end(), [](const BurstPod& a, const BurstPod& b) { return a.path < b.path; });
  o.why = fmt::format("CPU burst {:.0f}% of the quota: an online pod's waits were its own throttling",
                      cfg_.online.burst_share * 100);
  o.report = std::move(r);
  return o;
}

}  // namespace

std::unique_ptr<Controller> make_burst_controller(const Config& cfg) { return std::make_unique<BurstController>(cfg); }

}  // namespace khagent
