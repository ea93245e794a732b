// Who a cgroup belongs to (Kubernetes pod and container, YARN container),
// which class it is in (online / offline / system), and the roll-up of the
// per-cgroup signals to pods and classes.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "khagent/collect/sample.h"
#include "khagent/config/config.h"
#include "khagent/model/pod.h"

namespace khagent {

enum class QosTier { None, Guaranteed, Burstable, BestEffort };
const char* qos_name(QosTier q);

struct CgroupIdentity {
  // Kubernetes (from the kubelet's cgroup layout, systemd or cgroupfs driver)
  bool k8s = false;  // under the kubepods hierarchy
  QosTier qos = QosTier::None;
  std::string pod_uid;       // with dashes; "" if not in a pod
  std::string pod_path;      // the pod-level cgroup
  std::string container_id;  // "" for the pod cgroup itself (or conmon)
  std::string runtime;       // containerd | crio | docker | "" (unknown)
  std::string qos_path;      // the QoS-level cgroup (guaranteed: kubepods itself)
  // YARN (a NodeManager's container hierarchy)
  bool yarn = false;           // at or below the YARN hierarchy
  std::string yarn_root;       // path of the hierarchy, e.g. /hadoop-yarn
  std::string yarn_container;  // container_<id>; "" for the root itself
  std::string yarn_container_path;
};

// Parses a cgroup path (relative to the cgroup2 mount, starting with '/').
CgroupIdentity identify_cgroup(const std::string& path, const std::string& yarn_hierarchy);

// First matching rule's class, else the defaults (see ClassConfig).
CgroupClass classify_cgroup(const std::string& path, const CgroupIdentity& id, const PodMeta* meta,
                            const ClassConfig& cfg);

// Identity and class of each cgroup id, computed once per id, and the
// membership derived from them: the online cgroups, the offline parents, the
// pods and YARN containers with a known cgroup. A sample that lists only the
// cgroups that moved (Sample::complete false) leaves the others known here
// until the collector reports them removed.
class Classifier {
 public:
  Classifier(ClassConfig cfg, std::string yarn_hierarchy)
      : cfg_(std::move(cfg)), yarn_hierarchy_(std::move(yarn_hierarchy)) {}
  struct Entry {
    CgroupIdentity id;
    CgroupClass cls = CgroupClass::System;
    std::string path;
  };
  // Adds the cgroup if it is new.
  const Entry& get(uint64_t cgroup_id, const std::string& path);
  // Null if the id is not known.
  const Entry* find(uint64_t cgroup_id) const;
  // The identity and class of a path, without adding it (an ancestor listed
  // for its throttling only).
  Entry classify_only(const std::string& path) const { return classify(path); }
  // New pod metadata: every known cgroup is classed again.
  void set_pods(std::unordered_map<std::string, PodMeta> pods);
  // Drops these ids.
  void forget(const std::vector<uint64_t>& gone);
  // Drops ids not in `alive`.
  void retain(const std::vector<uint64_t>& alive);

  struct Pod {
    std::string path;
    CgroupClass cls = CgroupClass::Online;
    QosTier qos = QosTier::None;
    size_t cgroups = 0;
  };
  struct YarnContainer {
    std::string path;
    size_t cgroups = 0;
    uint64_t online_wait_caused_ns = 0;  // since it was first known (the roll-up adds each interval)
  };
  // Online waits the YARN container held the CPU for, in one interval.
  void add_online_wait_caused(const std::string& container, uint64_t ns);
  const std::unordered_set<uint64_t>& online() const { return online_; }
  const std::map<std::string, size_t>& offline_parents() const { return parents_; }  // -> cgroups below
  const std::map<std::string, Pod>& pods() const { return pods_by_uid_; }            // by uid
  const std::map<std::string, YarnContainer>& yarn_containers() const { return yarn_; }
  size_t size() const { return cache_.size(); }

 private:
  Entry classify(const std::string& path) const;
  void index(const Entry& e, uint64_t cgroup_id);
  void unindex(const Entry& e, uint64_t cgroup_id);

  ClassConfig cfg_;
  std::string yarn_hierarchy_;
  std::unordered_map<std::string, PodMeta> pods_;
  std::unordered_map<uint64_t, Entry> cache_;
  std::unordered_set<uint64_t> online_;
  std::map<std::string, size_t> parents_;
  std::map<std::string, Pod> pods_by_uid_;
  std::map<std::string, YarnContainer> yarn_;
};

// Signals of one pod over the last interval, summed over its cgroups (zero
// for a pod none of whose cgroups moved).
struct PodSignals {
  std::string uid;
  std::string path;
  CgroupClass cls = CgroupClass::Online;
  QosTier qos = QosTier::None;
  CgroupCounters interval;
  ThrottleCounters throttle_interval;  // summed over its cgroups
  // The most periods one of its cgroups was throttled in: the pod and its
  // container, with the same quota, are often throttled in the same period,
  // which the sum counts twice.
  uint64_t throttled_periods_max = 0;
  ReclaimCounters reclaim_interval;  // its tasks' direct memory reclaim
  uint64_t offline_wait_ns = 0;      // wait while offline cgroups held the CPU
  double wait_p99_us = 0;
  double cpu_cores = 0;
};

// A YARN container and what it did to online work in the last interval.
struct YarnContainerSignals {
  std::string container;
  std::string path;
  double cpu_cores = 0;
  uint64_t online_wait_caused_ns = 0;        // in the interval
  uint64_t online_wait_caused_ns_total = 0;  // since its cgroup was first known
};

struct ClassSignals {
  CgroupCounters interval;
  double cpu_cores = 0;
  double wait_p99_us = 0;
  uint64_t wait_by_aggressor_class_ns[3] = {0, 0, 0};  // interval, by CgroupClass
};

struct NodeSignals {
  uint64_t ts_ns = 0;
  uint64_t interval_ns = 0;
  std::vector<PodSignals> pods;            // every pod with a known cgroup
  std::array<ClassSignals, 3> classes{};   // by CgroupClass
  std::vector<YarnContainerSignals> yarn;  // every YARN container with a known cgroup
  // Throttled time in the interval by class: a pod's cgroups by the pod's
  // class, other online cgroups online, cgroups at or below an offline
  // parent offline, the rest system.
  std::array<uint64_t, 3> throttled_ns{};
  // Direct memory reclaim in the interval by class, classed as throttling.
  std::array<ReclaimCounters, 3> reclaim{};
  std::vector<uint64_t> online_cgroups;      // ids of online cgroups (protected)
  std::vector<std::string> offline_parents;  // QoS/YARN roots seen: besteffort, hadoop-yarn
};

NodeSignals rollup(const Sample& s, Classifier& classifier);

}  // namespace khagent
