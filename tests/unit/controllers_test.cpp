// The controllers over one snapshot: each file read once per tick, the
// registry, and what the memory and burst controllers decide from a
// snapshot of fake files (no kernel, no file system).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "khagent/actuate/actuator.h"
#include "khagent/collect/snapshot.h"
#include "khagent/model/histogram.h"
#include "khagent/policy/controllers.h"
#include "test_util.h"

using namespace khagent;

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kS = 1'000'000'000;

// The node's files as plain maps; every read counted.
class FakeReads : public NodeReads {
 public:
  mutable std::map<std::string, int> count;
  std::map<std::string, MemoryUse> mem;
  MemoryUse node{3000 * kMiB, 0, 4096 * kMiB, {}};
  std::map<std::string, PsiTotals> psi;
  std::map<std::string, CpuQuota> quota;
  std::map<std::string, uint64_t> burst;
  std::map<std::string, std::vector<std::string>> kids;

  bool has_memory() const override { return true; }
  Result<MemoryUse> memory(const std::string& cg) const override {
    count["memory " + cg]++;
    auto it = mem.find(cg);
    if (it == mem.end()) return make_error(ENOENT, cg);
    return it->second;
  }
  Result<MemoryUse> node_memory(const std::string&) const override {
    count["node"]++;
    return node;
  }
  Result<std::map<std::string, uint64_t>> oom_kill_counts(const std::string& cg) const override {
    count["oom " + cg]++;
    return std::map<std::string, uint64_t>{{cg, 0}};
  }
  std::map<std::string, std::string> own;  // at its own limit: why
  Result<std::string> at_own_limit(const std::string& cg, const std::string&) const override {
    count["own " + cg]++;
    auto it = own.find(cg);
    return it == own.end() ? std::string() : it->second;
  }
  Result<PsiTotals> memory_pressure(const std::string& cg) const override {
    count["psi " + cg]++;
    auto it = psi.find(cg);
    if (it == psi.end()) return make_error(ENOENT, cg);
    return it->second;
  }
  std::map<std::string, PsiTotals> io_psi;
  std::map<std::string, IoStat> io;
  Result<PsiTotals> io_pressure(const std::string& cg) const override {
    count["io psi " + cg]++;
    auto it = io_psi.find(cg);
    if (it == io_psi.end()) return make_error(ENOENT, cg);
    return it->second;
  }
  Result<IoStat> io_stat(const std::string& cg) const override {
    count["io " + cg]++;
    auto it = io.find(cg);
    if (it == io.end()) return make_error(ENOENT, cg);
    return it->second;
  }
  std::optional<CpuQuota> cpu_quota(const std::string& cg) const override {
    count["quota " + cg]++;
    auto it = quota.find(cg);
    return it == quota.end() ? std::nullopt : std::optional<CpuQuota>(it->second);
  }
  std::optional<uint64_t> cpu_burst(const std::string& cg) const override {
    count["burst " + cg]++;
    auto it = burst.find(cg);
    return it == burst.end() ? std::nullopt : std::optional<uint64_t>(it->second);
  }
  std::vector<std::string> children(const std::string& cg) const override {
    count["children " + cg]++;
    auto it = kids.find(cg);
    return it == kids.end() ? std::vector<std::string>{} : it->second;
  }
  Result<CpuManagerState> cpu_manager_state() const override {
    count["cpu manager"]++;
    return CpuManagerState{};
  }
};

NodeFacts facts() {
  NodeFacts f;
  f.topo.cpus = {{0, 0, 0}, {1, 1, 0}};
  f.memory = true;
  f.io = true;
  return f;
}

// An online pod whose waits this tick were mostly its own throttling.
PodSignals self_throttled(const std::string& path) {
  PodSignals p;
  p.uid = path;
  p.path = path;
  p.cls = CgroupClass::Online;
  p.interval.waits = 100;
  p.interval.wait_ns = 100'000'000;
  p.interval.cause_ns[KH_WAIT_THROTTLED] = 90'000'000;
  p.interval.hist[hist_bucket(20'000'000)] = 100;
  p.wait_p99_us = 20'000;
  return p;
}

// A pod answering a few requests a second: this tick, `waits` waits of
// `wait_ms` each, all of them its own throttling, in `periods` throttled
// periods.
PodSignals sparse(const std::string& path, uint64_t waits, uint64_t wait_ms, uint64_t periods) {
  PodSignals p;
  p.uid = path;
  p.path = path;
  p.cls = CgroupClass::Online;
  p.interval.waits = waits;
  p.interval.wait_ns = waits * wait_ms * 1'000'000;
  p.interval.cause_ns[KH_WAIT_THROTTLED] = p.interval.wait_ns;
  if (waits) p.interval.hist[hist_bucket(wait_ms * 1'000'000)] = waits;
  p.wait_p99_us = static_cast<double>(wait_ms) * 1000;
  p.throttle_interval.events = periods;
  p.throttled_periods_max = periods;
  p.throttle_interval.throttled_ns = periods * wait_ms * 1'000'000;
  return p;
}

struct Tick {
  NodeSignals node;
  std::vector<OfflineTarget> targets;
  std::vector<std::string> online;
  std::set<std::pair<std::string, Knob>> ours;
  TickView view(const TickSnapshot& snap) const {
    return {
        snap,         node, targets, online, [this](const std::string& cg, Knob k) { return ours.count({cg, k}) > 0; },
        snap.now_ns()};
  }
};

Controller& find(std::vector<std::unique_ptr<Controller>>& cs, const std::string& name) {
  for (auto& c : cs)
    if (c->name() == name) return *c;
  throw std::runtime_error("no controller " + name);
}

}  // namespace

