#include "khagent/policy/io_controller.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "khagent/policy/controllers.h"
#include "khagent/policy/lever_table.h"

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

double per_s(uint64_t n, uint64_t interval_ns) {
  return static_cast<double>(n) * 1e9 / static_cast<double>(interval_ns);
}

std::optional<uint64_t>* key_of(IoLimit& l, int i) {
  std::optional<uint64_t>* k[4] = {&l.rbps, &l.wbps, &l.riops, &l.wiops};
  return k[i];
}
const std::optional<uint64_t>& key_value(const IoLimit& l, int i) {
  const std::optional<uint64_t>* k[4] = {&l.rbps, &l.wbps, &l.riops, &l.wiops};
  return *k[i];
}

uint64_t floor_of(const IoConfig& cfg, int i) { return i < 2 ? cfg.min_bps : cfg.min_iops; }

std::string limit_text(const IoLimit& l) {
  static const char* const kNames[4] = {"rbps", "wbps", "riops", "wiops"};
  std::string out;
  for (int i = 0; i < 4; i++) {
    const auto& v = key_value(l, i);
    if (!v) continue;
    out += out.empty() ? "" : " ";
    out += std::string(kNames[i]) + "=" +
           (i < 2 ? fmt::format("{:.1f}MiB/s", static_cast<double>(*v) / 1048576.0) : std::to_string(*v));
  }
  return out.empty() ? "none" : out;
}

const IoPodStall* pod_of(const IoSignals& s, const std::string& pod) {
  for (const auto& p : s.online)
    if (p.pod == pod) return &p;
  return nullptr;  // gone, or unreadable: not stalling
}

// Whether every online pod that used `device` (and `pod`, whatever it
// used) stalled under half of the limit.
bool pods_calm(const IoSignals& s, const std::string& device, const std::string& pod, double stall_limit) {
  for (const auto& p : s.online)
    if ((p.pod == pod || p.devices.count(device)) && p.some_share > stall_limit / 2) return false;
  return true;
}

// Whether the cgroup moved less than half its limit on every key limited:
// the limit does not bind.
bool limit_unused(const IoSignals& s, const IoLimitHeld& h) {
  IoCounters moved;
  for (const auto& u : s.offline)
    if (u.cgroup == h.cgroup && u.device == h.limit.device) moved = u.delta;
  const uint64_t m[4] = {moved.rbytes, moved.wbytes, moved.rios, moved.wios};
  for (int i = 0; i < 4; i++)
    if (const auto& v = key_value(h.limit, i); v && per_s(m[i], s.interval_ns) >= static_cast<double>(*v) / 2)
      return false;
  return true;
}

std::string who(const IoLimitHeld& h) { return fmt::format("{} on {}", h.cgroup, h.limit.device); }

}  // namespace

namespace {

// The baselines: each pod that did IO with no offline IO on its devices
// this tick adds to its moving average; a pod gone is forgotten.
void update_baselines(const IoSignals& s, IoLimitState& st) {
  std::map<std::string, double> next;
  for (const auto& p : s.online) {
    auto it = st.baseline_wait_us.find(p.pod);
    uint64_t ios = 0;
    bool shared = false;
    for (const auto& [dev, d] : p.devices) {
      ios += d.rios + d.wios;
      for (const auto& u : s.offline) shared = shared || (u.device == dev && u.delta.rios + u.delta.wios > 0);
    }
    if (ios >= 20 && !shared) {
      const double w = wait_per_io_us(p);
      next[p.pod] = it == st.baseline_wait_us.end() ? w : 0.8 * it->second + 0.2 * w;
    } else if (it != st.baseline_wait_us.end()) {
      next[p.pod] = it->second;
    }
  }
  st.baseline_wait_us = std::move(next);
}

// Whether the pod waits per IO more than its baseline allows (true when
// it has no baseline yet).
bool slowed(const IoLimitState& st, const std::string& pod, double wait_us) {
  auto it = st.baseline_wait_us.find(pod);
  return it == st.baseline_wait_us.end() || wait_us > it->second * kIoBaselineSlack;
}

std::string baseline_text(const IoLimitState& st, const std::string& pod) {
  auto it = st.baseline_wait_us.find(pod);
  return it == st.baseline_wait_us.end() ? std::string("no baseline yet")
                                         : fmt::format("{:.0f} us per IO alone", it->second);
}

}  // namespace

