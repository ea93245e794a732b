#include <gtest/gtest.h>

#include "khagent/signals/signals.h"
#include "khagent/signals/workload.h"

using namespace khagent;

namespace {
const std::string kUid = "1b2c3d4e-0000-4a4a-9f9f-123456789abc";
const std::string kUidSd = "1b2c3d4e_0000_4a4a_9f9f_123456789abc";
const std::string kCid = "4f1e7c0a9b8d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f";
}  // namespace

TEST(Identify, SystemdBurstableContainerd) {
  auto p = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSd + ".slice/cri-containerd-" +
           kCid + ".scope";
  auto id = identify_cgroup(p, "hadoop-yarn");
  EXPECT_TRUE(id.k8s);
  EXPECT_EQ(id.qos, QosTier::Burstable);
  EXPECT_EQ(id.pod_uid, kUid);
  EXPECT_EQ(id.container_id, kCid);
  EXPECT_EQ(id.runtime, "containerd");
  EXPECT_EQ(id.pod_path, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSd + ".slice");
  EXPECT_EQ(id.qos_path, "/kubepods.slice/kubepods-burstable.slice");
  EXPECT_FALSE(id.yarn);
}

TEST(Identify, SystemdGuaranteedCrioAndDocker) {
  auto id = identify_cgroup("/kubepods.slice/kubepods-pod" + kUidSd + ".slice/crio-" + kCid + ".scope", "hadoop-yarn");
  EXPECT_EQ(id.qos, QosTier::Guaranteed);
  EXPECT_EQ(id.pod_uid, kUid);
  EXPECT_EQ(id.runtime, "crio");
  EXPECT_EQ(id.container_id, kCid);
  EXPECT_EQ(id.qos_path, "/kubepods.slice");
  auto conmon =
      identify_cgroup("/kubepods.slice/kubepods-pod" + kUidSd + ".slice/crio-conmon-" + kCid + ".scope", "hadoop-yarn");
  EXPECT_EQ(conmon.pod_uid, kUid);
  EXPECT_EQ(conmon.container_id, "");
  auto d = identify_cgroup(
      "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + kUidSd + ".slice/docker-" + kCid + ".scope",
      "hadoop-yarn");
  EXPECT_EQ(d.qos, QosTier::BestEffort);
  EXPECT_EQ(d.runtime, "docker");
}

TEST(Identify, SystemdPodAndQosLevels) {
  auto pod = identify_cgroup("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSd + ".slice",
                             "hadoop-yarn");
  EXPECT_EQ(pod.pod_uid, kUid);
  EXPECT_EQ(pod.container_id, "");
  auto qos = identify_cgroup("/kubepods.slice/kubepods-besteffort.slice", "hadoop-yarn");
  EXPECT_TRUE(qos.k8s);
  EXPECT_EQ(qos.qos, QosTier::BestEffort);
  EXPECT_EQ(qos.pod_uid, "");
  EXPECT_EQ(qos.qos_path, "/kubepods.slice/kubepods-besteffort.slice");
  auto root = identify_cgroup("/kubepods.slice", "hadoop-yarn");
  EXPECT_TRUE(root.k8s);
  EXPECT_EQ(root.qos, QosTier::None);
}

TEST(Identify, CgroupfsDriver) {
  auto b = identify_cgroup("/kubepods/burstable/pod" + kUid + "/" + kCid, "hadoop-yarn");
  EXPECT_TRUE(b.k8s);
  EXPECT_EQ(b.qos, QosTier::Burstable);
  EXPECT_EQ(b.pod_uid, kUid);
  EXPECT_EQ(b.container_id, kCid);
  EXPECT_EQ(b.pod_path, "/kubepods/burstable/pod" + kUid);
  auto g = identify_cgroup("/kubepods/pod" + kUid + "/" + kCid, "hadoop-yarn");
  EXPECT_EQ(g.qos, QosTier::Guaranteed);
  EXPECT_EQ(g.pod_uid, kUid);
  auto be = identify_cgroup("/kubepods/besteffort/pod" + kUid, "hadoop-yarn");
  EXPECT_EQ(be.qos, QosTier::BestEffort);
  EXPECT_EQ(be.qos_path, "/kubepods/besteffort");
}