TEST(TickSnapshot, ReadsEachFileOnceAndServesTheRestFromItsCache) {
  FakeReads r;
  r.mem["/yarn"] = {100 * kMiB, 0, {}, {}};
  const TickSnapshot snap(r, kS);
  EXPECT_EQ(snap.memory("/yarn").value().usage, 100 * kMiB);
  EXPECT_EQ(snap.memory("/yarn").value().usage, 100 * kMiB);
  EXPECT_FALSE(snap.memory("/gone").ok());
  EXPECT_FALSE(snap.memory("/gone").ok()) << "a failed read is cached too: one moment per tick";
  EXPECT_EQ(r.count["memory /yarn"], 1);
  EXPECT_EQ(r.count["memory /gone"], 1);
  EXPECT_EQ(snap.reads(), 2u);
  r.mem["/yarn"].usage = 200 * kMiB;
  EXPECT_EQ(snap.memory("/yarn").value().usage, 100 * kMiB) << "the tick's value, whatever the file says now";
  const TickSnapshot next(r, 2 * kS);
  EXPECT_EQ(next.memory("/yarn").value().usage, 200 * kMiB) << "the next tick reads again";
}

TEST(Controllers, OneListEachLeverOwnedByOneController) {
  Config cfg = default_config();
  auto all = make_controllers(cfg, facts());
  std::set<std::string> names;
  std::map<Lever, std::string> owner;
  for (const auto& c : all) {
    EXPECT_TRUE(names.insert(c->name()).second) << c->name();
    for (Lever l : c->levers()) EXPECT_TRUE(owner.emplace(l, c->name()).second) << lever_name(l) << " twice";
  }
  EXPECT_EQ(owner.size(), kAllLevers.size()) << "every lever has a controller";
  NodeFacts no_memory = facts();
  no_memory.memory = false;
  EXPECT_EQ(make_controllers(cfg, no_memory).size(), all.size() - 2)
      << "no memory or cache reclaim controller without memory";
  Config no_reclaim = cfg;
  no_reclaim.memory.reclaim = false;
  EXPECT_EQ(make_controllers(no_reclaim, facts()).size(), all.size() - 1);
  cfg.memory.enabled = false;
  EXPECT_EQ(make_controllers(cfg, facts()).size(), all.size() - 2);
}

TEST(Controllers, ATickReadsTheNodesFilesOnceForAllControllers) {
  Config cfg = default_config();
  auto cs = make_controllers(cfg, facts());
  FakeReads r;
  r.mem["/hadoop-yarn"] = {500 * kMiB, 0, {}, {}};
  Tick t;
  t.targets = {{"/hadoop-yarn", TargetKind::YarnRoot, 0.5, 0, false, {}}};
  t.node.pods = {self_throttled("/kubepods/pod-a")};
  t.online = {"/kubepods/pod-a"};
  r.quota["/kubepods/pod-a"] = {20000, 100000};
  for (uint64_t i = 1; i <= 3; i++) {
    r.count.clear();
    const TickSnapshot snap(r, i * kS);
    const TickView v = t.view(snap);
    for (auto& c : cs) (void)c->step(v);
    for (const auto& [file, n] : r.count) EXPECT_EQ(n, 1) << file << " read " << n << " times in tick " << i;
    EXPECT_GT(r.count["node"], 0);
    EXPECT_GT(r.count["memory /hadoop-yarn"], 0);
  }
}

TEST(BurstController, GivesTheBurstToThePodAndItsContainersButNotOverSomeoneElses) {
  Config cfg = default_config();  // burst_share 0.5
  auto cs = make_controllers(cfg, facts());
  Controller& burst = find(cs, "burst");
  FakeReads r;
  const std::string pod = "/kubepods/burstable/pod-a";
  r.kids[pod] = {pod + "/c1", pod + "/c2", pod + "/c3"};
  r.quota[pod] = {20000, 100000};
  r.quota[pod + "/c1"] = {20000, 100000};
  r.quota[pod + "/c2"] = {10000, 100000};
  r.quota[pod + "/c3"] = {std::nullopt, 100000};  // no quota: nothing throttles it
  r.burst = {{pod, 0}, {pod + "/c1", 0}, {pod + "/c2", 7000}};
  Tick t;
  t.node.pods = {self_throttled(pod)};
  t.online = {pod};
  const TickSnapshot snap(r, kS);
  Outcome o = burst.step(t.view(snap));
  ASSERT_EQ(o.settings.size(), 2u);
  EXPECT_EQ(o.settings[0], (Setting{pod, CpuBurst{10000}, Lever::Burst}));
  EXPECT_EQ(o.settings[1], (Setting{pod + "/c1", CpuBurst{10000}, Lever::Burst}));
  const auto& rep = std::get<BurstReport>(o.report);
  EXPECT_EQ(rep.pods, 1u);
  EXPECT_EQ(rep.cgroups, 2u);
  ASSERT_EQ(rep.online.size(), 1u);
  EXPECT_EQ(rep.online[0].verdict, BurstPod::Verdict::SelfThrottled);
  EXPECT_EQ(rep.online[0].burst, BurstPod::Burst::Given);
  EXPECT_EQ(rep.online[0].burst_us, 10000u);
  EXPECT_EQ(rep.online[0].cgroups, 2u);
  bool foreign = false;
  for (const auto& n : rep.notes)
    foreign = foreign || (n.kind == BurstNote::Kind::Foreign && n.path == pod + "/c2" && n.burst_us == 7000);
  EXPECT_TRUE(foreign) << "c2's burst of 7000 us is someone else's";

  // Its own burst, read back at the next tick, is still its own.
  r.burst[pod] = 10000;
  t.ours = {{pod, Knob::Burst}, {pod + "/c1", Knob::Burst}};
  t.node.pods[0].interval.cause_ns[KH_WAIT_THROTTLED] = 0;  // calm now: the pod keeps its burst
  const TickSnapshot next(r, 2 * kS);
  o = burst.step(t.view(next));
  EXPECT_EQ(o.settings.size(), 2u);
  EXPECT_EQ(std::get<BurstReport>(o.report).online.at(0).burst, BurstPod::Burst::InForce);
  // The pod gone: no burst wanted (the actuator puts the originals back).
  t.online.clear();
  t.node.pods.clear();
  const TickSnapshot gone(r, 3 * kS);
  EXPECT_TRUE(burst.step(t.view(gone)).settings.empty());
}

