#include "khagent/policy/yarn.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include <fmt/format.h>

namespace khagent {

const char* yarn_action_name(YarnCapacityAction a) {
  switch (a) {
    case YarnCapacityAction::Hold: return "hold";
    case YarnCapacityAction::Shrink: return "shrink";
    case YarnCapacityAction::Grow: return "grow";
    case YarnCapacityAction::WaitStable: return "wait_stable";
    case YarnCapacityAction::WaitInterval: return "wait_interval";
    case YarnCapacityAction::Deadband: return "deadband";
    case YarnCapacityAction::Unknown: return "unknown";
  }
  return "unknown";
}

namespace {

// Absorbs float noise: 2.9999999999 rounds down to 3, 3.0000000001 up to 3.
constexpr double kRoundingSlack = 1e-9;
// Far above any real vcore count, far below the int64 range.
constexpr double kMaxRawVcores = 1e12;

int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return b > 0 ? INT64_MAX : INT64_MIN;
}

int64_t sat_sub(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_sub_overflow(a, b, &r)) return r;
  return b < 0 ? INT64_MAX : INT64_MIN;
}

// The memory to advertise with `vcores`.
int64_t memory_for(int64_t vcores, const YarnResource& configured, const YarnConfig& cfg) {
  if (cfg.memory_follows_cpu) {
    if (configured.vcores <= 0) return configured.memory_mb;
    // In 128 bits: no overflow for any int64 inputs; vcores <= configured.vcores
    // (yarn_target clamps), so the quotient fits.
    __int128 m = static_cast<__int128>(configured.memory_mb) * vcores / configured.vcores;  // rounded down
    return m > INT64_MAX ? INT64_MAX : m < INT64_MIN ? INT64_MIN : static_cast<int64_t>(m);
  }
  if (cfg.memory_mb > 0) return std::min(cfg.memory_mb, configured.memory_mb);
  return configured.memory_mb;
}

// memory_for(), never above the memory lever's budget (memory_follows_budget).
int64_t memory_capped(int64_t vcores, const YarnResource& configured, const YarnConfig& cfg,
                      std::optional<int64_t> memory_budget_mb) {
  int64_t m = memory_for(vcores, configured, cfg);
  if (cfg.memory_follows_budget && memory_budget_mb) m = std::min(m, std::max<int64_t>(*memory_budget_mb, 0));
  return m;
}

int64_t round_vcores(double raw, VcoreRounding rounding) {
  if (!(raw >= 0)) raw = 0;  // negative or NaN
  raw = std::min(raw, kMaxRawVcores);
  double r;
  if (rounding == VcoreRounding::Up) {
    r = std::ceil(raw - kRoundingSlack);
  } else if (rounding == VcoreRounding::Nearest) {
    r = static_cast<double>(std::llround(raw));
  } else {
    r = std::floor(raw + kRoundingSlack);
  }
  return static_cast<int64_t>(std::max(r, 0.0));
}

void reset_grow(YarnCapacityState& st) {
  st.grow_pending = false;
  st.grow_since_ns = 0;
  st.grow_min_vcores = 0;
}

// Natural order of container ids: runs of digits compare as numbers, so
// container_..._01_1000000 is after container_..._01_999999 (YARN pads the
// sequence number to six digits but it can grow wider). Returns <0, 0, >0.
int compare_ids(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t i0 = i, j0 = j;
      while (i < a.size() && digit(a[i])) i++;
      while (j < b.size() && digit(b[j])) j++;
      size_t ia = i0, jb = j0;
      while (ia + 1 < i && a[ia] == '0') ia++;  // skip leading zeros
      while (jb + 1 < j && b[jb] == '0') jb++;
      size_t la = i - ia, lb = j - jb;
      if (la != lb) return la < lb ? -1 : 1;
      int c = a.compare(ia, la, b, jb, lb);
      if (c != 0) return c;
      continue;
    }
    if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]) ? -1 : 1;
    i++;
    j++;
  }
  if (i < a.size()) return 1;
  if (j < b.size()) return -1;
  return a.compare(b);  // equal but for leading zeros: any fixed order
}