TEST(Identify, YarnAnywhere) {
  auto host = identify_cgroup("/hadoop-yarn/container_e17_1700000000000_0042_01_000003", "hadoop-yarn");
  EXPECT_TRUE(host.yarn);
  EXPECT_EQ(host.yarn_root, "/hadoop-yarn");
  EXPECT_EQ(host.yarn_container, "container_e17_1700000000000_0042_01_000003");
  EXPECT_FALSE(host.k8s);
  // A NodeManager pod that puts its hierarchy under its own container cgroup.
  auto nm = identify_cgroup("/kubepods.slice/kubepods-pod" + kUidSd + ".slice/cri-containerd-" + kCid +
                                ".scope/hadoop-yarn/container_1700000000000_0001_01_000001/sub",
                            "hadoop-yarn");
  EXPECT_TRUE(nm.yarn);
  EXPECT_TRUE(nm.k8s);
  EXPECT_EQ(nm.yarn_container, "container_1700000000000_0001_01_000001");
  EXPECT_EQ(nm.yarn_container_path, nm.yarn_root + "/container_1700000000000_0001_01_000001");
  auto custom = identify_cgroup("/system.slice/yarn/nm/container_1_2_3_4", "yarn/nm");
  EXPECT_TRUE(custom.yarn);
  EXPECT_EQ(custom.yarn_root, "/system.slice/yarn/nm");
  EXPECT_FALSE(identify_cgroup("/system.slice/sshd.service", "hadoop-yarn").yarn);
  EXPECT_FALSE(identify_cgroup("/hadoop-yarnish/container_1", "hadoop-yarn").yarn);
}

TEST(Classify, DefaultsAndRules) {
  Config c = default_config();
  auto be = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + kUidSd + ".slice/cri-containerd-" +
            kCid + ".scope";
  auto bu = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSd + ".slice/cri-containerd-" +
            kCid + ".scope";
  auto cls = [&](const std::string& p, const PodMeta* m = nullptr) {
    return classify_cgroup(p, identify_cgroup(p, "hadoop-yarn"), m, c.classes);
  };
  EXPECT_EQ(cls(be), CgroupClass::Offline);
  EXPECT_EQ(cls(bu), CgroupClass::Online);
  EXPECT_EQ(cls("/hadoop-yarn/container_1_2_3_4"), CgroupClass::Offline);
  EXPECT_EQ(cls("/system.slice/sshd.service"), CgroupClass::System);
  PodMeta off;
  off.priority_class = "low-priority-offline";
  EXPECT_EQ(cls(bu, &off), CgroupClass::Offline);
  PodMeta on;
  on.priority_class = "high-priority-online";
  EXPECT_EQ(cls(be, &on), CgroupClass::Online);  // the priority class decides first
  PodMeta batch;
  batch.batch_resources = true;
  EXPECT_EQ(cls(bu, &batch), CgroupClass::Offline);  // it runs on the published batch capacity

  ClassRule lab;
  lab.labels = {{"colocation", "offline"}};
  lab.cls = CgroupClass::Offline;
  ClassRule glob;
  glob.path_glob = "/batch.slice/*";
  glob.cls = CgroupClass::Offline;
  c.classes.rules.insert(c.classes.rules.begin(), {lab, glob});
  PodMeta labelled;
  labelled.labels = {{"colocation", "offline"}, {"app", "x"}};
  EXPECT_EQ(cls(bu, &labelled), CgroupClass::Offline);
  EXPECT_EQ(cls("/batch.slice/job-1.scope/sub"), CgroupClass::Offline);
  EXPECT_EQ(cls("/batch.slice"), CgroupClass::System);
}