// The pod of the issue: a request (one or two waits) every 200 ms tick, far
// under online.min_waits (20) a tick. Judged over the window instead: once
// the kernel has throttled it in 2 periods, the burst, within a second.
TEST(BurstController, APodWithAFewRequestsASecondIsJudgedOverTheWindow) {
  Config cfg = default_config();
  ASSERT_EQ(cfg.online.min_waits, 20u);
  auto cs = make_controllers(cfg, facts());
  Controller& burst = find(cs, "burst");
  FakeReads r;
  const std::string pod = "/kubepods/burstable/pod-s";
  r.kids[pod] = {pod + "/c1"};
  r.quota[pod] = {20000, 100000};
  r.quota[pod + "/c1"] = {20000, 100000};
  r.burst = {{pod, 0}, {pod + "/c1", 0}};
  Tick t;
  t.online = {pod};
  t.node.interval_ns = kS / 5;
  // Tick 1: one throttled wait of 60 ms, one period: too few to judge.
  t.node.pods = {sparse(pod, 1, 60, 1)};
  const TickSnapshot s1(r, kS);
  Outcome o = burst.step(t.view(s1));
  EXPECT_TRUE(o.settings.empty());
  const auto& rep1 = std::get<BurstReport>(o.report);
  ASSERT_EQ(rep1.online.size(), 1u);
  EXPECT_EQ(rep1.online[0].verdict, BurstPod::Verdict::TooFew) << rep1.online[0].why;
  EXPECT_NE(rep1.online[0].why.find("too few to judge"), std::string::npos) << rep1.online[0].why;
  // Tick 2: nothing (between requests). Tick 3: the next request.
  t.node.pods = {sparse(pod, 0, 0, 0)};
  const TickSnapshot s2(r, kS + kS / 5);
  EXPECT_TRUE(burst.step(t.view(s2)).settings.empty());
  t.node.pods = {sparse(pod, 2, 40, 1)};
  const TickSnapshot s3(r, kS + 2 * kS / 5);
  o = burst.step(t.view(s3));
  ASSERT_EQ(o.settings.size(), 2u) << "two periods throttled in the window: judged";
  const auto& rep3 = std::get<BurstReport>(o.report);
  EXPECT_EQ(rep3.online[0].verdict, BurstPod::Verdict::SelfThrottled) << rep3.online[0].why;
  EXPECT_EQ(rep3.online[0].waits, 3u) << "the window's waits";
  EXPECT_EQ(rep3.online[0].throttled_periods, 2u);
  EXPECT_NEAR(rep3.online[0].window_s, 0.6, 1e-9);
  EXPECT_EQ(rep3.online[0].burst, BurstPod::Burst::Given);
}

// A throttled wait ages out of the window: a pod throttled once long ago is
// not judged with a new one.
TEST(BurstController, OldThrottlingLeavesTheWindow) {
  Config cfg = default_config();
  cfg.online.self_throttle_window_ns = kS;
  auto cs = make_controllers(cfg, facts());
  Controller& burst = find(cs, "burst");
  FakeReads r;
  const std::string pod = "/kubepods/burstable/pod-o";
  r.quota[pod] = {20000, 100000};
  r.burst = {{pod, 0}};
  Tick t;
  t.online = {pod};
  t.node.interval_ns = kS / 5;
  t.node.pods = {sparse(pod, 1, 60, 1)};
  const TickSnapshot s1(r, kS);
  burst.step(t.view(s1));
  t.node.pods = {sparse(pod, 1, 60, 1)};
  const TickSnapshot s2(r, 2 * kS);  // a window later
  Outcome o = burst.step(t.view(s2));
  EXPECT_TRUE(o.settings.empty());
  EXPECT_EQ(std::get<BurstReport>(o.report).online.at(0).verdict, BurstPod::Verdict::TooFew);
}