bool fits(const YarnResource& used, const YarnResource& cap) {
  return used.vcores <= cap.vcores && used.memory_mb <= cap.memory_mb;
}

// Decides to post r: the action, and the reason after the head.
void post(YarnCapacityDecision& d, const std::string& head, YarnResource r, YarnCapacityAction action,
          const std::string& why) {
  d.post = true;
  d.resource = r;
  d.action = action;
  d.reason = head + ", " + why;
}

// Decides to post nothing: the action, and the reason after the head.
void no_post(YarnCapacityDecision& d, const std::string& head, YarnCapacityAction action, const std::string& why) {
  d.action = action;
  d.reason = head + ", " + why;
}

// A grow beyond the deadband: posted, at the lowest target seen meanwhile, once the target stayed above for
// grow_stable and grow_interval passed since the last grow.
void grow_step(const YarnCapacityInput& in, const YarnConfig& cfg, YarnCapacityState& st, const YarnResource& t,
               int64_t band, const std::string& head, const std::string& adv, YarnCapacityDecision& d) {
  const YarnResource& a = in.advertised;
  if (!st.grow_pending) {
    st.grow_pending = true;
    st.grow_since_ns = in.now_ns;
    st.grow_min_vcores = t.vcores;
  }
  st.grow_min_vcores = std::min(st.grow_min_vcores, t.vcores);
  const uint64_t above_ns = in.now_ns >= st.grow_since_ns ? in.now_ns - st.grow_since_ns : 0;
  if (above_ns < cfg.grow_stable_ns) {
    no_post(d, head, YarnCapacityAction::WaitStable,
            fmt::format("{}: above for {:.1f}s of {:.1f}s (lowest {} vcores)", adv, static_cast<double>(above_ns) / 1e9,
                        static_cast<double>(cfg.grow_stable_ns) / 1e9, st.grow_min_vcores));
    return;
  }
  if (st.last_grow_ns != 0 && in.now_ns >= st.last_grow_ns && in.now_ns - st.last_grow_ns < cfg.grow_interval_ns) {
    no_post(d, head, YarnCapacityAction::WaitInterval,
            fmt::format("{}: last grow {:.1f}s ago, interval {:.1f}s (lowest {} vcores)", adv,
                        static_cast<double>(in.now_ns - st.last_grow_ns) / 1e9,
                        static_cast<double>(cfg.grow_interval_ns) / 1e9, st.grow_min_vcores));
    return;
  }
  YarnResource r{st.grow_min_vcores, memory_capped(st.grow_min_vcores, in.configured, cfg, in.memory_budget_mb)};
  // What the window allows must still be a grow worth posting against the
  // advertised value now (it may have changed meanwhile).
  bool worth = r.vcores >= a.vcores && r.memory_mb >= a.memory_mb &&
               (r.vcores - a.vcores >= band || (r.vcores == a.vcores && r.memory_mb > a.memory_mb));
  if (!worth) {
    reset_grow(st);
    no_post(d, head, YarnCapacityAction::Deadband,
            fmt::format("{}: lowest target in the window {} is not a grow", adv, yarn_resource_str(r)));
    return;
  }
  reset_grow(st);
  st.last_grow_ns = in.now_ns;
  post(d, head, r, YarnCapacityAction::Grow,
       fmt::format("{}: grow to {} (lowest target since {:.1f}s)", adv, yarn_resource_str(r),
                   static_cast<double>(above_ns) / 1e9));
}

}  // namespace

bool yarn_max_observe(YarnMaxRecord& rec, const std::string& node_id, const YarnResource& seen,
                      const std::map<std::string, int64_t>& others) {
  if (rec.node_id != node_id) {
    rec = YarnMaxRecord{node_id, seen, others};
    return true;
  }
  bool grew = seen.vcores > rec.max.vcores || seen.memory_mb > rec.max.memory_mb;
  rec.max = {std::max(rec.max.vcores, seen.vcores), std::max(rec.max.memory_mb, seen.memory_mb)};
  for (const auto& [name, value] : others) {
    auto it = rec.others.find(name);
    if (it == rec.others.end() || value > it->second) {
      rec.others[name] = value;
      grew = true;
    }
  }
  return grew;
}