namespace {

CgroupSample cg(uint64_t id, std::string path, uint64_t cpu_ns, uint64_t wait_ns, uint64_t waits, uint64_t wait_each) {
  CgroupSample s;
  s.id = id;
  s.path = std::move(path);
  s.interval.cpu_ns = cpu_ns;
  s.interval.wait_ns = wait_ns;
  s.interval.waits = waits;
  s.interval.hist[hist_bucket(wait_each)] = waits;
  return s;
}

}  // namespace

TEST(Rollup, PodsClassesAndInterference) {
  Config c = default_config();
  Classifier k(c.classes, "hadoop-yarn");
  std::string pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSd + ".slice";
  Sample s;
  s.interval_ns = 1'000'000'000;
  s.cgroups.push_back(cg(1, pod + "/cri-containerd-aaaaaaaaaaaa.scope", 300'000'000, 4'000'000, 100, 40'000));
  s.cgroups.push_back(cg(2, pod + "/cri-containerd-bbbbbbbbbbbb.scope", 200'000'000, 1'000'000, 100, 10'000));
  s.cgroups.push_back(cg(3, "/hadoop-yarn/container_1_2_3_4", 900'000'000, 0, 0, 0));
  s.cgroups.push_back(cg(4, "/system.slice/sshd.service", 10'000'000, 0, 0, 0));
  s.pairs.push_back({1, 3, 3'000'000, 3'000'000, 3'000'000});
  s.pairs.push_back({2, 3, 500'000, 500'000, 500'000});
  s.pairs.push_back({1, 4, 200'000, 200'000, 200'000});
  NodeSignals n = rollup(s, k);
  ASSERT_EQ(n.pods.size(), 1u);
  const auto& p = n.pods[0];
  EXPECT_EQ(p.uid, kUid);
  EXPECT_EQ(p.cls, CgroupClass::Online);
  EXPECT_EQ(p.interval.waits, 200u);
  EXPECT_EQ(p.interval.wait_ns, 5'000'000u);
  EXPECT_EQ(p.offline_wait_ns, 3'500'000u);
  EXPECT_NEAR(p.cpu_cores, 0.5, 1e-9);
  EXPECT_NEAR(p.wait_p99_us, 40, 40 * 0.125);
  EXPECT_EQ(n.online_cgroups.size(), 2u);
  const auto& on = n.classes[static_cast<size_t>(CgroupClass::Online)];
  EXPECT_EQ(on.wait_by_aggressor_class_ns[static_cast<size_t>(CgroupClass::Offline)], 3'500'000u);
  EXPECT_EQ(on.wait_by_aggressor_class_ns[static_cast<size_t>(CgroupClass::System)], 200'000u);
  EXPECT_NEAR(n.classes[static_cast<size_t>(CgroupClass::Offline)].cpu_cores, 0.9, 1e-9);
  ASSERT_EQ(n.yarn.size(), 1u);
  EXPECT_EQ(n.yarn[0].container, "container_1_2_3_4");
  EXPECT_EQ(n.yarn[0].online_wait_caused_ns, 3'500'000u);
  EXPECT_EQ(n.yarn[0].online_wait_caused_ns_total, 3'500'000u);
  EXPECT_EQ(n.offline_parents, std::vector<std::string>{"/hadoop-yarn"});

  // The agent's samples list only the pairs that moved: the container's
  // total since it was known is kept here, not summed from the listed pairs.
  Sample next;
  next.interval_ns = 1'000'000'000;
  next.complete = false;
  next.pairs.push_back({2, 3, 600'000, 600'000, 100'000});  // pair (1, 3) quiet
  n = rollup(next, k);
  ASSERT_EQ(n.yarn.size(), 1u);
  EXPECT_EQ(n.yarn[0].online_wait_caused_ns, 100'000u);
  EXPECT_EQ(n.yarn[0].online_wait_caused_ns_total, 3'600'000u);

  // New pod metadata re-indexes every cgroup: the totals stay.
  k.set_pods({});
  Sample quiet;
  quiet.interval_ns = 1'000'000'000;
  quiet.complete = false;
  n = rollup(quiet, k);
  ASSERT_EQ(n.yarn.size(), 1u);
  EXPECT_EQ(n.yarn[0].online_wait_caused_ns_total, 3'600'000u);
}

// Sibling containers of one pod (app, sidecar, pause) share its CPU: a wait
// behind a sibling is "same" at the pod level and never makes the sibling a
// top aggressor, while a wait behind another pod stays interference.
TEST(Rollup, SiblingContainersOfAPodAreNotInterference) {
  Config c = default_config();
  Classifier k(c.classes, "hadoop-yarn");
  std::string pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSd + ".slice";
  std::string other = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0000_1111.slice";
  Sample s;
  s.interval_ns = 1'000'000'000;
  s.cgroups.push_back(cg(1, pod + "/cri-containerd-aaaaaaaaaaaa.scope", 300'000'000, 4'000'000, 100, 40'000));
  s.cgroups.push_back(cg(2, pod + "/cri-containerd-bbbbbbbbbbbb.scope", 500'000'000, 0, 0, 0));
  s.cgroups.push_back(cg(3, other + "/cri-containerd-cccccccccccc.scope", 100'000'000, 0, 0, 0));
  s.cgroups[0].interval.cause_ns[KH_WAIT_OTHER_CGROUP] = 4'000'000;
  s.cgroups[0].total = s.cgroups[0].interval;
  s.pairs.push_back({1, 2, 3'000'000, 3'000'000, 3'000'000});  // behind its sidecar
  s.pairs.push_back({1, 3, 1'000'000, 1'000'000, 1'000'000});  // behind another pod
  NodeSignals n = rollup(s, k);
  ASSERT_EQ(n.pods.size(), 2u);
  const auto& p = n.pods[0].uid == kUid ? n.pods[0] : n.pods[1];
  EXPECT_EQ(p.interval.cause_ns[KH_WAIT_SAME_CGROUP], 3'000'000u);
  EXPECT_EQ(p.interval.cause_ns[KH_WAIT_OTHER_CGROUP], 1'000'000u);

  Signals sig = compute_signals(s);
  ASSERT_FALSE(sig.cgroups.empty());
  ASSERT_EQ(sig.cgroups[0].top_aggressors.size(), 1u);
  EXPECT_EQ(sig.cgroups[0].top_aggressors[0].id, 3u);
}

// Throttled time goes to the class of the pod, of an online cgroup, or
// offline at or below an offline parent (a YARN root, the BestEffort QoS
// cgroup); the rest is system.
TEST(Rollup, ThrottledTimeIsClassed) {
  Config c = default_config();
  Classifier k(c.classes, "hadoop-yarn");
  std::string bu = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSd + ".slice";
  Sample s;
  s.interval_ns = 1'000'000'000;
  auto thr = [&](uint64_t id, const std::string& path, uint64_t ns) {
    CgroupSample x = cg(id, path, 1'000'000, 0, 0, 0);
    x.throttle_interval = {1, ns};
    s.cgroups.push_back(x);
  };
  thr(1, bu + "/cri-containerd-aaaaaaaaaaaa.scope", 100'000'000);
  thr(2, "/hadoop-yarn/container_1_2_3_4", 200'000'000);
  thr(3, "/system.slice/foo.service", 300'000'000);
  thr(4, "/hadoop-yarn", 25'000'000);
  thr(5, "/hadoop-yarnish", 7'000'000);
  NodeSignals n = rollup(s, k);
  EXPECT_EQ(n.throttled_ns[static_cast<size_t>(CgroupClass::Online)], 100'000'000u);
  EXPECT_EQ(n.throttled_ns[static_cast<size_t>(CgroupClass::Offline)], 225'000'000u);
  EXPECT_EQ(n.throttled_ns[static_cast<size_t>(CgroupClass::System)], 307'000'000u);
}

// Direct reclaim is classed as throttling is, and summed per pod.
TEST(Rollup, ReclaimIsClassedAndSummedPerPod) {
  Config c = default_config();
  Classifier k(c.classes, "hadoop-yarn");
  std::string bu = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSd + ".slice";
  Sample s;
  s.interval_ns = 1'000'000'000;
  auto rec = [&](uint64_t id, const std::string& path, uint64_t node_ns, uint64_t memcg_ns) {
    CgroupSample x = cg(id, path, 1'000'000, 0, 0, 0);
    x.reclaim_interval.ns = {node_ns, memcg_ns};
    x.reclaim_interval.count = {node_ns ? 1u : 0u, memcg_ns ? 1u : 0u};
    s.cgroups.push_back(x);
  };
  rec(1, bu + "/cri-containerd-aaaaaaaaaaaa.scope", 1'000, 2'000);
  rec(2, bu + "/cri-containerd-bbbbbbbbbbbb.scope", 0, 3'000);
  rec(3, "/hadoop-yarn/container_1_2_3_4", 0, 50'000);
  rec(4, "/system.slice/foo.service", 7, 0);
  NodeSignals n = rollup(s, k);
  const auto& on = n.reclaim[static_cast<size_t>(CgroupClass::Online)];
  EXPECT_EQ(on.ns[KH_RECLAIM_NODE], 1'000u);
  EXPECT_EQ(on.ns[KH_RECLAIM_MEMCG], 5'000u);
  EXPECT_EQ(on.count[KH_RECLAIM_MEMCG], 2u);
  EXPECT_EQ(n.reclaim[static_cast<size_t>(CgroupClass::Offline)].ns[KH_RECLAIM_MEMCG], 50'000u);
  EXPECT_EQ(n.reclaim[static_cast<size_t>(CgroupClass::System)].ns[KH_RECLAIM_NODE], 7u);
  ASSERT_EQ(n.pods.size(), 1u);
  EXPECT_EQ(n.pods[0].reclaim_interval.total_ns(), 6'000u);
}

// A quota on a pod throttles the pod's own cgroup, listed as an ancestor
// (throttling only): the time counts for the pod and its class, but the
// pod's cgroup is not made a protected member, nor a pod of its own.
TEST(Rollup, AnAncestorsThrottlingCountsForItsPodWithoutJoiningIt) {
  Config c = default_config();
  Classifier k(c.classes, "hadoop-yarn");
  std::string pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSd + ".slice";
  Sample s;
  s.interval_ns = 1'000'000'000;
  s.complete = false;
  s.cgroups.push_back(cg(1, pod + "/cri-containerd-aaaaaaaaaaaa.scope", 100'000'000, 0, 0, 0));
  CgroupSample a;
  a.id = 2;
  a.path = pod;
  a.ancestor = true;
  a.throttle_interval = {3, 80'000'000};
  s.cgroups.push_back(a);
  CgroupSample y;  // the YARN root, capped by khagent
  y.id = 3;
  y.path = "/hadoop-yarn";
  y.ancestor = true;
  y.throttle_interval = {5, 40'000'000};
  s.cgroups.push_back(y);
  NodeSignals n = rollup(s, k);
  EXPECT_EQ(n.online_cgroups, std::vector<uint64_t>{1});
  ASSERT_EQ(n.pods.size(), 1u);
  EXPECT_EQ(n.pods[0].throttle_interval.throttled_ns, 80'000'000u);
  EXPECT_EQ(n.throttled_ns[static_cast<size_t>(CgroupClass::Online)], 80'000'000u);
  EXPECT_EQ(n.throttled_ns[static_cast<size_t>(CgroupClass::Offline)], 40'000'000u);
  EXPECT_EQ(k.size(), 1u) << "an ancestor was made a member";
}

// The agent's samples list only cgroups that moved: an idle online cgroup
// stays protected, its pod and an idle YARN container stay listed (with
// zero signals), until the collector reports them removed.
TEST(Rollup, IdleCgroupsStayKnownUntilRemoved) {
  Config c = default_config();
  Classifier k(c.classes, "hadoop-yarn");
  std::string pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSd + ".slice";
  Sample s;
  s.interval_ns = 1'000'000'000;
  s.complete = false;
  s.cgroups.push_back(cg(1, pod + "/cri-containerd-aaaaaaaaaaaa.scope", 300'000'000, 4'000'000, 100, 40'000));
  s.cgroups.push_back(cg(3, "/hadoop-yarn/container_1_2_3_4", 900'000'000, 0, 0, 0));
  NodeSignals n = rollup(s, k);
  ASSERT_EQ(n.pods.size(), 1u);
  EXPECT_EQ(n.pods[0].interval.waits, 100u);

  // Next tick: only an unrelated cgroup moved.
  Sample idle;
  idle.interval_ns = 1'000'000'000;
  idle.complete = false;
  idle.cgroups.push_back(cg(4, "/system.slice/sshd.service", 10'000'000, 0, 0, 0));
  n = rollup(idle, k);
  EXPECT_EQ(n.online_cgroups, std::vector<uint64_t>{1});
  ASSERT_EQ(n.pods.size(), 1u);
  EXPECT_EQ(n.pods[0].uid, kUid);
  EXPECT_EQ(n.pods[0].interval.waits, 0u);
  ASSERT_EQ(n.yarn.size(), 1u);
  EXPECT_EQ(n.yarn[0].container, "container_1_2_3_4");
  EXPECT_EQ(n.yarn[0].path, "/hadoop-yarn/container_1_2_3_4");
  EXPECT_DOUBLE_EQ(n.yarn[0].cpu_cores, 0);
  EXPECT_EQ(n.offline_parents, std::vector<std::string>{"/hadoop-yarn"});
  EXPECT_EQ(n.classes[static_cast<size_t>(CgroupClass::Online)].interval.waits, 0u);

  // Removed: gone from every list.
  Sample gone;
  gone.interval_ns = 1'000'000'000;
  gone.complete = false;
  gone.removed = {1, 3};
  n = rollup(gone, k);
  EXPECT_TRUE(n.online_cgroups.empty());
  EXPECT_TRUE(n.pods.empty());
  EXPECT_TRUE(n.yarn.empty());
  EXPECT_TRUE(n.offline_parents.empty());
  EXPECT_EQ(k.size(), 1u);  // sshd
}

// A complete sample (observe, top) is the whole membership: what it does
// not list is gone.
TEST(Rollup, ACompleteSampleReplacesTheMembership) {
  Config c = default_config();
  Classifier k(c.classes, "hadoop-yarn");
  Sample s;
  s.cgroups.push_back(cg(3, "/hadoop-yarn/container_1_2_3_4", 0, 0, 0, 0));
  s.cgroups.push_back(cg(4, "/system.slice/sshd.service", 0, 0, 0, 0));
  EXPECT_EQ(rollup(s, k).yarn.size(), 1u);
  s.cgroups.erase(s.cgroups.begin());
  NodeSignals n = rollup(s, k);
  EXPECT_TRUE(n.yarn.empty());
  EXPECT_TRUE(n.offline_parents.empty());
  EXPECT_EQ(k.size(), 1u);
}

// New pod metadata classes every known cgroup again, idle ones included.
TEST(Rollup, PodMetadataReclassesIdleCgroups) {
  Config c = default_config();
  Classifier k(c.classes, "hadoop-yarn");
  std::string pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSd + ".slice";
  Sample s;
  s.complete = false;
  s.cgroups.push_back(cg(1, pod + "/cri-containerd-aaaaaaaaaaaa.scope", 1, 0, 0, 0));
  EXPECT_EQ(rollup(s, k).online_cgroups, std::vector<uint64_t>{1});
  PodMeta off;
  off.priority_class = "low-priority-offline";
  k.set_pods({{kUid, off}});
  Sample idle;
  idle.complete = false;
  NodeSignals n = rollup(idle, k);
  EXPECT_TRUE(n.online_cgroups.empty());
  ASSERT_EQ(n.pods.size(), 1u);
  EXPECT_EQ(n.pods[0].cls, CgroupClass::Offline);
}