// A self-throttled pod refused a burst is told once, with why, for each
// reason: the lever off, no quota of its own (an ancestor's throttles it),
// every quota cgroup with someone else's burst.
TEST(BurstController, ARefusalIsReportedOncePerPodWithWhy) {
  const std::string a = "/kubepods/burstable/pod-a", b = "/kubepods/burstable/pod-b";
  FakeReads r;
  r.kids[b] = {b + "/c1"};
  r.quota[b] = {std::nullopt, 100000};
  r.quota[b + "/c1"] = {20000, 100000};
  r.burst = {{b, 0}, {b + "/c1", 3000}};  // c1: someone else's burst
  Tick t;
  t.online = {a, b};
  t.node.pods = {self_throttled(a), self_throttled(b)};
  auto refusals = [&](Controller& c, uint64_t now) {
    const TickSnapshot snap(r, now);
    Outcome o = c.step(t.view(snap));
    std::map<std::string, std::pair<BurstPod::Refusal, bool>> out;
    for (const auto& p : std::get<BurstReport>(o.report).online)
      if (p.burst == BurstPod::Burst::Refused) out[p.path] = {p.refusal, p.first};
    return out;
  };
  Config off = default_config();
  off.online.burst_share = 0;
  auto cs = make_controllers(off, facts());
  auto first = refusals(find(cs, "burst"), kS);
  EXPECT_EQ(first[a], std::make_pair(BurstPod::Refusal::LeverOff, true));
  EXPECT_EQ(first[b], std::make_pair(BurstPod::Refusal::LeverOff, true));
  auto again = refusals(find(cs, "burst"), 2 * kS);
  EXPECT_EQ(again[a], std::make_pair(BurstPod::Refusal::LeverOff, false)) << "told once";

  Config on = default_config();
  auto cs2 = make_controllers(on, facts());
  auto r1 = refusals(find(cs2, "burst"), kS);
  EXPECT_EQ(r1[a], std::make_pair(BurstPod::Refusal::NoQuota, true)) << "pod a has no quota anywhere";
  EXPECT_EQ(r1[b], std::make_pair(BurstPod::Refusal::Foreign, true));
  EXPECT_EQ(refusal_name(BurstPod::Refusal::Foreign), std::string("foreign_burst"));
  auto r2 = refusals(find(cs2, "burst"), 2 * kS);
  EXPECT_EQ(r2[b], std::make_pair(BurstPod::Refusal::Foreign, false)) << "told once";
  // The other writer's burst gone: b gets its own, and that is told.
  r.burst[b + "/c1"] = 0;
  const TickSnapshot snap(r, 3 * kS);
  Outcome o = find(cs2, "burst").step(t.view(snap));
  ASSERT_EQ(o.settings.size(), 1u);
  EXPECT_EQ(o.settings[0], (Setting{b + "/c1", CpuBurst{10000}, Lever::Burst}));
  const auto& online = std::get<BurstReport>(o.report).online;
  ASSERT_EQ(online.size(), 2u);
  EXPECT_EQ(online[1].path, b);
  EXPECT_EQ(online[1].burst, BurstPod::Burst::Given);
  EXPECT_TRUE(online[1].first);
}

// A refusal is told once while the pod lives, however often its verdict
// comes and goes (a pod throttled now and then with the lever off).
TEST(BurstController, ARefusalIsNotToldAgainWhenTheVerdictComesBack) {
  Config off = default_config();
  off.online.burst_share = 0;
  off.online.self_throttle_window_ns = kS / 5;  // one tick
  auto cs = make_controllers(off, facts());
  Controller& burst = find(cs, "burst");
  FakeReads r;
  const std::string a = "/kubepods/burstable/pod-a";
  Tick t;
  t.online = {a};
  std::vector<bool> firsts;
  for (int i = 0; i < 4; i++) {
    t.node.pods = {i % 2 == 0 ? self_throttled(a) : sparse(a, 30, 0, 0)};  // self-throttled, calm, ...
    const TickSnapshot snap(r, (1 + static_cast<uint64_t>(i)) * kS / 5);
    Outcome o = burst.step(t.view(snap));
    const auto& p = std::get<BurstReport>(o.report).online.at(0);
    if (p.burst == BurstPod::Burst::Refused) firsts.push_back(p.first);
  }
  EXPECT_EQ(firsts, (std::vector<bool>{true, false}));
}

// The online cgroups outside pods are judged on their own waits (the
// class's less its pods'), and refused a burst: no one cgroup to write.
TEST(BurstController, OnlineCgroupsOutsidePodsAreRefusedNotIgnored) {
  const Config cfg = default_config();  // the controllers keep a reference
  auto cs = make_controllers(cfg, facts());
  FakeReads r;
  Tick t;
  auto& on = t.node.classes[static_cast<size_t>(CgroupClass::Online)];
  on.interval.waits = 50;
  on.interval.wait_ns = 500'000'000;
  on.interval.cause_ns[KH_WAIT_THROTTLED] = 450'000'000;
  on.interval.hist[hist_bucket(10'000'000)] = 50;
  on.wait_p99_us = 10'000;
  const TickSnapshot snap(r, kS);
  Outcome o = find(cs, "burst").step(t.view(snap));
  const auto& online = std::get<BurstReport>(o.report).online;
  ASSERT_EQ(online.size(), 1u);
  EXPECT_EQ(online[0].path, "(online cgroups outside pods)");
  EXPECT_EQ(online[0].verdict, BurstPod::Verdict::SelfThrottled) << online[0].why;
  EXPECT_EQ(online[0].refusal, BurstPod::Refusal::NotAPod);
  EXPECT_NEAR(online[0].wait_p99_us, 10'000, 1'500) << "from the class's histogram";
}

