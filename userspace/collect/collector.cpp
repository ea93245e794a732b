#include "khagent/collect/collector.h"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <set>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "khagent/util/clock.h"

namespace khagent {

namespace {

constexpr uint64_t kRescanMinNs = 1000000000ULL;
constexpr uint64_t kRescanPeriodNs = 5000000000ULL;
// With file handles, ids resolve one by one and removals show as stale
// handles: the whole tree is walked only this often, as a safety net.
constexpr uint64_t kHandleRescanPeriodNs = 60000000000ULL;
// A full map is logged at most this often.
constexpr uint64_t kFullWarnPeriodNs = 60000000000ULL;

ThrottleCounters throttle_delta(const ThrottleCounters& now, const ThrottleCounters& before) {
  if (now.events < before.events || now.throttled_ns < before.throttled_ns) return now;
  return {now.events - before.events, now.throttled_ns - before.throttled_ns};
}

}  // namespace

Collector::Collector(MapSource& maps, CgroupIndex& index, ThrottleStatReader* cpu_stat, ThrottleSource source)
    : maps_(maps), index_(index), cpu_stat_(cpu_stat), source_(source) {}

Result<Sample> Collector::tick() { return tick_at(clock_ns(CLOCK_MONOTONIC), clock_ns(CLOCK_REALTIME)); }

Result<Sample> Collector::tick_at(uint64_t mono_ns, uint64_t real_ns) {
  if (auto r = maps_.read_into(raw_); !r) {
    raw_ = RawMaps{};  // the next read starts afresh
    return r.error();
  }
  TickWork w;
  w.filling = note_full_maps(mono_ns);
  find_removed(mono_ns, w);
  if (cpu_stat_) cpu_stat_->new_round();
  w.tick = ++tick_no_;

  Sample out;
  // About as many as last time when only changes are listed.
  out.cgroups.reserve(changes_only_ ? std::min(raw_.cgroups.size(), last_listed_ + last_listed_ / 4 + 16)
                                    : raw_.cgroups.size());
  out.ts_ns = real_ns;
  out.interval_ns = last_mono_ ? mono_ns - *last_mono_ : 0;
  out.throttle_source = source_;
  out.bpf_counters = raw_.counters;
  out.stall_total = raw_.stall;
  if (last_stall_ && raw_.stall.stolen_ns >= last_stall_->stolen_ns && raw_.stall.stalls >= last_stall_->stalls) {
    out.stall_interval_ns = raw_.stall.stolen_ns - last_stall_->stolen_ns;
    out.stall_interval_count = raw_.stall.stalls - last_stall_->stalls;
  }
  last_stall_ = raw_.stall;
  if (raw_.stall.cpus_failed && !stall_failure_logged_) {
    stall_failure_logged_ = true;
    spdlog::warn(
        "stall detector: the kernel refused to start the timer on {} CPU(s) ({}); waits through their stalls are "
        "blamed on whoever was current",
        raw_.stall.cpus_failed, std::strerror(-raw_.stall.err));
  }
  out.complete = !changes_only_;

  visit_cgroups(w, out);
  visit_holders(raw_, w.watch, w.tick, out);
  watch_ = std::move(w.watch);
  drop_released(w.dead, out);
  last_listed_ = out.cgroups.size();
  auto dead_pairs = visit_pairs(w, out);
  forget_dead(w.dead, dead_pairs);
  last_mono_ = mono_ns;
  return out;
}

bool Collector::note_full_maps(uint64_t mono_ns) {
  // The maps do not evict: an entry stays until it is deleted here, and an
  // insert into a full map fails (counted by the BPF side). When inserts
  // failed since the last tick, look for gone cgroups now (at most once a
  // second) rather than at the next periodic check.
  const auto& c = raw_.counters;
  const uint64_t full = c[KH_CNT_STATS_FULL] + c[KH_CNT_PAIRS_FULL];
  const bool filling = last_full_ && full > *last_full_;
  last_full_ = full;
  if (filling && (!last_full_warn_ || mono_ns - *last_full_warn_ >= kFullWarnPeriodNs)) {
    last_full_warn_ = mono_ns;
    spdlog::warn(
        "BPF maps full: {} cgroup and {} pair inserts failed since start ({} cgroups "
        "tracked); raise --max-cgroups if this node has that many live cgroups",
        c[KH_CNT_STATS_FULL], c[KH_CNT_PAIRS_FULL], raw_.cgroups.size());
  }
  return filling;
}

void Collector::find_removed(uint64_t mono_ns, TickWork& w) {
  // Removed cgroups the kernel reported: deleted now, whether or not they
  // were ever named. Where it reports every removal (none lost since the
  // last tick), idle cgroups need no liveness checks of their own.
  w.gone.insert(raw_.removed.begin(), raw_.removed.end());
  const uint64_t lost = raw_.counters[KH_CNT_REMOVALS_LOST];
  const bool removals_complete = maps_.reports_removals() && last_removals_lost_ && lost == *last_removals_lost_;
  last_removals_lost_ = lost;

  // Resolve ids: walk the tree again when unknown ids show up (at most once
  // a second) and every few seconds anyway, to notice removed cgroups.
  // With file handles (cgroup2 mounts, as root), new ids are opened one by
  // one and removed cgroups found by their stale handles; the walk is a
  // rare safety net. Without (test fixtures), walk as described.
  const bool handles = index_.handles();
  const bool unknown = resolve_new(w);
  const uint64_t period = handles ? kHandleRescanPeriodNs : kRescanPeriodNs;
  if (!last_rescan_ || ((unknown || w.filling) && !handles && mono_ns - *last_rescan_ >= kRescanMinNs) ||
      mono_ns - *last_rescan_ >= period) {
    auto n = index_.rescan();
    last_rescan_ = mono_ns;
    last_liveness_ = mono_ns;
    w.rescanned = n.ok();
    if (!n) spdlog::warn("cgroup rescan failed: {}", n.error().str());
  }
  // Between walks: every few seconds (every second while the maps are
  // full), the cgroups that were idle this interval are checked (an active
  // one cannot have been removed long ago; it is checked once it goes idle).
  if (handles && !w.rescanned && !removals_complete && last_liveness_ &&
      mono_ns - *last_liveness_ >= (w.filling ? kRescanMinNs : kRescanPeriodNs)) {
    last_liveness_ = mono_ns;
    for (const auto& [id, now] : raw_.cgroups) {
      auto it = cgroups_.find(id);
      if (it == cgroups_.end()) continue;
      const CgroupCounters& last = it->second.last_raw;
      bool idle = now.cpu_ns == last.cpu_ns && now.waits == last.waits;
      if (idle && index_.alive(id) == CgroupIndex::Liveness::Gone) w.gone.insert(id);
    }
  }
}

bool Collector::resolve_new(TickWork& w) {
  const bool handles = index_.handles();
  bool unknown = false;
  auto check_new = [&](uint64_t id) {
    if (cgroups_.count(id) || index_.path_of(id) || (handles && index_.resolve(id))) return true;
    unknown = true;
    if (!handles) return false;
    // Its handle is stale: removed before it was ever named. Delete it
    // now rather than at the next full walk.
    if (index_.alive(id) == CgroupIndex::Liveness::Gone) w.gone.insert(id);
    return true;
  };
  // Where the source read only what moved, a new id is among the moved
  // ones, or still waiting for its name (pending_).
  if (changes_only_ && raw_.moved_only) {
    for (uint64_t id : raw_.moved)
      if (!check_new(id)) break;
    // Without handles one unknown id is enough (the tree is walked); with
    // them, each id waiting for its name is tried by handle.
    if (handles || !unknown)
      for (uint64_t id : pending_)
        if (!check_new(id)) break;
  } else {
    for (const auto& [id, _] : raw_.cgroups)
      if (!check_new(id)) break;
  }
  return unknown;
}

void Collector::visit_cgroups(TickWork& w, Sample& out) {
  // Each entry to look at this tick (all of them, or where the source read
  // only what moved: the moved ones, those waiting for a name or reported
  // removed, and those whose throttling is read or may have changed).
  if (changes_only_ && raw_.moved_only && !w.rescanned) {
    std::unordered_set<uint64_t> todo(raw_.moved.begin(), raw_.moved.end());
    todo.insert(pending_.begin(), pending_.end());
    todo.insert(watch_.begin(), watch_.end());
    todo.insert(w.gone.begin(), w.gone.end());
    for (const auto& [id, _] : raw_.throttle) todo.insert(id);
    if (raw_.reclaim_moved_known) todo.insert(raw_.reclaim_moved.begin(), raw_.reclaim_moved.end());
    else
      for (const auto& [id, _] : raw_.reclaim) todo.insert(id);
    for (uint64_t id : todo) {
      auto r = raw_.cgroups.find(id);
      if (r != raw_.cgroups.end()) {
        visit_cgroup(id, r->second, w, out);
        continue;
      }
      pending_.erase(id);
      auto it = cgroups_.find(id);
      if (it != cgroups_.end() && w.gone.count(id)) drop(it, out);  // its entry went with it
    }
    return;
  }
  pending_.clear();
  for (const auto& [id, now] : raw_.cgroups) visit_cgroup(id, now, w, out);
  // Entries deleted (here, or by another reader of the pins): drop our
  // state too. (A source that reads only what moved keeps every entry
  // until a whole read.)
  for (auto it = cgroups_.begin(); it != cgroups_.end();) {
    if (it->second.seen_tick != w.tick) {
      it = drop(it, out);
    } else {
      ++it;
    }
  }
}

void Collector::visit_cgroup(uint64_t id, const CgroupCounters& now, TickWork& w, Sample& out) {
  auto it = cgroups_.find(id);
  if ((w.rescanned && !index_.path_of(id)) || w.gone.count(id)) {
    // Not in the tree after a fresh walk: the cgroup was removed (or is not
    // visible from this mount namespace). Delete its entries.
    w.dead.push_back(id);
    pending_.erase(id);
    if (it != cgroups_.end()) drop(it, out);
    return;
  }
  bool named = false;
  if (it == cgroups_.end()) {
    auto path = index_.path_of(id);
    if (!path) {  // new since the last walk: resolved on a later tick
      pending_.insert(id);
      return;
    }
    pending_.erase(id);
    CgState st;
    st.path = *path;
    st.parent = hold_parent(*path);
    // Held before as an ancestor (tasks of its own showed up): one
    // throttling state, so nothing is counted twice.
    if (auto h = holders_.find(id); h != holders_.end()) st.thr = h->second.thr;
    // Counts accumulated before the first tick belong to this agent run
    // (the maps are created at start) and are kept.
    it = cgroups_.emplace(id, std::move(st)).first;
    named = true;
  }
  CgState& st = it->second;
  st.seen_tick = w.tick;
  // Most cgroups of a big node did nothing this tick: no histogram work.
  const bool moved = now.waits != st.last_raw.waits || now.cpu_ns != st.last_raw.cpu_ns ||
                     now.wait_ns != st.last_raw.wait_ns || now.preemptions != st.last_raw.preemptions;
  // cpu.stat is read where throttling can have moved: a wait of the
  // cgroup began throttled (its own quota or an ancestor's) in the
  // interval, or the last reading grew (the tail of a throttled stretch),
  // and once for the base. Reading it for every active cgroup was a tenth
  // of the tick at thousands of cgroups, nearly always to find nothing.
  const bool throttled_wait = moved && now.cause_ns[KH_WAIT_THROTTLED] != st.last_raw.cause_ns[KH_WAIT_THROTTLED];
  ThrottleCounters thr;
  if (source_ == ThrottleSource::Fentry || throttled_wait || st.thr_watch || !st.thr.seen)
    thr = throttle_of(id, st.path, st.thr, raw_);
  st.thr_watch = source_ == ThrottleSource::CpuStat && (throttled_wait || thr.events || thr.throttled_ns);
  if (st.thr_watch) w.watch.push_back(id);
  ReclaimCounters reclaim;
  if (auto r = raw_.reclaim.find(id); r != raw_.reclaim.end()) {
    reclaim = reclaim_delta(r->second, st.last_reclaim);
    st.last_reclaim = r->second;
  }
  if (changes_only_ && !moved && !named && thr.events == 0 && thr.throttled_ns == 0 && !reclaim.any()) return;
  // Built in place: a sample carries two sets of counters with their
  // histograms (about 2 KB), and copying it was most of a tick's work.
  CgroupSample& cs = out.cgroups.emplace_back();
  cs.id = id;
  cs.path = st.path;
  if (moved) {
    counters_delta_into(cs.interval, now, st.last_raw);
    counters_advance(st.last_raw, now);
    if (totals_) counters_add(st.total, cs.interval);  // the agent keeps no totals
  }
  if (totals_) cs.total = st.total;
  cs.throttle_interval = thr;
  cs.throttle_total = st.thr.total;
  cs.reclaim_interval = reclaim;
  cs.reclaim_total = st.last_reclaim;
}

std::vector<std::pair<uint64_t, uint64_t>> Collector::visit_pairs(const TickWork& w, Sample& out) {
  PairWork pw{w.tick, std::unordered_set<uint64_t>(w.dead.begin(), w.dead.end()), {}};
  if (changes_only_ && raw_.pairs_moved_only) {
    // Only the pairs that moved, and those still waiting for their victim's
    // name; the others keep their state. Pairs of dead cgroups are looked
    // for only on a tick that found dead cgroups.
    for (uint32_t i : raw_.pairs_moved)
      if (i < raw_.pairs.size()) visit_pair(raw_.pairs[i], pw, out);
    if (!pending_pairs_.empty()) {
      std::vector<RawPair> retry;
      retry.reserve(pending_pairs_.size());
      for (const auto& [key, p] : pending_pairs_) retry.push_back(p);
      for (const auto& p : retry) visit_pair(p, pw, out);
    }
    if (!pw.dead.empty()) {
      for (auto it = pairs_.begin(); it != pairs_.end();) {
        if (pw.is_dead(it->first.first, it->first.second)) {
          pw.dead_pairs.push_back(it->first);
          it = pairs_.erase(it);
        } else {
          ++it;
        }
      }
    }
    return std::move(pw.dead_pairs);
  }
  out.pairs.reserve(raw_.pairs.size());
  pending_pairs_.clear();  // every pair is here
  for (const auto& p : raw_.pairs) visit_pair(p, pw, out);
  for (auto it = pairs_.begin(); it != pairs_.end();) {
    if (it->second.seen_tick != w.tick) it = pairs_.erase(it);
    else ++it;
  }
  return std::move(pw.dead_pairs);
}

void Collector::visit_pair(const RawPair& p, PairWork& pw, Sample& out) {
  auto key = std::make_pair(p.victim, p.aggressor);
  if (pw.is_dead(p.victim, p.aggressor)) {
    pw.dead_pairs.push_back(key);
    pending_pairs_.erase(key);
    return;
  }
  if (!cgroups_.count(p.victim)) {
    // A pair whose victim is unknown is kept in the map until the victim
    // resolves or is found dead; only dead ones are deleted.
    pending_pairs_[key] = p;
    return;
  }
  pending_pairs_.erase(key);
  PairState& ps = pairs_[key];
  ps.seen_tick = pw.tick;
  uint64_t dw = p.wait_ns >= ps.last_raw.wait_ns ? p.wait_ns - ps.last_raw.wait_ns : p.wait_ns;
  uint64_t dc = p.count >= ps.last_raw.count ? p.count - ps.last_raw.count : p.count;
  ps.last_raw = p;
  ps.wait_ns_total += dw;
  ps.count_total += dc;
  // Thousands of pairs on a big node, most of them quiet in any one tick.
  if (changes_only_ && dw == 0 && dc == 0) return;
  out.pairs.push_back(PairSample{p.victim, p.aggressor, ps.wait_ns_total, ps.count_total, dw});
}

void Collector::forget_dead(const std::vector<uint64_t>& dead,
                            const std::vector<std::pair<uint64_t, uint64_t>>& dead_pairs) {
  if (dead.empty() && dead_pairs.empty()) return;
  maps_.forget(dead, dead_pairs);
  for (uint64_t id : dead) raw_.cgroups.erase(id);  // a source reading only what moved keeps the rest
  forgotten_ += dead.size() + dead_pairs.size();
  spdlog::debug("forgot {} gone cgroups and {} pairs", dead.size(), dead_pairs.size());
}

ThrottleCounters Collector::throttle_of(uint64_t id, const CgroupPath& path, ThrState& t, const RawMaps& raw) {
  ThrottleCounters d;
  if (source_ == ThrottleSource::Fentry) {
    auto it = raw.throttle.find(id);
    if (it != raw.throttle.end()) {
      d = throttle_delta(it->second, t.last);
      t.last = it->second;
    }
  } else if (source_ == ThrottleSource::CpuStat && cpu_stat_) {
    if (auto v = cpu_stat_->read(id, path)) {
      // cpu.stat counts from the cgroup's creation: the first reading is the base.
      if (t.seen) d = throttle_delta(*v, t.last);
      t.last = *v;
      t.seen = true;
    }
  }
  t.total.events += d.events;
  t.total.throttled_ns += d.throttled_ns;
  return d;
}

uint64_t Collector::hold_parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return 0;  // the root's throttling is nobody's
  std::string parent = path.substr(0, slash);
  auto id = index_.id_of(parent);
  if (!id) return 0;
  auto [it, fresh] = holders_.try_emplace(*id);
  it->second.refs++;
  if (fresh) {
    it->second.path = parent;
    // cpu.stat: the base (a first reading), before any throttling below it
    // is seen. (Fentry entries count from the maps' creation: no base.)
    if (source_ == ThrottleSource::CpuStat) {
      static const RawMaps kNoMaps;
      throttle_of(*id, it->second.path, it->second.thr, kNoMaps);
    }
    uint64_t up = hold_parent(parent);
    holders_.at(*id).parent = up;  // the recursion may have rehashed
  }
  return *id;
}