void io_limit_step(IoReport& r, const IoConfig& cfg, uint64_t now_ns, IoLimitState& st) {
  const IoSignals& s = r.signals;
  if (s.interval_ns) {
    update_baselines(s, st);
    std::vector<IoLimitHeld> keep;
    for (auto& h : st.held) {
      const IoPodStall* pod = pod_of(s, h.pod);
      // The pod's stall and wait per IO over a window of ticks (from the
      // last step, then io.verdict_after long each): verdicts and tighter
      // steps go by these, not by one tick's.
      if (pod) {
        uint64_t ios = 0;
        for (const auto& [dev, d] : pod->devices) ios += d.rios + d.wios;
        h.since_stall_us += pod->some_us;
        h.since_ios += ios;
      }
      h.since_ns += s.interval_ns;
      const bool window_full = now_ns - h.window_ns >= cfg.verdict_after_ns;
      const double w = static_cast<double>(h.since_stall_us) / static_cast<double>(std::max<uint64_t>(h.since_ios, 1));
      const double sh =
          static_cast<double>(h.since_stall_us) * 1000.0 / static_cast<double>(std::max<uint64_t>(h.since_ns, 1));
      if (window_full) {
        h.window_ns = now_ns;
        h.since_stall_us = h.since_ios = h.since_ns = 0;
      }
      if (!h.judged) {
        if (!window_full) {
          keep.push_back(std::move(h));
          continue;
        }
        // Helped, over the ticks since the step: the pod's wait per IO fell
        // by a quarter (or to its baseline), or it stalled under the limit.
        const bool helped = sh <= cfg.stall_limit || w < h.wait_before * 0.75 || !slowed(st, h.pod, w);
        const std::string figures = fmt::format(
            "{} waited {:.0f} us per IO ({:.0f}% stalled) before the step, {:.0f} us ({:.0f}%) over the {:.1f} s after",
            h.pod, h.wait_before, h.stall_before * 100, w, sh * 100, static_cast<double>(now_ns - h.step_ns) / 1e9);
        if (!helped && h.steps == 1) {
          st.hold_off_until[{h.cgroup, h.limit.device}] = now_ns + cfg.hold_off_ns;
          r.steps.push_back({"useless", fmt::format("io limit useless: {}; {} lifted, not limited there for {:.0f} s",
                                                    figures, who(h), static_cast<double>(cfg.hold_off_ns) / 1e9)});
          continue;
        }
        h.judged = true;
        if (!helped) {  // a tighter step that did not help: back to the last one, and no tighter
          r.steps.push_back(
              {"useless", fmt::format("io limit useless: {}; {} back to {}", figures, who(h), limit_text(h.previous))});
          h.limit = h.previous;
          h.settled = true;
          h.steps--;
        } else {
          r.steps.push_back({"helped", fmt::format("io limit helped: {} ({})", figures, who(h))});
        }
      }
      if (limit_unused(s, h) || pods_calm(s, h.limit.device, h.pod, cfg.stall_limit)) {
        if (!h.calm_since_ns) h.calm_since_ns = now_ns;
        if (now_ns - h.calm_since_ns >= cfg.calm_after_ns) {
          h.calm_since_ns = now_ns;
          IoLimit next = h.limit;
          bool above = true;
          for (int i = 0; i < 4; i++)
            if (auto* k = key_of(next, i); k->has_value()) {
              *k = static_cast<uint64_t>(static_cast<double>(**k) / cfg.limit_step);
              above = above && **k >= key_value(h.before, i).value_or(0);
            }
          if (above) {
            r.steps.push_back(
                {"lifted", fmt::format("io limit lifted: online calm or the limit unused on {} for "
                                       "{:.0f} s; {} back to no limit",
                                       h.limit.device, static_cast<double>(cfg.calm_after_ns) / 1e9, who(h))});
            continue;
          }
          r.steps.push_back(
              {"raised", fmt::format("io limit raised: online calm or the limit unused on {}; {}: {} -> {}",
                                     h.limit.device, who(h), limit_text(h.limit), limit_text(next))});
          h.previous = h.limit;
          h.limit = next;
          h.settled = false;
        }
      } else if (window_full && sh > cfg.stall_limit && !h.settled && slowed(st, h.pod, w)) {
        h.calm_since_ns = 0;
        IoLimit next = h.limit;
        for (int i = 0; i < 4; i++)
          if (auto* k = key_of(next, i); k->has_value())
            *k = std::max(floor_of(cfg, i), static_cast<uint64_t>(static_cast<double>(**k) * cfg.limit_step));
        if (next != h.limit) {
          r.steps.push_back(
              {"tightened", fmt::format("io limit tightened: {} still stalls {:.0f}% ({:.0f} us per IO; {}); "
                                        "{}: {} -> {}",
                                        h.pod, sh * 100, w, baseline_text(st, h.pod), who(h), limit_text(h.limit),
                                        limit_text(next))});
          h.previous = h.limit;
          h.limit = next;
          h.stall_before = sh;
          h.wait_before = w;
          h.step_ns = h.window_ns = now_ns;
          h.judged = false;
          h.steps++;
        }
      } else {
        h.calm_since_ns = 0;
      }
      keep.push_back(std::move(h));
    }
    st.held = std::move(keep);

    bool due = false;
    if (r.stalled && r.aggressor && r.aggressor_on_pods_device) {
      const auto& a = *r.aggressor;
      const bool held =
          std::any_of(st.held.begin(), st.held.end(), [&](const IoLimitHeld& h) { return h.cgroup == a.cgroup; });
      auto off = st.hold_off_until.find({a.cgroup, a.device});
      const bool holding_off = off != st.hold_off_until.end() && now_ns < off->second;
      due = !held && !holding_off && slowed(st, r.stalled->pod, wait_per_io_us(*r.stalled));
      if (due) {
        const std::pair<std::string, std::string> key{a.cgroup, a.device};
        st.due_ticks = st.due == key ? st.due_ticks + 1 : 1;
        st.due = key;
      }
      if (due && st.due_ticks >= 2) {
        st.due_ticks = 0;
        IoLimitHeld h;
        h.cgroup = a.cgroup;
        h.pod = r.stalled->pod;
        h.limit.device = h.before.device = a.device;
        const uint64_t moved[4] = {a.delta.rbytes, a.delta.wbytes, a.delta.rios, a.delta.wios};
        for (int i = 0; i < 4; i++) {
          const double rate = per_s(moved[i], s.interval_ns);
          if (rate < 2.0 * static_cast<double>(floor_of(cfg, i))) continue;  // too little to be worth a limit
          *key_of(h.before, i) = static_cast<uint64_t>(rate);
          *key_of(h.limit, i) = std::max(floor_of(cfg, i), static_cast<uint64_t>(rate * cfg.limit_step));
        }
        if (h.limit.rbps || h.limit.wbps || h.limit.riops || h.limit.wiops) {
          h.previous = IoLimit{a.device, std::nullopt, std::nullopt, std::nullopt, std::nullopt};
          h.stall_before = r.stalled->some_share;
          h.wait_before = wait_per_io_us(*r.stalled);
          h.step_ns = h.window_ns = now_ns;
          h.steps = 1;
          r.steps.push_back(
              {"limited", fmt::format("io limit: {} stalled on IO {:.0f}% ({:.0f} us per IO; {}); {} "
                                      "moved {}; limited to {}",
                                      h.pod, h.stall_before * 100, h.wait_before, baseline_text(st, h.pod), who(h),
                                      limit_text(h.before), limit_text(h.limit))});
          st.held.push_back(std::move(h));
        }
      }
    }
    if (!due) st.due_ticks = 0;
    for (auto it = st.hold_off_until.begin(); it != st.hold_off_until.end();)
      it = now_ns >= it->second ? st.hold_off_until.erase(it) : std::next(it);
  }
  r.limits = st.held;
}