TEST(MemoryController, AWakeUpWithoutACutLeavesTheControllerAsTheTickLeftIt) {
  Config cfg = default_config();
  auto cs = make_controllers(cfg, facts());
  Controller& mem = find(cs, "memory");
  FakeReads r;
  r.node = {1000 * kMiB, 0, 4096 * kMiB, {}};  // roomy: 3 GiB free
  r.mem["/hadoop-yarn"] = {500 * kMiB, 0, {}, {}};
  Tick t;
  t.targets = {{"/hadoop-yarn", TargetKind::YarnRoot, 0.5, 0, false, {}}};
  t.online = {"/kubepods/pod-a"};
  Wakeup w{kS / 2, {}, {"/kubepods/pod-a"}};
  {
    const TickSnapshot early(r, kS / 2);
    EXPECT_FALSE(mem.on_wakeup(w, t.view(early))) << "no tick yet: no targets to cut";
  }
  const TickSnapshot s1(r, kS);
  Outcome first = mem.step(t.view(s1));
  ASSERT_EQ(first.settings.size(), 1u);
  const auto budget = std::get<MemoryReport>(first.report).decision.budget;
  EXPECT_TRUE(first.offer.memory);
  EXPECT_EQ(first.offer.memory_budget_bytes, budget);
  EXPECT_EQ(first.oom_first, std::vector<std::string>{"/hadoop-yarn"});
  // A trigger on a roomy node: no cut, nothing to apply.
  w.now_ns = kS + kS / 2;
  const TickSnapshot s2(r, w.now_ns);
  EXPECT_FALSE(mem.on_wakeup(w, t.view(s2)));
  // The node short of memory (300 MiB free above the eviction threshold): the trigger cuts at once.
  r.node.usage = 3696 * kMiB;
  w.now_ns = kS + 3 * kS / 4;
  const TickSnapshot s3(r, w.now_ns);
  auto cut = mem.on_wakeup(w, t.view(s3));
  ASSERT_TRUE(cut);
  const auto& rep = std::get<MemoryReport>(cut->report);
  EXPECT_FALSE(rep.tick);
  EXPECT_TRUE(rep.decision.stalled);
  EXPECT_EQ(rep.input.stall_trigger, std::optional<std::string>("/kubepods/pod-a"));
  EXPECT_LT(rep.decision.budget, budget);
  ASSERT_EQ(cut->settings.size(), 1u);
  EXPECT_EQ(cut->settings[0].cgroup, "/hadoop-yarn");
  EXPECT_TRUE(cut->oom_first.empty()) << "the OOM order is set at ticks";
}

// What a new controller takes, shown with one that is not shipped: a class
// over the snapshot, its settings of an existing knob row (memory.reclaim,
// write-only) and the actuator as the loop drives it. Nothing in app/.
namespace {

class ReclaimExample : public Controller {
 public:
  const char* name() const override { return "reclaim-example"; }
  std::span<const Lever> levers() const override { return {}; }
  Outcome step(const TickView& v) override {
    Outcome o;
    for (const auto& t : v.targets)
      if (const auto& m = v.snap.memory(t.path); m && m.value().inactive_file >= 64 * kMiB)
        o.settings.push_back({t.path, MemoryReclaim{m.value().inactive_file / 2}});
    o.why = "example: half the offline page cache";
    o.report = BurstReport{};  // a real one adds its own report type
    return o;
  }
};

struct OneFileFs : CgroupFs {
  std::vector<std::string> writes;
  Result<std::string> read(const std::string& cg, CgroupFile) override { return make_error(EIO, cg + ": no read"); }
  Result<void> write(const std::string& cg, CgroupFile f, const std::string& v) override {
    writes.push_back(cg + " " + cgroup_file_name(f) + " " + v);
    return {};
  }
  bool exists(const std::string&) override { return true; }
};

}  // namespace

TEST(Controllers, ANewControllerPlugsInWithoutTheLoopKnowingIt) {
  FakeReads r;
  r.mem["/hadoop-yarn"] = {600 * kMiB, 400 * kMiB, {}, {}};
  r.mem["/batch"] = {10 * kMiB, 1 * kMiB, {}, {}};
  Tick t;
  t.targets = {{"/hadoop-yarn", TargetKind::YarnRoot, 0, 0, false, {}},
               {"/batch", TargetKind::Configured, 0, 0, false, {}}};
  const Config cfg = default_config();  // the controllers keep a reference to it
  std::vector<std::unique_ptr<Controller>> cs = make_controllers(cfg, facts());
  cs.push_back(std::make_unique<ReclaimExample>());
  const TickSnapshot snap(r, kS);
  std::vector<Setting> want;
  for (auto& c : cs) {
    Outcome o = c->step(t.view(snap));
    want.insert(want.end(), o.settings.begin(), o.settings.end());
  }
  EXPECT_EQ(r.count["memory /hadoop-yarn"], 1) << "the memory controller's read served the example too";
  TempDir d;
  OneFileFs fs;
  StateStore st((d.path / "s.json").string());
  Actuator a(fs, st, false, {0, 1});
  std::vector<Setting> reclaim;
  for (const auto& s : want)
    if (std::holds_alternative<MemoryReclaim>(s.value)) reclaim.push_back(s);
  auto recs = a.apply_plan(a.plan(CgroupBackend::V2, reclaim), kS);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].outcome, ActionOutcome::Written);
  EXPECT_EQ(fs.writes, std::vector<std::string>{"/hadoop-yarn memory.reclaim " + std::to_string(200 * kMiB)});
  EXPECT_TRUE(st.entries().empty()) << "a write-only knob saves no original";
}