YarnPostSeen yarn_settle_post(std::optional<YarnPendingPost>& pending, const YarnResource& rm_total, uint64_t now_ns,
                              uint64_t refresh_interval_ns) {
  if (!pending) return YarnPostSeen::None;
  if (rm_total == pending->resource) {
    pending.reset();
    return YarnPostSeen::Applied;
  }
  if (now_ns - pending->at_ns < 2 * refresh_interval_ns) return YarnPostSeen::NotYet;
  pending.reset();
  return YarnPostSeen::Dropped;
}

void yarn_interference_window(const std::map<std::string, uint64_t>& caused_total, bool window_moved,
                              std::map<std::string, uint64_t>& at_refresh, std::map<std::string, uint64_t>& window) {
  for (const auto& [id, total] : caused_total) {
    auto prev = at_refresh.find(id);
    if (prev == at_refresh.end() || window_moved) {
      uint64_t base = prev == at_refresh.end() ? total : prev->second;
      window[id] = total >= base ? total - base : 0;
      at_refresh[id] = total;
    }
  }
}

YarnResource yarn_target(double budget_cores, const YarnResource& configured, const YarnConfig& cfg,
                         std::optional<int64_t> memory_budget_mb) {
  if (!(budget_cores >= 0)) budget_cores = 0;  // negative or NaN
  int64_t v = sat_sub(round_vcores(budget_cores * cfg.vcores_per_core, cfg.rounding), cfg.reserve_vcores);
  int64_t hi = std::max<int64_t>(configured.vcores, 0);
  int64_t lo = std::clamp<int64_t>(cfg.min_vcores, 0, hi);
  YarnResource t;
  t.vcores = std::clamp(v, lo, hi);
  t.memory_mb = memory_capped(t.vcores, configured, cfg, memory_budget_mb);
  return t;
}

YarnCapacityDecision yarn_capacity_step(const YarnCapacityInput& in, const YarnConfig& cfg, YarnCapacityState& st) {
  YarnCapacityDecision d;
  const YarnResource t = yarn_target(in.budget_cores, in.configured, cfg, in.memory_budget_mb);
  const YarnResource& a = in.advertised;
  d.target = t;
  // With integer vcores a deadband of 0 acts like 1: any change counts.
  const int64_t band = std::max<int64_t>(cfg.deadband_vcores, 1);
  const std::string head =
      fmt::format("budget {:.2f} cores{} -> {}", std::isnan(in.budget_cores) ? 0.0 : in.budget_cores,
                  in.memory_budget_mb && cfg.memory_follows_budget ? fmt::format(", {} MB", *in.memory_budget_mb) : "",
                  yarn_resource_str(t));

  // Numbers from the RM/NM that slipped past the readers: never act on them.
  if (!yarn_resource_sane(in.configured) || (in.known && !yarn_resource_sane(a))) {
    reset_grow(st);
    d.target = {};
    no_post(
        d, head, YarnCapacityAction::Unknown,
        fmt::format("configured {}{}: out of range (at most {} vcores/{} MB), nothing posted",
                    yarn_resource_str(in.configured), in.known ? ", advertised " + yarn_resource_str(a) : std::string(),
                    kYarnMaxVcores, kYarnMaxMemoryMb));
    return d;
  }

  if (!in.known) {
    reset_grow(st);
    post(d, head, t, t.vcores < in.configured.vcores ? YarnCapacityAction::Shrink : YarnCapacityAction::Grow,
         fmt::format("advertised unknown, configured {}: first contact, post the target",
                     yarn_resource_str(in.configured)));
    return d;
  }

  const std::string adv = fmt::format("advertised {}", yarn_resource_str(a));

  // Shrink at once. A shrink never grows a dimension: if the other one wants
  // to grow, that waits for the grow rules.
  if (a.vcores - t.vcores >= band || t.memory_mb < a.memory_mb) {
    reset_grow(st);
    YarnResource r{std::min(t.vcores, a.vcores), std::min(t.memory_mb, a.memory_mb)};
    post(d, head, r, YarnCapacityAction::Shrink, fmt::format("{}: shrink to {}", adv, yarn_resource_str(r)));
    return d;
  }
  if (t == a) {
    reset_grow(st);
    no_post(d, head, YarnCapacityAction::Hold, adv + ": hold");
    return d;
  }
  // From here on the memory does not drop, and the vcores are at most
  // band - 1 below the advertised value.
  bool grow = t.vcores - a.vcores >= band || (t.vcores == a.vcores && t.memory_mb > a.memory_mb);
  if (!grow) {
    reset_grow(st);
    no_post(d, head, YarnCapacityAction::Deadband, fmt::format("{}: inside the deadband of {} vcores", adv, band));
    return d;
  }
  grow_step(in, cfg, st, t, band, head, adv, d);
  return d;
}

