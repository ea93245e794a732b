#include "khagent/signals/workload.h"

#include <fnmatch.h>

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>
#include <unordered_set>

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
    if (!r.labels.empty() && (!meta || !labels_match(r.labels, meta->labels))) continue;
    if (!r.annotations.empty() && (!meta || !labels_match(r.annotations, meta->annotations))) continue;
    return r.cls;
  }
  return id.pod_uid.empty() ? cfg.default_class : cfg.default_pod_class;
}

const Classifier::Entry& Classifier::get(uint64_t cgroup_id, const std::string& path) {
  auto it = cache_.find(cgroup_id);
  if (it != cache_.end()) return it->second;
  Entry e;
  e.id = identify_cgroup(path, yarn_hierarchy_);
  const PodMeta* meta = nullptr;
  if (!e.id.pod_uid.empty()) {
    auto p = pods_.find(e.id.pod_uid);
    if (p != pods_.end()) meta = &p->second;
  }
  e.cls = classify_cgroup(path, e.id, meta, cfg_);
  return cache_.emplace(cgroup_id, std::move(e)).first->second;
}

void Classifier::set_pods(std::unordered_map<std::string, PodMeta> pods) {
  pods_ = std::move(pods);
  cache_.clear();
}

void Classifier::retain(const std::vector<uint64_t>& alive) {
  if (alive.size() >= cache_.size()) {  // the usual tick: nothing went away
    bool all = true;
    for (uint64_t id : alive) all = all && cache_.count(id);
    if (all && alive.size() == cache_.size()) return;
  }
  std::unordered_set<uint64_t> keep(alive.begin(), alive.end());
  for (auto it = cache_.begin(); it != cache_.end();) it = keep.count(it->first) ? std::next(it) : cache_.erase(it);
}

NodeSignals rollup(const Sample& s, Classifier& classifier) {
  NodeSignals out;
  out.ts_ns = s.ts_ns;
  out.interval_ns = s.interval_ns;
  double secs = s.interval_ns ? static_cast<double>(s.interval_ns) / 1e9 : 0;

  std::unordered_map<uint64_t, const Classifier::Entry*> entries;
  std::map<std::string, PodSignals> pods;  // by uid
  std::map<std::string, YarnContainerSignals> yarn;
  std::set<std::string> parents;
  std::vector<uint64_t> alive;
  for (const auto& c : s.cgroups) {
    const auto& e = classifier.get(c.id, c.path);
    entries[c.id] = &e;
    alive.push_back(c.id);
    auto& cls = out.classes[static_cast<size_t>(e.cls)];
    const bool moved = counters_moved(c.interval);  // most cgroups of a big node did nothing
    if (moved) counters_add(cls.interval, c.interval);
    if (e.cls == CgroupClass::Online) out.online_cgroups.push_back(c.id);
    if (e.id.qos == QosTier::BestEffort && !e.id.qos_path.empty()) parents.insert(e.id.qos_path);
    if (e.id.yarn) parents.insert(e.id.yarn_root);
    if (!e.id.pod_uid.empty()) {
      auto& p = pods[e.id.pod_uid];
      p.uid = e.id.pod_uid;
      p.path = e.id.pod_path;
      p.cls = e.cls;
      p.qos = e.id.qos;
      if (moved) counters_add(p.interval, c.interval);
      p.throttle_interval.events += c.throttle_interval.events;
      p.throttle_interval.throttled_ns += c.throttle_interval.throttled_ns;
      p.cgroup_ids.push_back(c.id);
    }
    if (!e.id.yarn_container.empty()) {
      auto& y = yarn[e.id.yarn_container];
      y.container = e.id.yarn_container;
      y.path = e.id.yarn_container_path;
      if (secs > 0) y.cpu_cores += static_cast<double>(c.interval.cpu_ns) / 1e9 / secs;
    }
  }
  classifier.retain(alive);

  // Interference by class and pod, from the (victim, aggressor) pairs.
  std::unordered_map<uint64_t, std::string> pod_of;
  for (const auto& [uid, p] : pods)
    for (auto id : p.cgroup_ids) pod_of[id] = uid;
  for (const auto& pr : s.pairs) {
    // Containers of one pod (app, sidecar, pause) share its CPU: at the
    // pod level a wait behind a sibling is a wait behind the pod itself.
    auto pv = pod_of.find(pr.victim), pa = pod_of.find(pr.aggressor);
    if (pv != pod_of.end() && pa != pod_of.end() && pv->second == pa->second) {
      auto& c = pods[pv->second].interval.cause_ns;
      uint64_t moved = std::min(c[KH_WAIT_OTHER_CGROUP], pr.wait_ns_interval);
      c[KH_WAIT_OTHER_CGROUP] -= moved;
      c[KH_WAIT_SAME_CGROUP] += moved;
    }
    auto v = entries.find(pr.victim);
    auto a = entries.find(pr.aggressor);
    if (v == entries.end() || a == entries.end()) continue;
    auto vc = static_cast<size_t>(v->second->cls);
    auto ac = static_cast<size_t>(a->second->cls);
    out.classes[vc].wait_by_aggressor_class_ns[ac] += pr.wait_ns_interval;
    if (a->second->cls == CgroupClass::Offline) {
      auto pu = pod_of.find(pr.victim);
      if (pu != pod_of.end()) pods[pu->second].offline_wait_ns += pr.wait_ns_interval;
    }
    if (v->second->cls == CgroupClass::Online && !a->second->id.yarn_container.empty()) {
      auto& y = yarn[a->second->id.yarn_container];
      y.online_wait_caused_ns += pr.wait_ns_interval;
      y.online_wait_caused_ns_total += pr.wait_ns_total;
    }
  }

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
  out.offline_parents.assign(parents.begin(), parents.end());
  return out;
}

}  // namespace khagent