namespace {

constexpr std::array<Lever, 1> kIoLevers = {Lever::IoLimit};

class IoController : public Controller {
 public:
  IoController(const Config& cfg, const NodeFacts& facts) : cfg_(cfg), limit_(cfg.io.limit && facts.io) {}
  const char* name() const override { return "io"; }
  std::span<const Lever> levers() const override {
    return limit_ ? std::span<const Lever>(kIoLevers) : std::span<const Lever>();
  }
  Outcome step(const TickView& v) override {
    std::vector<std::string> offline;
    offline.reserve(v.targets.size());
    for (const auto& t : v.targets)
      if (t.kind != TargetKind::OnlinePod) offline.push_back(t.path);
    IoReport r = io_judge(tracker_.step(v.snap, v.online_pods, offline), cfg_.io);
    Outcome o;
    if (limit_) {
      // A cgroup that is no longer a target: its limit goes with it.
      std::erase_if(state_.held, [&](const IoLimitHeld& h) {
        return std::find(offline.begin(), offline.end(), h.cgroup) == offline.end();
      });
      io_limit_step(r, cfg_.io, v.now_ns, state_);
      LeverInput li;
      li.targets = v.targets;
      for (const auto& h : state_.held) li.io_limits[h.cgroup] = h.limit;
      o.settings = lever_writes(li, cfg_, kIoLevers);
      for (const auto& s : r.steps) o.why += (o.why.empty() ? "" : "; ") + s.text;
    }
    o.report = std::move(r);
    return o;
  }

 private:
  const Config& cfg_;
  bool limit_;
  IoTracker tracker_;
  IoLimitState state_;
};

}  // namespace

std::unique_ptr<Controller> make_io_controller(const Config& cfg, const NodeFacts& facts) {
  return std::make_unique<IoController>(cfg, facts);
}

}  // namespace khagent