void Collector::release(uint64_t holder) {
  auto it = holders_.find(holder);
  if (it != holders_.end() && --it->second.refs == 0) released_.push_back(holder);
}

void Collector::drop_released(std::vector<uint64_t>& dead, Sample& out) {
  // At the end of the tick: a holder let go of and held again in the same
  // tick (the only pod of a QoS root replaced) keeps its state.
  for (size_t i = 0; i < released_.size(); i++) {  // grows as parents are let go of
    const uint64_t id = released_[i];
    auto it = holders_.find(id);
    if (it == holders_.end() || it->second.refs > 0) continue;
    const uint64_t up = it->second.parent;
    holders_.erase(it);
    if (!cgroups_.count(id)) {  // else still tracked as a cgroup of its own
      out.removed.push_back(id);
      // Its throttling entry (fentry) goes too: held again later, it counts from zero.
      if (!pending_.count(id)) dead.push_back(id);
    }
    release(up);
  }
  released_.clear();
}

std::unordered_map<uint64_t, Collector::CgState>::iterator Collector::drop(
    std::unordered_map<uint64_t, CgState>::iterator it, Sample& out) {
  const uint64_t parent = it->second.parent;
  // Still an ancestor of tracked cgroups: its throttling state goes back.
  if (auto h = holders_.find(it->first); h != holders_.end()) h->second.thr = it->second.thr;
  out.removed.push_back(it->first);
  auto next = cgroups_.erase(it);
  release(parent);
  return next;
}