TEST(MemoryController, TheBackstopHoldsARootOverItWhereItIsOnV2) {
  Config cfg = default_config();
  NodeFacts f = facts();
  f.memory_v2 = true;
  auto cs = make_controllers(cfg, f);
  Controller& mem = find(cs, "memory");
  FakeReads r;
  r.node = {1000 * kMiB, 0, 4096 * kMiB, {}};
  r.mem["/hadoop-yarn"] = {500 * kMiB, 0, {}, {}};
  r.mem["/kubepods/besteffort"] = {100 * kMiB, 0, {}, {}};
  Tick t;
  t.targets = {{"/hadoop-yarn", TargetKind::YarnRoot, 0.5, 0, false, {}},
               {"/kubepods/besteffort", TargetKind::BestEffortQos, 0.1, 0, false, {}}};
  auto limits = [](const Outcome& o) {
    std::map<std::string, uint64_t> high, max;
    for (const auto& s : o.settings) {
      if (const auto* m = std::get_if<MemoryLimit>(&s.value)) high[s.cgroup] = m->bytes.value_or(0);
      if (const auto* m = std::get_if<MemoryMax>(&s.value)) max[s.cgroup] = m->bytes.value_or(0);
    }
    return std::pair{high, max};
  };
  const TickSnapshot s1(r, kS);
  Outcome o1 = mem.step(t.view(s1));
  auto [high, max] = limits(o1);
  ASSERT_EQ(max.size(), 1u) << "the YARN root only, never the kubelet's QoS cgroup";
  const uint64_t reserve = std::get<MemoryReport>(o1.report).decision.reserve;
  EXPECT_EQ(max["/hadoop-yarn"], high["/hadoop-yarn"] + reserve / 2);
  EXPECT_EQ(std::get<MemoryReport>(o1.report).backstops.at("/hadoop-yarn"), max["/hadoop-yarn"]);
  // Online grows: the budget is cut below what the root holds (2 GiB of it
  // anonymous): the backstop holds it where it is, kills nothing.
  r.mem["/hadoop-yarn"] = {2048 * kMiB, 0, {}, {}};
  r.node.usage = 4000 * kMiB;
  const TickSnapshot s2(r, 2 * kS);
  auto [high2, max2] = limits(mem.step(t.view(s2)));
  EXPECT_LT(high2["/hadoop-yarn"], 2048 * kMiB);
  EXPECT_EQ(max2["/hadoop-yarn"], 2048 * kMiB + kBackstopSlack);
  // It grows on up to the backstop: the backstop does not follow.
  r.mem["/hadoop-yarn"] = {2060 * kMiB, 0, {}, {}};
  const TickSnapshot s3(r, 3 * kS);
  EXPECT_EQ(limits(mem.step(t.view(s3))).second["/hadoop-yarn"], 2048 * kMiB + kBackstopSlack);
  // An unreadable root keeps its backstop (a failed read lifts no limit).
  r.mem.erase("/hadoop-yarn");
  const TickSnapshot s4(r, 4 * kS);
  EXPECT_EQ(limits(mem.step(t.view(s4))).second["/hadoop-yarn"], 2048 * kMiB + kBackstopSlack);
  // A memory.max someone else wrote on a YARN root is left alone, and said.
  {
    auto fresh = make_controllers(cfg, f);
    Tick t2 = t;
    r.mem["/hadoop-yarn"] = {500 * kMiB, 0, 3 * 1024 * kMiB, {}};
    const TickSnapshot sf(r, 6 * kS);
    Outcome of = find(fresh, "memory").step(t2.view(sf));
    EXPECT_TRUE(limits(of).second.empty()) << "no backstop over their memory.max";
    EXPECT_EQ(std::get<MemoryReport>(of.report).backstop_foreign.at("/hadoop-yarn"), 3 * 1024 * kMiB);
    t2.ours = {{"/hadoop-yarn", Knob::Backstop}};  // khagent's own, from the state file
    const TickSnapshot so(r, 7 * kS);
    EXPECT_EQ(limits(find(fresh, "memory").step(t2.view(so))).second.size(), 1u);
  }
  // On a hybrid host (v1 memory) there is none.
  auto v1 = make_controllers(cfg, facts());
  const TickSnapshot s5(r, 5 * kS);
  EXPECT_TRUE(limits(find(v1, "memory").step(t.view(s5))).second.empty());
}

TEST(MemoryController, OomGroupOnEachYarnContainerOnlyWhereAllowedAndOnV2) {
  Config cfg = default_config();
  NodeFacts f = facts();
  f.memory_v2 = true;
  FakeReads r;
  r.node = {1000 * kMiB, 0, 4096 * kMiB, {}};
  r.mem["/hadoop-yarn"] = {500 * kMiB, 0, {}, {}};
  r.kids["/hadoop-yarn"] = {"/hadoop-yarn/container_e01_1700000000000_0001_01_000002",
                            "/hadoop-yarn/container_e01_1700000000000_0001_01_000003", "/hadoop-yarn/not-a-container"};
  r.kids["/kubepods/besteffort"] = {"/kubepods/besteffort/pod1234"};
  Tick t;
  t.targets = {{"/hadoop-yarn", TargetKind::YarnRoot, 0.5, 0, false, {}},
               {"/kubepods/besteffort", TargetKind::BestEffortQos, 0.1, 0, false, {}}};
  auto groups = [&](const Config& c, const NodeFacts& nf) {
    auto cs = make_controllers(c, nf);
    const TickSnapshot s(r, kS);
    std::vector<std::string> out;
    for (const auto& st : find(cs, "memory").step(t.view(s)).settings)
      if (const auto* g = std::get_if<MemoryOomGroup>(&st.value)) {
        EXPECT_TRUE(g->group);
        EXPECT_EQ(st.lever, Lever::OomGroup);
        out.push_back(st.cgroup);
      }
    return out;
  };
  EXPECT_TRUE(groups(cfg, f).empty()) << "off unless the operator allows it";
  cfg.memory.oom_group = true;
  EXPECT_EQ(groups(cfg, f), (std::vector<std::string>{"/hadoop-yarn/container_e01_1700000000000_0001_01_000002",
                                                      "/hadoop-yarn/container_e01_1700000000000_0001_01_000003"}))
      << "the YARN root's containers only: not the root, not its other children, never a pod";
  EXPECT_TRUE(groups(cfg, facts()).empty()) << "v1 has no memory.oom.group";
}

namespace {

CacheReclaimInput reclaim_tick(uint64_t now_ns, uint64_t refault_mib, uint64_t stall_us, uint64_t inactive_mib) {
  CacheReclaimInput in;
  in.now_ns = now_ns;
  in.interval_ns = kS / 5;
  in.online_refault_bytes = refault_mib * kMiB;
  in.refaults_known = true;
  in.online_stall_us = stall_us;
  in.parents = {{"/hadoop-yarn", inactive_mib * kMiB}, {"/kubepods/besteffort", 0}};
  return in;
}

}  // namespace

