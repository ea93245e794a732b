#include "khagent/signals/workload.h"

#include <fnmatch.h>

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>
#include <unordered_set>

#include "khagent/util/strings.h"

namespace khagent {

const char* qos_name(QosTier q) {
  switch (q) {
    case QosTier::Guaranteed: return "guaranteed";
    case QosTier::Burstable: return "burstable";
    case QosTier::BestEffort: return "besteffort";
    case QosTier::None: return "";
  }
  return "";
}

namespace {

std::vector<std::string> segments(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(path);
  std::string s;
  while (std::getline(in, s, '/'))
    if (!s.empty()) out.push_back(s);
  return out;
}

std::string join(const std::vector<std::string>& segs, size_t n) {
  std::string p;
  for (size_t i = 0; i < n && i < segs.size(); i++) p += "/" + segs[i];
  return p.empty() ? "/" : p;
}

QosTier qos_of(const std::string& s) {
  if (s == "burstable") return QosTier::Burstable;
  if (s == "besteffort") return QosTier::BestEffort;
  return QosTier::None;
}

// systemd driver: [prefix-]kubepods.slice, [prefix-]kubepods-<qos>.slice,
// [prefix-]kubepods[-<qos>]-pod<uid_with_underscores>.slice
const std::regex kSdRoot(R"(^(?:.*-)?kubepods\.slice$)");
const std::regex kSdQos(R"(^(?:.*-)?kubepods-(burstable|besteffort)\.slice$)");
const std::regex kSdPod(R"(^(?:.*-)?kubepods(?:-(burstable|besteffort))?-pod([0-9a-fA-F_]+)\.slice$)");
// cgroupfs driver: kubepods, kubepods/<qos>, .../pod<uid>
const std::regex kFsPod(R"(^pod([0-9a-fA-F-]+)$)");
// containers
const std::regex kContainerd(R"(^cri-containerd-([0-9a-fA-F]+)\.scope$)");
const std::regex kCrio(R"(^crio-([0-9a-fA-F]+)\.scope$)");
const std::regex kCrioConmon(R"(^crio-conmon-([0-9a-fA-F]+)\.scope$)");
const std::regex kDocker(R"(^docker-([0-9a-fA-F]+)\.scope$)");
const std::regex kBareId(R"(^([0-9a-fA-F]{12,128})$)");
const std::regex kYarnContainer(R"(^container_[0-9A-Za-z_]+$)");

void parse_container(const std::string& seg, CgroupIdentity& id) {
  std::smatch m;
  if (std::regex_match(seg, m, kContainerd)) {
    id.container_id = m[1];
    id.runtime = "containerd";
  } else if (std::regex_match(seg, m, kCrioConmon)) {
    id.runtime = "crio";  // the runtime monitor: pod overhead, no container
  } else if (std::regex_match(seg, m, kCrio)) {
    id.container_id = m[1];
    id.runtime = "crio";
  } else if (std::regex_match(seg, m, kDocker)) {
    id.container_id = m[1];
    id.runtime = "docker";
  } else if (std::regex_match(seg, m, kBareId)) {
    id.container_id = m[1];
  }
}

void parse_k8s(const std::vector<std::string>& segs, CgroupIdentity& id) {
  for (size_t i = 0; i < segs.size(); i++) {
    bool sd = std::regex_match(segs[i], kSdRoot);
    if (!sd && segs[i] != "kubepods") continue;
    id.k8s = true;
    size_t j = i + 1;
    id.qos_path = join(segs, j);  // guaranteed pods sit directly below
    if (j >= segs.size()) return;
    std::smatch m;
    if (sd) {
      if (std::regex_match(segs[j], m, kSdQos)) {
        id.qos = qos_of(m[1]);
        id.qos_path = join(segs, ++j);
        if (j >= segs.size()) return;
      }
      if (!std::regex_match(segs[j], m, kSdPod)) return;
      if (id.qos == QosTier::None) id.qos = m[1].matched ? qos_of(m[1]) : QosTier::Guaranteed;
      id.pod_uid = m[2];
      std::replace(id.pod_uid.begin(), id.pod_uid.end(), '_', '-');
    } else {
      if (segs[j] == "burstable" || segs[j] == "besteffort") {
        id.qos = qos_of(segs[j]);
        id.qos_path = join(segs, ++j);
        if (j >= segs.size()) return;
      }
      if (!std::regex_match(segs[j], m, kFsPod)) return;
      if (id.qos == QosTier::None) id.qos = QosTier::Guaranteed;
      id.pod_uid = m[1];
    }
    id.pod_path = join(segs, j + 1);
    if (j + 1 < segs.size()) parse_container(segs[j + 1], id);
    return;
  }
}

void parse_yarn(const std::vector<std::string>& segs, const std::string& hierarchy, CgroupIdentity& id) {
  auto hs = segments(hierarchy);
  if (hs.empty()) return;
  for (size_t i = 0; i + hs.size() <= segs.size(); i++) {
    if (!std::equal(hs.begin(), hs.end(), segs.begin() + static_cast<long>(i))) continue;
    id.yarn = true;
    size_t j = i + hs.size();
    id.yarn_root = join(segs, j);
    if (j < segs.size() && std::regex_match(segs[j], kYarnContainer)) {
      id.yarn_container = segs[j];
      id.yarn_container_path = join(segs, j + 1);
    }
    return;
  }
}

bool labels_match(const std::map<std::string, std::string>& want, const std::map<std::string, std::string>& have) {
  for (const auto& [k, v] : want) {
    auto it = have.find(k);
    if (it == have.end() || it->second != v) return false;
  }
  return true;
}

}  // namespace

CgroupIdentity identify_cgroup(const std::string& path, const std::string& yarn_hierarchy) {
  CgroupIdentity id;
  auto segs = segments(path);
  parse_k8s(segs, id);
  parse_yarn(segs, yarn_hierarchy, id);
  return id;
}

CgroupClass classify_cgroup(const std::string& path, const CgroupIdentity& id, const PodMeta* meta,
                            const ClassConfig& cfg) {
  for (const auto& r : cfg.rules) {
    if (r.qos && (!id.k8s || *r.qos != qos_name(id.qos))) continue;
    if (r.path_glob && fnmatch(r.path_glob->c_str(), path.c_str(), 0) != 0) continue;
    if (r.yarn && *r.yarn != id.yarn) continue;
    if (r.priority_class && (!meta || meta->priority_class != *r.priority_class)) continue;
    if (r.batch_resources && (meta ? meta->batch_resources : false) != *r.batch_resources) continue;
    if (!r.labels.empty() && (!meta || !labels_match(r.labels, meta->labels))) continue;
    if (!r.annotations.empty() && (!meta || !labels_match(r.annotations, meta->annotations))) continue;
    return r.cls;
  }
  return id.pod_uid.empty() ? cfg.default_class : cfg.default_pod_class;
}

namespace {

// Cgroups counted in an index entry; the entry goes with the last one.
size_t& refs(size_t& n) { return n; }
size_t& refs(Classifier::Pod& p) { return p.cgroups; }
size_t& refs(Classifier::YarnContainer& y) { return y.cgroups; }

template <typename Index>
void release(Index& index, const std::string& key) {
  auto it = index.find(key);
  if (it != index.end() && --refs(it->second) == 0) index.erase(it);
}

}  // namespace

Classifier::Entry Classifier::classify(const std::string& path) const {
  Entry e;
  e.path = path;
  e.id = identify_cgroup(path, yarn_hierarchy_);
  const PodMeta* meta = nullptr;
  if (!e.id.pod_uid.empty()) {
    auto p = pods_.find(e.id.pod_uid);
    if (p != pods_.end()) meta = &p->second;
  }
  e.cls = classify_cgroup(path, e.id, meta, cfg_);
  return e;
}

void Classifier::index(const Entry& e, uint64_t cgroup_id) {
  if (e.cls == CgroupClass::Online) online_.insert(cgroup_id);
  if (e.id.qos == QosTier::BestEffort && !e.id.qos_path.empty()) parents_[e.id.qos_path]++;
  if (e.id.yarn) parents_[e.id.yarn_root]++;
  if (!e.id.pod_uid.empty()) {
    Pod& p = pods_by_uid_[e.id.pod_uid];
    p.path = e.id.pod_path;
    p.cls = e.cls;
    p.qos = e.id.qos;
    p.cgroups++;
  }
  if (!e.id.yarn_container.empty()) {
    YarnContainer& y = yarn_[e.id.yarn_container];
    y.path = e.id.yarn_container_path;
    y.cgroups++;
  }
}

void Classifier::unindex(const Entry& e, uint64_t cgroup_id) {
  online_.erase(cgroup_id);
  if (e.id.qos == QosTier::BestEffort && !e.id.qos_path.empty()) release(parents_, e.id.qos_path);
  if (e.id.yarn) release(parents_, e.id.yarn_root);
  if (!e.id.pod_uid.empty()) release(pods_by_uid_, e.id.pod_uid);
  if (!e.id.yarn_container.empty()) release(yarn_, e.id.yarn_container);
}

const Classifier::Entry& Classifier::get(uint64_t cgroup_id, const std::string& path) {
  auto it = cache_.find(cgroup_id);
  if (it != cache_.end()) return it->second;
  it = cache_.emplace(cgroup_id, classify(path)).first;
  index(it->second, cgroup_id);
  return it->second;
}

void Classifier::add_online_wait_caused(const std::string& container, uint64_t ns) {
  auto it = yarn_.find(container);
  if (it != yarn_.end()) it->second.online_wait_caused_ns += ns;
}

const Classifier::Entry* Classifier::find(uint64_t cgroup_id) const {
  auto it = cache_.find(cgroup_id);
  return it == cache_.end() ? nullptr : &it->second;
}

void Classifier::set_pods(std::unordered_map<std::string, PodMeta> pods) {
  pods_ = std::move(pods);
  std::unordered_map<std::string, uint64_t> caused;  // kept across the re-index
  for (const auto& [c, y] : yarn_) caused[c] = y.online_wait_caused_ns;
  online_.clear();
  parents_.clear();
  pods_by_uid_.clear();
  yarn_.clear();
  for (auto& [id, e] : cache_) {
    e = classify(e.path);
    index(e, id);
  }
  for (auto& [c, y] : yarn_)
    if (auto it = caused.find(c); it != caused.end()) y.online_wait_caused_ns = it->second;
}

void Classifier::forget(const std::vector<uint64_t>& gone) {
  for (uint64_t id : gone) {
    auto it = cache_.find(id);
    if (it == cache_.end()) continue;
    unindex(it->second, id);
    cache_.erase(it);
  }
}

void Classifier::retain(const std::vector<uint64_t>& alive) {
  if (alive.size() >= cache_.size()) {  // the usual tick: nothing went away
    bool all = true;
    for (uint64_t id : alive) all = all && cache_.count(id);
    if (all && alive.size() == cache_.size()) return;
  }
  std::unordered_set<uint64_t> keep(alive.begin(), alive.end());
  std::vector<uint64_t> gone;
  for (const auto& [id, _] : cache_)
    if (!keep.count(id)) gone.push_back(id);
  forget(gone);
}

namespace {

// Membership first: removed cgroups (or, for a complete sample, unlisted ones) are no longer known, the sample's
// cgroups are from now on; returns each sample cgroup's entry (ancestors not known are classed into `ancestors`).
std::vector<const Classifier::Entry*> update_membership(const Sample& s, Classifier& classifier,
                                                        std::vector<Classifier::Entry>& ancestors) {
  // (In this order: the entries below stay valid.)
  classifier.forget(s.removed);
  std::vector<const Classifier::Entry*> entries;
  entries.reserve(s.cgroups.size());
  // Ancestors listed for their throttling only are classed but not made
  // members: an online pod's own cgroup has no task to protect, and a pod's
  // class is its containers'.
  size_t n_ancestors = 0;
  for (const auto& c : s.cgroups) n_ancestors += c.ancestor;
  ancestors.reserve(n_ancestors);  // no reallocation: entries point into it
  for (const auto& c : s.cgroups) {
    const Classifier::Entry* known = c.ancestor ? classifier.find(c.id) : nullptr;
    if (c.ancestor && !known) known = &ancestors.emplace_back(classifier.classify_only(c.path));
    entries.push_back(known ? known : &classifier.get(c.id, c.path));
  }
  if (s.complete) {
    std::vector<uint64_t> alive;
    alive.reserve(s.cgroups.size());
    for (const auto& c : s.cgroups)
      if (!c.ancestor) alive.push_back(c.id);
    classifier.retain(alive);
  }
  return entries;
}

// The classifier's pods, by uid, with their identity filled in and no counters yet.
std::map<std::string, PodSignals> known_pods(const Classifier& classifier) {
  std::map<std::string, PodSignals> pods;
  for (const auto& [uid, p] : classifier.pods()) {
    PodSignals& ps = pods[uid];
    ps.uid = uid;
    ps.path = p.path;
    ps.cls = p.cls;
    ps.qos = p.qos;
  }
  return pods;
}

// The classifier's YARN containers, by id, with their identity filled in and no counters yet.
std::map<std::string, YarnContainerSignals> known_yarn(const Classifier& classifier) {
  std::map<std::string, YarnContainerSignals> yarn;
  for (const auto& [id, y] : classifier.yarn_containers()) {
    YarnContainerSignals& ys = yarn[id];
    ys.container = id;
    ys.path = y.path;
  }
  return yarn;
}

// Adds each cgroup's interval counters, throttling and reclaim to its class, its pod and its YARN container.
void add_cgroups(const Sample& s, const std::vector<const Classifier::Entry*>& entries, const Classifier& classifier,
                 double secs, NodeSignals& out, std::map<std::string, PodSignals>& pods,
                 std::map<std::string, YarnContainerSignals>& yarn) {
  for (size_t i = 0; i < s.cgroups.size(); i++) {
    const CgroupSample& c = s.cgroups[i];
    const Classifier::Entry& e = *entries[i];
    const bool moved = counters_moved(c.interval);  // a complete sample lists idle cgroups too
    if (moved) counters_add(out.classes[static_cast<size_t>(e.cls)].interval, c.interval);
    PodSignals* pod = nullptr;
    if (!e.id.pod_uid.empty() && (!c.ancestor || pods.count(e.id.pod_uid))) {
      pod = &pods[e.id.pod_uid];
      if (moved) counters_add(pod->interval, c.interval);
      pod->throttle_interval.events += c.throttle_interval.events;
      pod->throttle_interval.throttled_ns += c.throttle_interval.throttled_ns;
      pod->throttled_periods_max = std::max(pod->throttled_periods_max, c.throttle_interval.events);
    }
    if (!e.id.yarn_container.empty() && secs > 0)
      yarn[e.id.yarn_container].cpu_cores += static_cast<double>(c.interval.cpu_ns) / 1e9 / secs;
    if (pod) reclaim_add(pod->reclaim_interval, c.reclaim_interval);
    if (c.throttle_interval.throttled_ns || c.reclaim_interval.any()) {
      CgroupClass cls = pod ? pod->cls : e.cls;
      if (cls == CgroupClass::System)
        for (const auto& [parent, _] : classifier.offline_parents())
          if (path_at_or_below(e.path, parent)) cls = CgroupClass::Offline;
      out.throttled_ns[static_cast<size_t>(cls)] += c.throttle_interval.throttled_ns;
      reclaim_add(out.reclaim[static_cast<size_t>(cls)], c.reclaim_interval);
    }
  }
}

// Interference by class and pod, from the (victim, aggressor) pairs; the YARN containers' totals kept.
void add_pairs(const Sample& s, Classifier& classifier, NodeSignals& out, std::map<std::string, PodSignals>& pods,
               std::map<std::string, YarnContainerSignals>& yarn) {
  for (const auto& pr : s.pairs) {
    const Classifier::Entry* v = classifier.find(pr.victim);
    const Classifier::Entry* a = classifier.find(pr.aggressor);
    if (!v || !a) continue;
    // Containers of one pod (app, sidecar, pause) share its CPU: at the
    // pod level a wait behind a sibling is a wait behind the pod itself.
    if (!v->id.pod_uid.empty() && v->id.pod_uid == a->id.pod_uid) {
      auto& c = pods[v->id.pod_uid].interval.cause_ns;
      uint64_t moved = std::min(c[KH_WAIT_OTHER_CGROUP], pr.wait_ns_interval);
      c[KH_WAIT_OTHER_CGROUP] -= moved;
      c[KH_WAIT_SAME_CGROUP] += moved;
    }
    auto vc = static_cast<size_t>(v->cls);
    auto ac = static_cast<size_t>(a->cls);
    out.classes[vc].wait_by_aggressor_class_ns[ac] += pr.wait_ns_interval;
    if (a->cls == CgroupClass::Offline && !v->id.pod_uid.empty())
      pods[v->id.pod_uid].offline_wait_ns += pr.wait_ns_interval;
    if (v->cls == CgroupClass::Online && !a->id.yarn_container.empty()) {
      auto& y = yarn[a->id.yarn_container];
      y.online_wait_caused_ns += pr.wait_ns_interval;
      classifier.add_online_wait_caused(a->id.yarn_container, pr.wait_ns_interval);
    }
  }
  // Totals kept here: a sample that is not complete lists only the pairs
  // that moved.
  for (auto& [id, y] : yarn) {
    auto it = classifier.yarn_containers().find(id);
    if (it != classifier.yarn_containers().end()) y.online_wait_caused_ns_total = it->second.online_wait_caused_ns;
  }
}

// The per-tick figures (p99 waits, CPU cores) and the lists: pods, YARN containers, online cgroups, offline parents.
void finish(const Classifier& classifier, double secs, std::map<std::string, PodSignals>& pods,
            std::map<std::string, YarnContainerSignals>& yarn, NodeSignals& out) {
  for (auto& [uid, p] : pods) {
    p.wait_p99_us = hist_quantile(p.interval.hist, 0.99) / 1000.0;
    if (secs > 0) p.cpu_cores = static_cast<double>(p.interval.cpu_ns) / 1e9 / secs;
    out.pods.push_back(std::move(p));
  }
  for (auto& c : out.classes) {
    c.wait_p99_us = hist_quantile(c.interval.hist, 0.99) / 1000.0;
    if (secs > 0) c.cpu_cores = static_cast<double>(c.interval.cpu_ns) / 1e9 / secs;
  }
  for (auto& [_, y] : yarn) out.yarn.push_back(std::move(y));
  out.online_cgroups.assign(classifier.online().begin(), classifier.online().end());
  std::sort(out.online_cgroups.begin(), out.online_cgroups.end());
  for (const auto& [parent, _] : classifier.offline_parents()) out.offline_parents.push_back(parent);
}

}  // namespace

NodeSignals rollup(const Sample& s, Classifier& classifier) {
  NodeSignals out;
  out.ts_ns = s.ts_ns;
  out.interval_ns = s.interval_ns;
  double secs = s.interval_ns ? static_cast<double>(s.interval_ns) / 1e9 : 0;

  std::vector<Classifier::Entry> ancestors;  // entries point into it
  const std::vector<const Classifier::Entry*> entries = update_membership(s, classifier, ancestors);
  std::map<std::string, PodSignals> pods = known_pods(classifier);  // by uid
  std::map<std::string, YarnContainerSignals> yarn = known_yarn(classifier);
  add_cgroups(s, entries, classifier, secs, out, pods, yarn);
  add_pairs(s, classifier, out, pods, yarn);
  finish(classifier, secs, pods, yarn, out);
  return out;
}

}  // namespace khagent
