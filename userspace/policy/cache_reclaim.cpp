#include "khagent/policy/cache_reclaim.h"

#include <algorithm>
#include <array>
#include <map>

#include <fmt/format.h>

#include "khagent/policy/controllers.h"
#include "khagent/policy/lever_table.h"
#include "khagent/signals/offline_memory.h"

namespace khagent {

const char* cache_reclaim_verdict_name(CacheReclaimVerdict v) {
  switch (v) {
    case CacheReclaimVerdict::Helped: return "helped";
    case CacheReclaimVerdict::Useless: return "useless";
    case CacheReclaimVerdict::Costly: return "costly";
  }
  return "";
}

const char* cache_reclaim_idle_name(CacheReclaimIdle i) {
  switch (i) {
    case CacheReclaimIdle::None: return "asked";
    case CacheReclaimIdle::Calm: return "calm";
    case CacheReclaimIdle::Paced: return "paced";
    case CacheReclaimIdle::NoCache: return "no_cache";
    case CacheReclaimIdle::NoCounters: return "no_counters";
  }
  return "";
}

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint32_t kMaxBackoff = 32;

CacheReclaimVerdict judge(const CacheReclaimWindow& before, const CacheReclaimWindow& after) {
  // More stall after the step than the noise of a window allows: the
  // reclaim (or what it evicted) cost online more than it gave back.
  if (after.stall_share > before.stall_share + std::max(0.02, 0.25 * before.stall_share))
    return CacheReclaimVerdict::Costly;
  // A fall, not a rate that merely crossed the threshold: online refaulting
  // about the threshold steadily (a working set a little larger than its
  // room) is not offline's doing, and steps there must back off.
  if (after.refault_rate <= 0.75 * before.refault_rate) return CacheReclaimVerdict::Helped;
  // Or the stall, what online pays, fell by a quarter from a share worth
  // counting while refaults held: seen on 6.12 (MGLRU), where a step took
  // online's stall from 12.6% to 0.1% with refaults at 152 then 144 MiB/s.
  if (before.stall_share >= 0.01 && after.stall_share <= 0.75 * before.stall_share &&
      after.refault_rate <= before.refault_rate)
    return CacheReclaimVerdict::Helped;
  return CacheReclaimVerdict::Useless;
}

}  // namespace

CacheReclaimReport cache_reclaim_step(const CacheReclaimInput& in, const MemoryConfig& cfg, CacheReclaimState& st) {
  CacheReclaimReport r;
  st.acc_ns += in.interval_ns;
  st.acc_refault += in.online_refault_bytes;
  st.acc_stall_us += in.online_stall_us;
  r.backoff = st.backoff;
  if (st.acc_ns < cfg.reclaim_interval_ns || st.acc_ns == 0) return r;
  CacheReclaimWindow w;
  w.seconds = static_cast<double>(st.acc_ns) / 1e9;
  w.refault_rate = static_cast<double>(st.acc_refault) / w.seconds;
  w.stall_share = static_cast<double>(st.acc_stall_us) / 1e6 / w.seconds;
  const uint64_t refaulted = st.acc_refault;
  st.acc_ns = st.acc_refault = st.acc_stall_us = 0;
  r.window = w;
  if (st.pending) {
    r.verdict = judge(st.before, w);
    r.before = st.before;
    st.pending = false;
    if (*r.verdict == CacheReclaimVerdict::Helped) st.backoff = 1;
    else st.backoff = std::min(kMaxBackoff, st.backoff * (*r.verdict == CacheReclaimVerdict::Costly ? 4 : 2));
    r.backoff = st.backoff;
  }
  for (const auto& p : in.parents) r.offline_inactive += p.inactive_file;
  if (!in.refaults_known) {
    r.idle = CacheReclaimIdle::NoCounters;
    return r;
  }
  if (w.refault_rate < static_cast<double>(cfg.reclaim_refault_rate_bytes)) {
    r.idle = CacheReclaimIdle::Calm;
    return r;
  }
  if (st.step_ns && in.now_ns < st.step_ns + cfg.reclaim_interval_ns * st.backoff) {
    r.idle = CacheReclaimIdle::Paced;
    return r;
  }
  const uint64_t want = std::max(cfg.reclaim_step_bytes, 4 * refaulted);
  for (const auto& p : in.parents)
    if (p.inactive_file >= kMiB) r.asks.emplace_back(p.path, std::min(p.inactive_file, want));
  if (r.asks.empty()) {
    r.idle = CacheReclaimIdle::NoCache;
    return r;
  }
  st.pending = true;
  st.before = w;
  st.step_ns = in.now_ns;
  return r;
}

namespace {

constexpr std::array<Lever, 1> kReclaimLevers = {Lever::Reclaim};

class CacheReclaimController : public Controller {
 public:
  CacheReclaimController(const Config& cfg, const NodeFacts& facts) : cfg_(cfg), facts_(facts) {}
  const char* name() const override { return "reclaim"; }
  std::span<const Lever> levers() const override { return kReclaimLevers; }
  Outcome step(const TickView& v) override;

 private:
  const Config& cfg_;
  NodeFacts facts_;
  CacheReclaimState state_;
  MemoryStallMeter stall_;
  FileRefaultMeter refaults_;
  uint64_t last_ns_ = 0;
};

Outcome CacheReclaimController::step(const TickView& v) {
  CacheReclaimInput in;
  in.now_ns = v.now_ns;
  in.interval_ns = last_ns_ && v.now_ns > last_ns_ ? v.now_ns - last_ns_ : 0;
  last_ns_ = v.now_ns;
  const FileRefaults f = refaults_.step(v.snap, v.online_pods);
  in.online_refault_bytes = f.bytes;
  in.refaults_known = f.known;
  in.online_stall_us = stall_.step(v.snap, v.online_pods).some_us;
  LeverInput li;
  li.targets = v.targets;
  for (const auto& t : v.targets) {
    if (t.kind == TargetKind::BestEffortPod || t.kind == TargetKind::OnlinePod) continue;  // parents only
    // A v1 pulse only where khagent holds the limit's original.
    if (!facts_.memory_v2 && !(v.ours && v.ours(t.path, Knob::Memory))) continue;
    const auto& u = v.snap.memory(t.path);
    if (u) in.parents.push_back({t.path, u.value().inactive_file});
  }
  CacheReclaimReport r = cache_reclaim_step(in, cfg_.memory, state_);
  for (const auto& [path, bytes] : r.asks) li.reclaim_asks[path] = bytes;
  Outcome o;
  o.settings = lever_writes(li, cfg_, kReclaimLevers);
  if (r.window)
    o.why = fmt::format("memory reclaim: online pods refaulted {:.1f} MiB/s of page cache over {:.1f} s",
                        r.window->refault_rate / 1048576.0, r.window->seconds);
  o.report = std::move(r);
  return o;
}

}  // namespace

std::unique_ptr<Controller> make_cache_reclaim_controller(const Config& cfg, const NodeFacts& facts) {
  return std::make_unique<CacheReclaimController>(cfg, facts);
}

}  // namespace khagent