void Collector::visit_holders(const RawMaps& raw, std::vector<uint64_t>& below, uint64_t tick, Sample& out) {
  if (holders_.empty()) return;
  std::vector<uint64_t> due;
  auto mark = [&](uint64_t id) {
    auto it = holders_.find(id);
    if (it == holders_.end() || it->second.due_tick == tick) return false;
    it->second.due_tick = tick;
    due.push_back(id);
    return true;
  };
  if (source_ == ThrottleSource::Fentry) {
    // Entries exist for throttled cfs_rqs only: few, and exact.
    for (const auto& [id, _] : raw.throttle) mark(id);
  } else if (source_ == ThrottleSource::CpuStat && cpu_stat_) {
    // Read while a cgroup below has throttled waits, and once more after.
    std::vector<uint64_t> next;
    for (uint64_t id : below) {
      auto c = cgroups_.find(id);
      for (uint64_t p = c == cgroups_.end() ? 0 : c->second.parent; p && mark(p); p = holders_.at(p).parent)
        next.push_back(p);
    }
    for (uint64_t id : holder_watch_) mark(id);
    holder_watch_ = std::move(next);
  }
  for (uint64_t id : due) {
    // A cgroup with tasks of its own and children (possible without the
    // cpu controller on v2): its throttling is read as a cgroup's, at the
    // next tick.
    if (auto c = cgroups_.find(id); c != cgroups_.end()) {
      if (source_ == ThrottleSource::CpuStat && !c->second.thr_watch) {
        c->second.thr_watch = true;
        below.push_back(id);
      }
      continue;
    }
    Holder& h = holders_.at(id);
    if (h.refs == 0) continue;  // let go of this tick: reported removed
    ThrottleCounters d = throttle_of(id, h.path, h.thr, raw);
    if (d.events == 0 && d.throttled_ns == 0) continue;
    // Growing: read once more at the next tick.
    if (source_ == ThrottleSource::CpuStat) holder_watch_.push_back(id);
    CgroupSample& cs = out.cgroups.emplace_back();
    cs.id = id;
    cs.path = h.path;
    cs.ancestor = true;
    cs.throttle_interval = d;
    cs.throttle_total = h.thr.total;
  }
}

}  // namespace khagent