TEST(CacheReclaim, AsksOncePerWindowWhileOnlineRefaultsAndJudgesEachStep) {
  MemoryConfig cfg;  // 1 MiB/s starts a step; 64 MiB at least; 1 s windows
  CacheReclaimState st;
  uint64_t now = 0;
  // A window of five 200 ms ticks; `mib` refaulted per tick.
  auto window = [&](uint64_t mib, uint64_t stall_us, uint64_t inactive_mib) {
    CacheReclaimReport last;
    for (int i = 0; i < 5; i++) {
      now += kS / 5;
      last = cache_reclaim_step(reclaim_tick(now, mib, stall_us, inactive_mib), cfg, st);
      if (i < 4) {
        EXPECT_FALSE(last.window) << "between windows";
      }
    }
    EXPECT_TRUE(last.window);
    return last;
  };
  // Calm: under 1 MiB/s of refaults.
  auto calm = window(0, 0, 2000);
  EXPECT_EQ(calm.idle, CacheReclaimIdle::Calm);
  EXPECT_TRUE(calm.asks.empty());
  // 10 MiB/s refaulted: 4x the window's 10 MiB is under the step, so 64 MiB.
  auto ask = window(2, 1000, 2000);
  EXPECT_EQ(ask.idle, CacheReclaimIdle::None);
  ASSERT_EQ(ask.asks.size(), 1u) << "a parent without inactive cache is not asked";
  EXPECT_EQ(ask.asks[0].first, "/hadoop-yarn");
  EXPECT_EQ(ask.asks[0].second, 64 * kMiB);
  EXPECT_NEAR(ask.window->refault_rate, 10.0 * kMiB, 1);
  EXPECT_EQ(ask.offline_inactive, 2000 * kMiB);
  // Refaults fell: helped; it goes on at the same pace (a second step at once).
  auto helped = window(1, 1000, 2000);
  ASSERT_TRUE(helped.verdict);
  EXPECT_EQ(*helped.verdict, CacheReclaimVerdict::Helped);
  EXPECT_EQ(helped.backoff, 1u);
  EXPECT_EQ(helped.asks.size(), 1u);
  // They did not fall: useless, the next step waits two windows.
  auto useless = window(1, 1000, 2000);
  ASSERT_TRUE(useless.verdict);
  EXPECT_EQ(*useless.verdict, CacheReclaimVerdict::Useless);
  EXPECT_EQ(useless.backoff, 2u);
  EXPECT_EQ(useless.idle, CacheReclaimIdle::Paced);
  auto again = window(1, 1000, 2000);
  EXPECT_FALSE(again.verdict);
  EXPECT_EQ(again.asks.size(), 1u) << "two windows after the last step";
  EXPECT_EQ(again.asks[0].second, 64 * kMiB);
  // Online stalled more after it: costly, four times the pace.
  auto costly = window(1, 100'000, 2000);
  ASSERT_TRUE(costly.verdict);
  EXPECT_EQ(*costly.verdict, CacheReclaimVerdict::Costly);
  EXPECT_EQ(costly.backoff, 8u);
  for (int i = 0; i < 6; i++) {  // eight windows after the step, counting the verdict's
    EXPECT_TRUE(window(1, 100'000, 2000).asks.empty()) << "window " << i;
  }
  auto later = window(1, 100'000, 2000);
  EXPECT_EQ(later.asks.size(), 1u);
  // Refaults rose after it, stall did not: useless, the pace halves again.
  auto rose = window(40, 0, 2000);
  ASSERT_TRUE(rose.verdict);
  EXPECT_EQ(*rose.verdict, CacheReclaimVerdict::Useless);
  EXPECT_EQ(rose.backoff, 16u);
}

TEST(CacheReclaim, AStepThatCutOnlinesStallHelpedThoughRefaultsHeld) {
  MemoryConfig cfg;
  uint64_t now = 0;
  // One window of five 200 ms ticks, each refaulting `mib` and stalling `stall_us`.
  auto window = [&](CacheReclaimState& st, uint64_t mib, uint64_t stall_us) {
    CacheReclaimReport last;
    for (int i = 0; i < 5; i++) {
      now += kS / 5;
      last = cache_reclaim_step(reclaim_tick(now, mib, stall_us, 2000), cfg, st);
    }
    return last;
  };
  // 150 MiB/s refaulted, 12.5% stalled; then 145 MiB/s and 0.1% (6.12's case).
  CacheReclaimState st;
  ASSERT_EQ(window(st, 30, 25'000).asks.size(), 1u);
  auto after = window(st, 29, 200);
  ASSERT_TRUE(after.verdict);
  EXPECT_EQ(*after.verdict, CacheReclaimVerdict::Helped);
  EXPECT_EQ(after.backoff, 1u);
  // A stall under 1% that fell is noise, not help.
  CacheReclaimState quiet;
  ASSERT_EQ(window(quiet, 30, 1'000).asks.size(), 1u);
  auto q = window(quiet, 30, 0);
  ASSERT_TRUE(q.verdict);
  EXPECT_EQ(*q.verdict, CacheReclaimVerdict::Useless);
  // The stall fell but refaults rose: not counted as help.
  CacheReclaimState rose;
  ASSERT_EQ(window(rose, 30, 25'000).asks.size(), 1u);
  auto r = window(rose, 40, 200);
  ASSERT_TRUE(r.verdict);
  EXPECT_EQ(*r.verdict, CacheReclaimVerdict::Useless);
}

TEST(CacheReclaim, AskedAtMostTheCacheHeldAndSaysWhyNot) {
  MemoryConfig cfg;
  cfg.reclaim_interval_ns = kS / 5;  // one tick a window
  CacheReclaimState st;
  auto big = cache_reclaim_step(reclaim_tick(kS, 100, 0, 300), cfg, st);  // 500 MiB/s
  ASSERT_EQ(big.asks.size(), 1u);
  EXPECT_EQ(big.asks[0].second, 300 * kMiB) << "4 x 100 MiB asked, 300 MiB held";
  CacheReclaimState st2;
  EXPECT_EQ(cache_reclaim_step(reclaim_tick(kS, 100, 0, 0), cfg, st2).idle, CacheReclaimIdle::NoCache);
  auto no_counters = reclaim_tick(kS, 100, 0, 300);
  no_counters.refaults_known = false;
  CacheReclaimState st3;
  EXPECT_EQ(cache_reclaim_step(no_counters, cfg, st3).idle, CacheReclaimIdle::NoCounters);
}

TEST(CacheReclaimController, AsksTheOfflineParentsOnV2AndOnV1OnlyWhereItHoldsTheLimit) {
  Config cfg = default_config();
  cfg.memory.reclaim_interval_ns = kS;
  for (bool v2 : {true, false}) {
    NodeFacts f = facts();
    f.memory_v2 = v2;
    auto cs = make_controllers(cfg, f);
    Controller& rc = find(cs, "reclaim");
    FakeReads r;
    MemoryUse yarn{1500 * kMiB, 1000 * kMiB, {}, {}};
    r.mem["/hadoop-yarn"] = yarn;
    r.mem["/kubepods/pod-a"] = {300 * kMiB, 100 * kMiB, {}, 0, 0};
    Tick t;
    t.targets = {{"/hadoop-yarn", TargetKind::YarnRoot, 0.5, 0, false, {}}};
    t.online = {"/kubepods/pod-a"};
    if (!v2) t.ours = {{"/kubepods/besteffort", Knob::Memory}};  // not the YARN root's limit
    std::vector<Setting> asked;
    for (uint64_t i = 1; i <= 3; i++) {
      r.mem["/kubepods/pod-a"].refaults_file = i * 2560;  // 10 MiB a second of 4 KiB pages
      r.mem["/kubepods/pod-a"].refaults = i * 2560;
      const TickSnapshot snap(r, i * kS);
      Outcome o = rc.step(t.view(snap));
      for (const auto& s : o.settings) asked.push_back(s);
      if (i == 1) {
        EXPECT_TRUE(o.settings.empty()) << "the first reading only starts the count";
      }
    }
    if (!v2) {
      EXPECT_TRUE(asked.empty()) << "v1: no pulse on a limit whose original khagent does not hold";
      t.ours.insert({"/hadoop-yarn", Knob::Memory});
      r.mem["/kubepods/pod-a"].refaults_file = 4 * 2560;
      const TickSnapshot snap(r, 4 * kS);
      asked = rc.step(t.view(snap)).settings;
    }
    ASSERT_EQ(asked.size(), 1u) << (v2 ? "v2" : "v1");
    EXPECT_EQ(asked[0].cgroup, "/hadoop-yarn");
    EXPECT_EQ(asked[0].lever, Lever::Reclaim);
    EXPECT_EQ(std::get<MemoryReclaim>(asked[0].value).bytes, 64 * kMiB);
  }
}

TEST(MemoryController, OfTwoStalledPodsTheOneAtItsOwnLimitDoesNotHideTheOther) {
  Config cfg = default_config();
  cfg.memory.node_cgroup = "/node";
  auto run = [&](bool b_stalls) {
    auto cs = make_controllers(cfg, facts());
    Controller& mem = find(cs, "memory");
    FakeReads r;
    // A node cgroup full of offline page cache: 96 MiB unused, counting cache as used.
    r.node = {4000 * kMiB, 1500 * kMiB, 4096 * kMiB, {}};
    r.mem["/node/hadoop-yarn"] = {2000 * kMiB, 1400 * kMiB, {}, {}};
    const std::string a = "/node/kubepods/burstable/poda", b = "/node/kubepods/burstable/podb";
    r.own[a] = a + ": 510 MiB of 512 MiB";  // a stalls against its own limit
    Tick t;
    t.targets = {{"/node/hadoop-yarn", TargetKind::YarnRoot, 0.5, 0, false, {}}};
    t.online = {a, b};
    r.psi[a] = {0, 0, 0, 0};
    r.psi[b] = {0, 0, 0, 0};
    const TickSnapshot s1(r, kS);
    (void)mem.step(t.view(s1));
    r.psi[a] = {150'000, 0, 0, 0};  // 15% of the next second, the most stalled
    r.psi[b] = {b_stalls ? 100'000u : 0u, 0, 0, 0};
    const TickSnapshot s2(r, 2 * kS);
    return std::get<MemoryReport>(mem.step(t.view(s2)).report);
  };
  const MemoryReport both = run(true);
  EXPECT_TRUE(both.decision.stalled) << "the second pod stalls at the node's limit: offline is cut; "
                                     << both.decision.reason;
  EXPECT_FALSE(both.input.stall_own_limit.has_value()) << *both.input.stall_own_limit;
  EXPECT_NEAR(both.input.online_stall_share, 0.10, 1e-6) << "the share weighed is the node's pod's";
  const MemoryReport one = run(false);
  EXPECT_FALSE(one.decision.stalled) << "a pod stalling at its own limit alone cuts nothing";
  EXPECT_TRUE(one.input.stall_own_limit.has_value());
}