// ---- reclaim ----------------------------------------------------------------

int queue_priority_for(const std::string& queue, const std::map<std::string, int>& prio) {
  if (queue.empty() || prio.empty()) return 0;
  if (auto it = prio.find(queue); it != prio.end()) return it->second;
  auto ends_with_path = [](const std::string& path, const std::string& tail) {
    return path.size() > tail.size() && path.compare(path.size() - tail.size(), tail.size(), tail) == 0 &&
           path[path.size() - tail.size() - 1] == '.';
  };
  const std::string* best = nullptr;
  int best_prio = 0;
  for (const auto& [key, p] : prio) {
    if (!key.empty() && ends_with_path(queue, key) && (best == nullptr || key.size() > best->size())) {
      best = &key;
      best_prio = p;
    }
  }
  if (best != nullptr) return best_prio;
  if (queue.find('.') != std::string::npos) return 0;
  bool found = false;
  int lowest = 0;
  for (const auto& [key, p] : prio) {
    if (ends_with_path(key, queue)) {
      lowest = found ? std::min(lowest, p) : p;
      found = true;
    }
  }
  return found ? lowest : 0;
}

std::vector<size_t> rank_for_reclaim(const std::vector<YarnContainerInfo>& cs) {
  std::vector<size_t> idx(cs.size());
  for (size_t i = 0; i < idx.size(); i++) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
    const YarnContainerInfo& a = cs[x];
    const YarnContainerInfo& b = cs[y];
    if (a.queue_priority != b.queue_priority) return a.queue_priority < b.queue_priority;
    if (a.is_am != b.is_am) return !a.is_am;
    if (a.interference_ns != b.interference_ns) return a.interference_ns > b.interference_ns;
    if (a.start_ms != b.start_ms) return a.start_ms > b.start_ms;  // 0 (unknown) is last
    return compare_ids(a.id, b.id) > 0;
  });
  return idx;
}

namespace {

constexpr uint64_t kMemoryKillIntervalNs = 2'000'000'000;

// The memory emergency's victim: the first of `ranked` that holds memory.
const YarnContainerInfo* memory_victim(const std::vector<const YarnContainerInfo*>& ranked) {
  for (const auto* c : ranked)
    if (c->resource.memory_mb > 0) return c;
  return nullptr;
}

}  // namespace

ReclaimDecision reclaim_step(const ReclaimInput& in, const YarnConfig& cfg, ReclaimState& st) {
  ReclaimDecision d;
  for (const auto& c : in.containers) {
    d.used.vcores = sat_add(d.used.vcores, c.resource.vcores);
    d.used.memory_mb = sat_add(d.used.memory_mb, c.resource.memory_mb);
  }
  const bool memory_due = cfg.reclaim && cfg.memory_emergency && in.memory_emergency.has_value() &&
                          (st.memory_kill_ns == 0 || in.now_ns - st.memory_kill_ns >= kMemoryKillIntervalNs);
  if (fits(d.used, in.capacity)) {
    st.marked_ns.clear();
    if (memory_due) {
      // The allocations fit, the memory does not: the node is short anyway.
      std::vector<const YarnContainerInfo*> ranked;
      for (size_t i : rank_for_reclaim(in.containers)) ranked.push_back(&in.containers[i]);
      if (const auto* v = memory_victim(ranked)) {
        d.kill.push_back(v->id);
        d.memory_urgent = v->id;
        d.reason = fmt::format("memory emergency ({}): {} goes at once", *in.memory_emergency, v->id);
      }
    }
    return d;
  }

  // Victims in rank order until the rest fits; a container that frees
  // nothing in a dimension still over the capacity is passed over.
  YarnResource rest = d.used;
  std::vector<const YarnContainerInfo*> victims;
  for (size_t i : rank_for_reclaim(in.containers)) {
    if (fits(rest, in.capacity)) break;
    const YarnContainerInfo& c = in.containers[i];
    bool helps = (rest.vcores > in.capacity.vcores && c.resource.vcores > 0) ||
                 (rest.memory_mb > in.capacity.memory_mb && c.resource.memory_mb > 0);
    if (!helps) continue;
    rest.vcores = sat_sub(rest.vcores, c.resource.vcores);
    rest.memory_mb = sat_sub(rest.memory_mb, c.resource.memory_mb);
    victims.push_back(&c);
  }

  std::set<std::string> chosen;
  for (const auto* v : victims) {
    chosen.insert(v->id);
    st.marked_ns.emplace(v->id, in.now_ns);  // keeps an existing mark
  }
  for (auto it = st.marked_ns.begin(); it != st.marked_ns.end();) {
    if (chosen.count(it->first)) ++it;
    else it = st.marked_ns.erase(it);
  }

  const YarnContainerInfo* urgent = nullptr;
  if (cfg.emergency && in.emergency) {
    for (const auto* v : victims) {
      if (v->interference_ns > 0) {
        urgent = v;
        break;
      }
    }
  }
  const YarnContainerInfo* memory_urgent = memory_due ? memory_victim(victims) : nullptr;
  size_t past_grace = 0;
  for (const auto* v : victims) {
    d.victims.push_back(v->id);
    uint64_t marked = st.marked_ns[v->id];
    bool over = in.now_ns >= marked && in.now_ns - marked >= cfg.reclaim_grace_ns;
    if (over) past_grace++;
    if (cfg.reclaim && (over || v == urgent || v == memory_urgent)) d.kill.push_back(v->id);
  }
  if (memory_urgent) d.memory_urgent = memory_urgent->id;

  d.reason = fmt::format("used {} over capacity {}: {} victim{}, {} past the {:g} s grace", yarn_resource_str(d.used),
                         yarn_resource_str(in.capacity), victims.size(), victims.size() == 1 ? "" : "s", past_grace,
                         static_cast<double>(cfg.reclaim_grace_ns) / 1e9);
  if (urgent) d.reason += fmt::format(", emergency: {} (interfering) goes at once", urgent->id);
  if (memory_urgent)
    d.reason +=
        fmt::format(", memory emergency ({}): {} goes at once", in.memory_emergency.value_or(""), memory_urgent->id);
  if (!cfg.reclaim) d.reason += " (reclaim off: nothing killed)";
  return d;
}

YarnOffer yarn_offer(const Decision& d, const NodeSignals& node, const Config& cfg, uint64_t now_ns) {
  YarnOffer o;
  o.now_ns = now_ns;
  o.budget_cores = d.budget_cores;
  for (const auto& v : d.verdicts)
    if (v.kind == PodVerdictKind::Breach &&
        v.wait_p99_us > cfg.yarn.emergency_p99_factor * cfg.online.wait_p99_target_us)
      o.emergency = true;
  for (const auto& c : node.yarn)
    if (!c.container.empty()) o.containers[c.container] = {c.path, c.online_wait_caused_ns_total};
  return o;
}

void merge_offer(YarnOffer& offer, const OfferPart& part) {
  if (part.budget_cores) offer.budget_cores = *part.budget_cores;
  if (part.emergency) offer.emergency = *part.emergency;
  if (part.containers) offer.containers = *part.containers;
  if (part.cpu_terms) offer.cpu_terms = part.cpu_terms;
  if (part.online_breach) offer.online_breach = *part.online_breach;
  if (part.memory) {
    offer.memory_terms = part.memory_terms;
    offer.memory_budget_bytes = part.memory_budget_bytes;
    offer.memory_emergency = part.memory_emergency;
  }
}

}  // namespace khagent
