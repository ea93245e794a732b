// Real BPF on the running kernel: trigger real scheduling, read khagent's maps
// and compare with the kernel's own accounting and an independent tracer.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/utsname.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "host_util.h"
#include "khagent/collect/bpf_maps.h"
#include "khagent/collect/collector.h"
#include "khagent/loader/runq_loader.h"
#include "mintrace.skel.h"
#include "stall_inject.skel.h"

using namespace khagent;
using namespace hosttest;

namespace {

constexpr int kCpu = 0;

struct MinTrace {
  mintrace_bpf* skel = nullptr;
  MinTrace() {
    skel = mintrace_bpf__open_and_load();
    if (skel && mintrace_bpf__attach(skel) != 0) {
      mintrace_bpf__destroy(skel);
      skel = nullptr;
    }
  }
  ~MinTrace() { mintrace_bpf__destroy(skel); }
  void watch(pid_t pid) {
    uint32_t k = static_cast<uint32_t>(pid);
    uint64_t zero[3] = {0, 0, 0};
    bpf_map_update_elem(bpf_map__fd(skel->maps.targets), &k, zero, BPF_ANY);
  }
  struct Totals {
    uint64_t wait_ns = 0;
    uint64_t waits = 0;
    uint64_t exit_wait_ns = 0;  // the same waits, stamped as its handlers end
  };
  Totals totals(pid_t pid) {
    uint32_t k = static_cast<uint32_t>(pid);
    Totals v;
    bpf_map_lookup_elem(bpf_map__fd(skel->maps.targets), &k, &v);
    return v;
  }
  // How long pid held the CPU while a watched task (pinned) waited there.
  double held_ns(pid_t pid) {
    uint32_t k = static_cast<uint32_t>(pid);
    uint64_t v = 0;
    bpf_map_lookup_elem(bpf_map__fd(skel->maps.held), &k, &v);
    return static_cast<double>(v);
  }
};

class RunqHost : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_ROOT();
    m_ = mounts();
    ASSERT_FALSE(m_.cgroup2.empty()) << "no cgroup2 mount";
    // The reference tracer attaches first: programs on a tracepoint run in
    // attach order, so its stamps then precede khagent's at both ends of a
    // wait, and the cost of khagent's own handlers does not show up as a
    // difference between the two.
    mt_ = std::make_unique<MinTrace>();
    ASSERT_NE(mt_->skel, nullptr) << "could not load the reference tracer";
    LoaderOptions o;
    o.pin_dir = "/sys/fs/bpf/" + unique("khagent-test");
    o.cpu_controller_on_v1 = !m_.cpu_v1.empty();
    auto b = RunqBpf::open_and_load(o);
    ASSERT_TRUE(b.ok()) << b.error().str();
    bpf_ = std::move(b.value());
    maps_ = std::make_unique<BpfMapSource>(bpf_->map_fds(true));
    parent_ = std::make_unique<TestCgroup>(m_.cgroup2, "/" + unique("khagent-host-test"));
  }
  void TearDown() override {
    children_.clear();
    while (!cgroups_.empty()) cgroups_.pop_back();  // children (made later) first
    parent_.reset();
    bpf_.reset();
    EXPECT_NE(::access(("/sys/fs/bpf/" + unique("khagent-test")).c_str(), F_OK), 0) << "pins left behind";
  }

  TestCgroup& cgroup(const std::string& name) {
    cgroups_.push_back(std::make_unique<TestCgroup>(m_.cgroup2, parent_->rel + "/" + name));
    return *cgroups_.back();
  }
  // A cgroup in the v1 cpu hierarchy (hybrid hosts). Kept by the fixture, so
  // it is removed after the children in it have been killed.
  TestCgroup& v1_cpu_cgroup(const std::string& name) {
    cgroups_.push_back(std::make_unique<TestCgroup>(m_.cpu_v1, "/" + unique("khagent-host-test") + "-" + name));
    return *cgroups_.back();
  }
  // Puts a 0.2 CPU quota (20 ms per 100 ms) on cgroup t: in the v1 cpu
  // hierarchy on a hybrid host (then *v1_procs is where its tasks go too),
  // in t itself on cgroup v2. Returns the directory whose cpu.stat counts
  // the throttling, "" on failure.
  std::string quota_02(const TestCgroup& t, std::string* v1_procs) {
    if (!m_.cpu_v1.empty()) {
      TestCgroup& v1 = v1_cpu_cgroup("quota");
      if (!write_file(v1.dir() + "/cpu.cfs_period_us", "100000") ||
          !write_file(v1.dir() + "/cpu.cfs_quota_us", "20000"))
        return "";
      *v1_procs = v1.dir() + "/cgroup.procs";
      return v1.dir();
    }
    if (!write_file(parent_->dir() + "/cgroup.subtree_control", "+cpu") ||
        !write_file(t.dir() + "/cpu.max", "20000 100000"))
      return "";
    return t.dir();
  }
  pid_t spawn(const TestCgroup& cg, int nice_value, const std::function<void()>& body,
              const std::string& v1_procs = "") {
    std::vector<std::string> procs{cg.dir() + "/cgroup.procs"};
    if (!v1_procs.empty()) procs.push_back(v1_procs);
    children_.emplace_back(procs, kCpu, nice_value, body);
    return children_.back().pid;
  }

  RawMaps read() {
    auto r = maps_->read();
    EXPECT_TRUE(r.ok()) << r.error().str();
    return r.ok() ? r.value() : RawMaps{};
  }
  static CgroupCounters of(const RawMaps& r, uint64_t id) {
    auto it = r.cgroups.find(id);
    return it == r.cgroups.end() ? CgroupCounters{} : it->second;
  }
  // The kernel's throttled time of a cgroup, in ns, from its cpu.stat (v1
  // throttled_time or v2 throttled_usec); -1 if it has none.
  static double kernel_throttled_ns(const std::string& cgroup_dir) {
    std::istringstream in(read_file(cgroup_dir + "/cpu.stat"));
    std::string k;
    uint64_t v = 0;
    while (in >> k >> v) {
      if (k == "throttled_time") return static_cast<double>(v);
      if (k == "throttled_usec") return static_cast<double>(v) * 1e3;
    }
    return -1.0;
  }
  static uint64_t pair_ns(const RawMaps& r, uint64_t victim, uint64_t aggressor) {
    for (const auto& p : r.pairs)
      if (p.victim == victim && p.aggressor == aggressor) return p.wait_ns;
    return 0;
  }

  Mounts m_;
  std::unique_ptr<MinTrace> mt_;
  std::unique_ptr<RunqBpf> bpf_;
  std::unique_ptr<BpfMapSource> maps_;
  std::unique_ptr<TestCgroup> parent_;
  std::vector<std::unique_ptr<TestCgroup>> cgroups_;
  std::vector<Child> children_;
};

}  // namespace

// (1) and (2): a 1 ms sleeper in B woken onto a CPU held by a hog in A.
TEST_F(RunqHost, WaitsMatchKernelAndTracerAndBlameTheHog) {
  auto& a = cgroup("a");
  auto& b = cgroup("b");
  pid_t hog = spawn(a, 0, [] { busy_loop(); });
  pid_t sleeper = spawn(b, 0, [] { sleep_loop(1000000); });
  ASSERT_GT(hog, 0);
  ASSERT_GT(sleeper, 0);
  MinTrace& mt = *mt_;
  mt.watch(sleeper);
  sleep_s(0.5);

  // The sleeper is stopped while the three are read, so that they count
  // the same waits. waitpid() returns once it has told its parent, which it
  // does before switching out; khagent's per-CPU batch of its last wait is
  // added at most 10 ms (cfg_pending_ns) after that: wait 20 ms.
  ASSERT_TRUE(freeze(sleeper));
  sleep_s(0.02);
  RawMaps r0 = read();
  Schedstat k0 = schedstat(sleeper);
  auto t0 = mt.totals(sleeper);
  double held0 = mt.held_ns(hog);
  ASSERT_TRUE(thaw(sleeper));
  sleep_s(4);
  ASSERT_TRUE(freeze(sleeper));
  sleep_s(0.02);
  RawMaps r1 = read();
  Schedstat k1 = schedstat(sleeper);
  auto t1 = mt.totals(sleeper);
  double held = mt.held_ns(hog) - held0;
  ASSERT_TRUE(thaw(sleeper));

  CgroupCounters bd = counters_delta(of(r1, b.id()), of(r0, b.id()));
  double kernel_waits = static_cast<double>(k1.pcount - k0.pcount);
  double kernel_delay = static_cast<double>(k1.run_delay_ns - k0.run_delay_ns);
  double tracer_ns = static_cast<double>(t1.wait_ns - t0.wait_ns);
  double tracer_exit_ns = static_cast<double>(t1.exit_wait_ns - t0.exit_wait_ns);
  double ours_ns = static_cast<double>(bd.wait_ns);
  std::printf(
      "B: khagent waits %llu wait %.3f ms | kernel pcount %.0f run_delay %.3f ms | "
      "tracer waits %llu wait %.3f ms, stamped at its handlers' exits %.3f ms\n",
      static_cast<unsigned long long>(bd.waits), ours_ns / 1e6, kernel_waits, kernel_delay / 1e6,
      static_cast<unsigned long long>(t1.waits - t0.waits), tracer_ns / 1e6, tracer_exit_ns / 1e6);
  ASSERT_GT(kernel_waits, 1000) << "the sleeper barely ran";
  EXPECT_NEAR(static_cast<double>(bd.waits) / kernel_waits, 1.0, 0.02);
  EXPECT_EQ(bd.waits, t1.waits - t0.waits);
  // run_delay is a lower bound of the true waits on a real kernel's clock;
  // in the TCG guest it is none (see in_vmtest_guest()), and the counts and
  // the reference tracer are the truths there.
  if (in_vmtest_guest()) {
    std::printf("run_delay not used as a bound: the vmtest guest's scheduler clock is emulated\n");
  } else {
    EXPECT_GE(ours_ns, 0.98 * kernel_delay) << "below the kernel's own run_delay";
  }
  // Both tracers stamp the same two events, but the tracer's handlers run
  // first, so khagent reads the clock at each end of a wait later by the run
  // time of the tracer's handler there. Its switch handler does more than its
  // wakeup handler, so with short waits the two totals differ by more than
  // the noise: 0.8 µs a wait on a busy host, 5-10 µs in the vmtest guest
  // (QEMU TCG), where 7 µs of a 127 µs mean wait was seen. The tracer also
  // stamps each wait as its handlers end, which is when khagent's start;
  // that total is the one to match. The total stamped at the handlers'
  // entries is printed only. In the TCG guest the dispatch between the two
  // programs costs microseconds of emulated time a wait, more when the host
  // is busy: 2.1 and 3.5 us a wait over the tracer's 34-36 us mean (6.2%,
  // 9.5%) were seen in clean-checkout runs, 0.1 us in another. The real
  // kernel's clock is held to 5%; the guest to 5% plus 5 us a wait.
  const double waits = static_cast<double>(bd.waits);
  auto tol = [&](double truth) { return 0.05 * truth + (in_vmtest_guest() ? 5000.0 * waits : 0.0); };
  EXPECT_NEAR(ours_ns, tracer_exit_ns, tol(tracer_exit_ns))
      << "disagrees with the reference tracer stamped at its handlers' exits";

  // (2) B's interference is A's. Kernel threads and daemons in the root
  // cgroup (kdamond, kworkers) also run on CPU 0 now and then and are
  // rightly blamed for their share; A must have the rest.
  double other = static_cast<double>(bd.cause_ns[KH_WAIT_OTHER_CGROUP]);
  double by_a = static_cast<double>(pair_ns(r1, b.id(), a.id()) - pair_ns(r0, b.id(), a.id()));
  uint64_t root_id = inode_of(m_.cgroup2);
  double by_root = static_cast<double>(pair_ns(r1, b.id(), root_id) - pair_ns(r0, b.id(), root_id));
  const double stolen = static_cast<double>(bd.cause_ns[KH_WAIT_STOLEN]);
  std::printf(
      "B: other-cgroup wait %.3f ms, of which A %.3f ms (the tracer saw the hog hold CPU 0 for %.3f ms of it), "
      "root cgroup %.3f ms; same %.3f ms unattributed %.3f ms stolen %.3f ms\n",
      other / 1e6, by_a / 1e6, held / 1e6, by_root / 1e6, static_cast<double>(bd.cause_ns[KH_WAIT_SAME_CGROUP]) / 1e6,
      static_cast<double>(bd.cause_ns[KH_WAIT_UNATTRIBUTED]) / 1e6, stolen / 1e6);
  ASSERT_GT(other, 0);
  // The truth for A's part: how long the tracer saw the hog run on CPU 0
  // while B waited there, stamped as the tracer's handlers end (as above).
  // The tracer counts a stall of CPU 0 in the hog's slice as the hog's;
  // khagent charges it to stolen (at most all of B's stolen wait: a stall
  // in another cgroup's slice is not in `held`).
  ASSERT_GT(held, 0) << "the reference tracer saw the hog hold none of B's wait";
  EXPECT_LE(by_a, held + tol(held)) << "A blamed for more than the hog held B's CPU";
  EXPECT_GE(by_a + stolen, held - tol(held)) << "A's blame, with the stalls in it, off the time the hog held B's CPU";
  EXPECT_GE(by_a / (other - by_root), 0.95);
  // The root cgroup's share is usually under 5%, but on a shared 2-CPU
  // host it follows whatever else runs there: 27% and 35% were seen. The
  // hog must still have held CPU 0 for most of B's wait, which a bug that
  // blamed the root cgroup (or nobody) for A's time would not pass.
  EXPECT_GE(by_a / other, 0.5) << "A, the hog on CPU 0, should hold most of B's wait";
  // A stall of CPU 0 inside B's wait is neither A's nor anyone's: the share
  // is of the wait that ran something. A clean-clone run under ASan had
  // 16.2 ms of a 60.5 ms wait in stalls (the hog's slices per the tracer),
  // which left other cgroups 73% of the whole wait and 100% of the rest.
  EXPECT_GE(other / (ours_ns - stolen), 0.8) << "most of B's wait that was not stolen should be other cgroups running";

  // A ran and was preempted by B's wakeups.
  CgroupCounters ad = counters_delta(of(r1, a.id()), of(r0, a.id()));
  EXPECT_GT(ad.cpu_ns, 2'000'000'000u);
  EXPECT_GT(ad.preemptions, 100u);
}

// (3) two aggressors with different CPU shares split the blame in proportion.
TEST_F(RunqHost, AttributionSplitsByAggressorShare) {
  auto& a1 = cgroup("a1");
  auto& a2 = cgroup("a2");
  auto& b = cgroup("b");
  pid_t h1 = spawn(a1, 0, [] { busy_loop(); });
  pid_t h2 = spawn(a2, 5, [] { busy_loop(); });  // weight 335 vs 1024
  pid_t sleeper = spawn(b, 0, [] { sleep_loop(1000000); });
  ASSERT_GT(h1, 0);
  ASSERT_GT(h2, 0);
  ASSERT_GT(sleeper, 0);
  MinTrace& mt = *mt_;
  mt.watch(sleeper);
  sleep_s(0.5);
  // B is stopped while khagent and the tracer are read (see the first test).
  ASSERT_TRUE(freeze(sleeper));
  sleep_s(0.02);
  RawMaps r0 = read();
  double t1_0 = mt.held_ns(h1), t2_0 = mt.held_ns(h2);
  ASSERT_TRUE(thaw(sleeper));
  sleep_s(4);
  ASSERT_TRUE(freeze(sleeper));
  sleep_s(0.02);
  RawMaps r1 = read();
  double t1_1 = mt.held_ns(h1), t2_1 = mt.held_ns(h2);
  ASSERT_TRUE(thaw(sleeper));

  double cpu1 = static_cast<double>(of(r1, a1.id()).cpu_ns - of(r0, a1.id()).cpu_ns);
  double cpu2 = static_cast<double>(of(r1, a2.id()).cpu_ns - of(r0, a2.id()).cpu_ns);
  double w1 = static_cast<double>(pair_ns(r1, b.id(), a1.id()) - pair_ns(r0, b.id(), a1.id()));
  double w2 = static_cast<double>(pair_ns(r1, b.id(), a2.id()) - pair_ns(r0, b.id(), a2.id()));
  double m1 = t1_1 - t1_0, m2 = t2_1 - t2_0;
  double share_cpu = cpu1 / (cpu1 + cpu2), share_blame = w1 / (w1 + w2), share_tracer = m1 / (m1 + m2);
  std::printf(
      "A1 cpu share %.3f blame share %.3f, tracer's %.3f (A1 %.2f ms, A2 %.2f ms of B's wait; tracer %.2f, %.2f "
      "ms)\n",
      share_cpu, share_blame, share_tracer, w1 / 1e6, w2 / 1e6, m1 / 1e6, m2 / 1e6);
  ASSERT_GT(w1 + w2, 0);
  ASSERT_GT(m1 + m2, 0) << "the reference tracer saw no wait behind the hogs";
  EXPECT_GT(share_cpu, 0.6) << "nice 5 should get clearly less CPU";
  // Who B waits behind is not exactly who gets the CPU overall (a waking B
  // is placed against the task running then; 0.63-0.78 against a CPU share
  // of 0.754 on the 6.18 host), so the truth is the reference tracer's: who
  // held CPU 0 while B waited there.
  // The tracer counts a stall of CPU 0 in a hog's slice as that hog's;
  // khagent charges it to B's stolen wait (see the test above). Which hog's
  // slice it fell in is unknown, so the shares may differ by its part of
  // the tracer's total more: a busy clean-clone run had 8.67 ms stolen, 7.3
  // ms of it in A2's slices (0.039 off at 0.03 allowed).
  const double stolen =
      static_cast<double>(of(r1, b.id()).cause_ns[KH_WAIT_STOLEN] - of(r0, b.id()).cause_ns[KH_WAIT_STOLEN]);
  if (stolen > 0) std::printf("B's stolen wait (CPU 0 stalls): %.2f ms\n", stolen / 1e6);
  EXPECT_NEAR(share_blame, share_tracer, 0.03 + stolen / (m1 + m2)) << "blame split off the reference tracer's";
  EXPECT_LE(w1, m1 + 0.05 * m1) << "A1 blamed for more than it held B's CPU";
  EXPECT_GE(w1 + stolen, m1 - 0.05 * m1) << "A1's blame off the time the tracer saw it hold B's CPU";
  EXPECT_LE(w2, m2 + 0.05 * m2 + 1e6) << "A2 blamed for more than it held B's CPU";
  EXPECT_GE(w2 + stolen, m2 - 0.05 * m2 - 1e6) << "A2's blame off the time the tracer saw it hold B's CPU";
}

// (2) A wait that moves to another CPU while queued. A nice-19 busy task V
// is moved (sched_setaffinity) between CPU 1, where nothing else of the test
// runs, and CPU 0, where a nice-0 hog A holds the CPU: 40 ms queued behind A,
// then moved back while still queued, and run at once on CPU 1. Its waits
// end on CPU 1, where A never ran, so blame taken from the ring of the CPU
// where a wait ends would give A nothing; the truth is that A held the CPU
// for nearly all of V's wait.
TEST_F(RunqHost, AWaitThatMovesCpusIsBlamedWhereItWasQueued) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) FAIL() << "needs 2 CPUs to move a task between them";
  auto& a = cgroup("a");
  auto& v = cgroup("v");
  // The test itself stays off CPU 0.
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(1, &one);
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  spawn(a, 0, [] { busy_loop(); });
  children_.emplace_back(std::vector<std::string>{v.dir() + "/cgroup.procs"}, 1, 19, [] { busy_loop(); });
  pid_t vp = children_.back().pid;
  ASSERT_GT(vp, 0);
  auto pin = [&](int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(vp, sizeof set, &set) == 0;
  };
  sleep_s(0.2);
  RawMaps r0 = read();
  constexpr int kCycles = 40;
  // ns V was on CPU 0's queue (or, briefly at nice 19, running there): at
  // least from the return of the move there to the call that moves it back,
  // at most from that move's call to the return of the move back (which
  // returns once V has left CPU 0), however long the calls took.
  double on_0 = 0, on_0_max = 0;
  for (int i = 0; i < kCycles; i++) {
    uint64_t before = mono_ns_now();
    ASSERT_TRUE(pin(0));
    uint64_t t = mono_ns_now();
    sleep_s(0.04);
    uint64_t t_end = mono_ns_now();
    ASSERT_TRUE(pin(1));
    uint64_t after = mono_ns_now();
    on_0 += static_cast<double>(t_end - t);
    on_0_max += static_cast<double>(after - before);
    sleep_s(0.02);
  }
  sleep_s(0.05);  // V runs on CPU 1: its last wait has ended
  RawMaps r1 = read();
  sched_setaffinity(0, sizeof saved, &saved);
  CgroupCounters c0 = of(r0, v.id()), c1 = of(r1, v.id());
  double wait = static_cast<double>(c1.wait_ns - c0.wait_ns);
  double behind_a = static_cast<double>(pair_ns(r1, v.id(), a.id()) - pair_ns(r0, v.id(), a.id()));
  double unattributed = static_cast<double>(c1.cause_ns[KH_WAIT_UNATTRIBUTED] - c0.cause_ns[KH_WAIT_UNATTRIBUTED]);
  // Outside its time on CPU 0, V waits only behind whatever else runs on
  // CPU 1 (not A): on a quiet machine, little.
  std::printf(
      "V waited %.1f ms over %d moves: %.1f ms behind A, of %.1f ms on CPU 0 (at most %.1f ms); %.1f ms "
      "unattributed\n",
      wait / 1e6, kCycles, behind_a / 1e6, on_0 / 1e6, on_0_max / 1e6, unattributed / 1e6);
  ASSERT_GT(wait, 0.5 * on_0) << "V did not wait behind A as planned";
  // 14% before waits were split at moves; 98-99% on a quiet machine. Other
  // work on CPU 0 (at V's nice 19 or above) takes a share of the blame.
  EXPECT_GE(behind_a, 0.7 * on_0) << "the part queued on CPU 0 must be blamed on A (is the machine busy?)";
  EXPECT_LE(behind_a, on_0_max) << "A was blamed for more than V's time on CPU 0";
}

// (6) a hog limited by a CFS quota waits because it is throttled: that is not
// interference. On this hybrid host the quota is set through the v1 cpu
// controller while the task sits in a v2 cgroup of the test's choosing.
TEST_F(RunqHost, QuotaThrottledWaitsAreCountedAsThrottled) {
  auto& t = cgroup("throttled");
  std::string v1_procs, quota_dir = quota_02(t, &v1_procs);
  ASSERT_FALSE(quota_dir.empty()) << "cannot put a quota on the cgroup";
  CgroupIndex index(m_.cgroup2);
  CpuStatThrottleReader cpu_stat(m_.cgroup2, m_.cpu_v1);
  Collector col(*maps_, index, &cpu_stat, bpf_->throttle_source());
  pid_t hog = spawn(t, 0, [] { busy_loop(); }, v1_procs);
  ASSERT_GT(hog, 0);
  sleep_s(0.3);
  // The hog is stopped while khagent and the kernel are read: the kernel adds
  // a throttled stretch when the cgroup is unthrottled, khagent when the hog
  // next runs (and its per-CPU batch up to 10 ms later), so a reading taken
  // mid-stretch can differ by one whole 80 ms stretch. A stopped hog has run
  // since its last stretch; 20 ms lets the batch reach the maps.
  ASSERT_TRUE(freeze(hog));
  sleep_s(0.02);
  ASSERT_TRUE(col.tick().ok());
  RawMaps r0 = read();
  double k0 = kernel_throttled_ns(quota_dir);
  ASSERT_TRUE(thaw(hog));
  sleep_s(3);
  ASSERT_TRUE(freeze(hog));
  sleep_s(0.02);
  RawMaps r1 = read();
  double k1 = kernel_throttled_ns(quota_dir);
  auto s = col.tick();
  ASSERT_TRUE(thaw(hog));
  ASSERT_TRUE(s.ok());

  CgroupCounters d = counters_delta(of(r1, t.id()), of(r0, t.id()));
  double wait = static_cast<double>(d.wait_ns);
  double thr = static_cast<double>(d.cause_ns[KH_WAIT_THROTTLED]);
  std::printf(
      "throttled hog: cpu %.1f ms, wait %.1f ms, throttled %.1f ms, other %.1f ms, "
      "waits %llu\n",
      static_cast<double>(d.cpu_ns) / 1e6, wait / 1e6, thr / 1e6,
      static_cast<double>(d.cause_ns[KH_WAIT_OTHER_CGROUP]) / 1e6, static_cast<unsigned long long>(d.waits));
  EXPECT_LT(static_cast<double>(d.cpu_ns), 0.35 * 3e9) << "the quota did not limit the hog";
  ASSERT_GT(wait, 1e9) << "a 20% quota hog should wait most of the time";
  // The throttled part is what the kernel counted as throttled time (on
  // kernels with the throttled clock, 6.6+); on a quiet CPU nearly all of
  // the wait, whatever else ran on it is interference.
  ASSERT_GE(k0, 0) << "no throttled time in " << quota_dir << "/cpu.stat";
  std::printf("kernel throttled time %.1f ms\n", (k1 - k0) / 1e6);
  EXPECT_NEAR(thr / (k1 - k0), 1.0, kernel_has_throttled_clock() ? 0.04 : 0.25)
      << "throttled part of the waits off the kernel's throttled time";

  // The throttle metric itself: from cpu.stat (here) or fentry.
  for (const auto& cg : s->cgroups) {
    if (cg.id != t.id()) continue;
    std::printf("throttle source %s: %llu events, %.1f ms in the interval\n", throttle_source_name(s->throttle_source),
                static_cast<unsigned long long>(cg.throttle_total.events),
                static_cast<double>(cg.throttle_total.throttled_ns) / 1e6);
    EXPECT_GE(cg.throttle_total.events, 20u);
    EXPECT_GT(cg.throttle_total.throttled_ns, 1'000'000'000u);
  }
}

// A wait split by its throttled overlap: two busy threads of a cgroup with a
// 0.2 CPU quota share CPU 0 with a hog of another cgroup. While the cgroup
// is throttled both threads wait, so the truth for the throttled part of
// their waits is 2 x the kernel's throttled time (cpu.stat). Deciding once,
// when a wait starts, put 9.2 s of 12.6 s under "throttled" against a truth
// of 8.4 s: after each unthrottle the threads also wait behind the hog, and
// that part is interference.
TEST_F(RunqHost, SelfThrottledWaitsSplitByTheirThrottledOverlap) {
  auto& t = cgroup("selfthrottled");
  auto& h = cgroup("hog");
  std::string v1_procs, quota_dir = quota_02(t, &v1_procs);
  ASSERT_FALSE(quota_dir.empty()) << "cannot put a quota on the cgroup";
  ASSERT_GT(spawn(h, 0, [] { busy_loop(); }), 0);
  ASSERT_GT(spawn(t, 0, [] { busy_loop(); }, v1_procs), 0);
  ASSERT_GT(spawn(t, 0, [] { busy_loop(); }, v1_procs), 0);
  sleep_s(0.5);
  RawMaps r0 = read();
  double k0 = kernel_throttled_ns(quota_dir);
  sleep_s(4);
  RawMaps r1 = read();
  double k1 = kernel_throttled_ns(quota_dir);
  ASSERT_GE(k0, 0) << "no throttled time in " << quota_dir << "/cpu.stat";
  CgroupCounters d = counters_delta(of(r1, t.id()), of(r0, t.id()));
  double wait = static_cast<double>(d.wait_ns), thr = static_cast<double>(d.cause_ns[KH_WAIT_THROTTLED]);
  double other = static_cast<double>(d.cause_ns[KH_WAIT_OTHER_CGROUP]);
  double same = static_cast<double>(d.cause_ns[KH_WAIT_SAME_CGROUP]);
  double truth = 2 * (k1 - k0);
  std::printf(
      "two threads under a 0.2 CPU quota next to a hog: wait %.0f ms = throttled %.0f + same %.0f + "
      "other %.0f + unattributed %.0f ms; truth for throttled 2 x %.0f = %.0f ms (%+.1f%%)\n",
      wait / 1e6, thr / 1e6, same / 1e6, other / 1e6, static_cast<double>(d.cause_ns[KH_WAIT_UNATTRIBUTED]) / 1e6,
      (k1 - k0) / 1e6, truth / 1e6, truth > 0 ? 100 * (thr - truth) / truth : 0);
  ASSERT_GT(truth, 2e9) << "the quota did not throttle the cgroup";
  // Without the kernel's throttled clock (before 6.6) the split is decided
  // when a wait begins: approximate, and documented as such.
  const bool exact = kernel_has_throttled_clock();
  std::printf("throttled clock in this kernel: %s\n", exact ? "yes" : "no (approximate split)");
  EXPECT_NEAR(thr / truth, 1.0, exact ? 0.04 : 0.25) << "throttled part of the waits off the kernel's throttled time";
  EXPECT_NEAR((thr + same + other + static_cast<double>(d.cause_ns[KH_WAIT_UNATTRIBUTED]) +
               static_cast<double>(d.cause_ns[KH_WAIT_STOLEN])) /
                  wait,
              1.0, 0.01);
}

// (Issue item 5) A quota on a pod's cgroup throttles the pod's cfs_rq, not
// its container's: the throttling belongs to the pod, which has no task of
// its own and so no map entry. It used to be dropped. The agent's collector
// (changes only) now lists it as the pod's own sample, and its throttled
// time is the kernel's (the pod's cpu.stat); the container shows none.
TEST_F(RunqHost, APodsQuotaIsReportedAtThePod) {
  auto& pod = cgroup("qpod");
  auto& ctr = cgroup("qpod/c");
  std::string v1_procs, quota_dir;
  if (!m_.cpu_v1.empty()) {
    // Hybrid host: the quota in v1, shaped like v2 below the pod (as the
    // kubelet makes both).
    TestCgroup& v1pod = v1_cpu_cgroup("qpod");
    cgroups_.push_back(std::make_unique<TestCgroup>(m_.cpu_v1, v1pod.rel + "/c"));
    ASSERT_TRUE(write_file(v1pod.dir() + "/cpu.cfs_period_us", "100000") &&
                write_file(v1pod.dir() + "/cpu.cfs_quota_us", "20000"));
    v1_procs = cgroups_.back()->dir() + "/cgroup.procs";
    quota_dir = v1pod.dir();
  } else {
    ASSERT_TRUE(write_file(parent_->dir() + "/cgroup.subtree_control", "+cpu") &&
                write_file(pod.dir() + "/cpu.max", "20000 100000"));
    quota_dir = pod.dir();
  }
  CgroupIndex index(m_.cgroup2);
  CpuStatThrottleReader cpu_stat(m_.cgroup2, m_.cpu_v1);
  Collector col(*maps_, index, &cpu_stat, bpf_->throttle_source());
  col.set_changes_only(true);
  ASSERT_GT(spawn(ctr, 0, [] { busy_loop(); }, v1_procs), 0);
  ASSERT_GT(spawn(ctr, 0, [] { busy_loop(); }, v1_procs), 0);
  sleep_s(0.3);
  ASSERT_TRUE(col.tick().ok());
  ASSERT_TRUE(col.tick().ok());  // the pod's first cpu.stat reading is the base
  double k0 = kernel_throttled_ns(quota_dir);
  uint64_t at_pod = 0, at_ctr = 0, pod_events = 0;
  auto add = [&](const Sample& s) {
    for (const auto& c : s.cgroups) {
      if (c.id == pod.id()) {
        at_pod += c.throttle_interval.throttled_ns;
        pod_events += c.throttle_interval.events;
        EXPECT_FALSE(counters_moved(c.interval)) << "the pod has no task of its own";
      }
      if (c.id == ctr.id()) at_ctr += c.throttle_interval.throttled_ns;
    }
  };
  for (int i = 0; i < 15; i++) {
    sleep_s(0.2);
    auto s = col.tick();
    ASSERT_TRUE(s.ok()) << s.error().str();
    add(*s);
  }
  double k1 = kernel_throttled_ns(quota_dir);
  auto s = col.tick();
  ASSERT_TRUE(s.ok());
  add(*s);
  ASSERT_GE(k0, 0) << "no throttled time in " << quota_dir << "/cpu.stat";
  std::printf(
      "pod quota 0.2 CPU, 2 busy threads in its container (throttle source %s): at the pod %.1f ms "
      "(%llu events), at the container %.1f ms; kernel (pod's cpu.stat) %.1f ms\n",
      throttle_source_name(bpf_->throttle_source()), static_cast<double>(at_pod) / 1e6,
      static_cast<unsigned long long>(pod_events), static_cast<double>(at_ctr) / 1e6, (k1 - k0) / 1e6);
  ASSERT_GT(k1 - k0, 1e9) << "the quota did not throttle the pod";
  // One throttled stretch (about 80 ms) may fall either side of a reading.
  EXPECT_NEAR(static_cast<double>(at_pod) / (k1 - k0), 1.0, 0.1) << "the pod's throttling is not the kernel's";
  EXPECT_GE(pod_events, 10u);
  EXPECT_EQ(at_ctr, 0u) << "the pod's throttling was counted at its container too";

  if (!m_.cpu_v1.empty()) {
    // Hybrid: the throttled cfs_rqs are v1 cgroups, whose ids would collide
    // with the v2 ids the maps use. cpu.stat is the source, and the fentry
    // hooks (where they load: the throttled clock) key nothing by them.
    EXPECT_EQ(bpf_->throttle_source(), ThrottleSource::CpuStat);
    int fd = bpf_obj_get(("/sys/fs/bpf/" + unique("khagent-test") + "/throttle_stats").c_str());
    ASSERT_GE(fd, 0) << "throttle_stats is not pinned";
    uint64_t key = 0;
    EXPECT_NE(bpf_map_get_next_key(fd, nullptr, &key), 0) << "throttle_stats has an entry keyed by v1 id " << key;
    ::close(fd);
  }
}

// (4) kernel engineers can read the pinned maps with bpftool, with field names.
TEST_F(RunqHost, BpftoolDumpsPinnedMapsWithFieldNames) {
  auto& b = cgroup("b");
  spawn(b, 0, [] { sleep_loop(1000000); });
  sleep_s(0.3);
  std::string dir = "/sys/fs/bpf/" + unique("khagent-test");
  ASSERT_EQ(bpf_->pinned().size(), bpf_->stall_detector() ? 10u : 9u);  // stall_stats with the detector
  std::string cmd = std::string(KHAGENT_BPFTOOL) + " map dump pinned " + dir + "/cgroup_stats 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  EXPECT_EQ(rc, 0) << out.substr(0, 2000);
  for (const char* field :
       {"\"id\"", "\"wait_ns\"", "\"waits\"", "\"cpu_ns\"", "\"preemptions\"", "\"cause_ns\"", "\"hist\"", "\"value\""})
    EXPECT_NE(out.find(field), std::string::npos) << field << " missing in:\n" << out.substr(0, 2000);
  // One slot per cgroup, naming it, summed over CPUs in the kernel: no per-CPU copies.
  EXPECT_NE(out.find("\"id\": " + std::to_string(b.id()) + ","), std::string::npos) << out.substr(0, 2000);
  EXPECT_EQ(out.find("\"values\""), std::string::npos) << out.substr(0, 2000);
}

// The maps do not evict: with room for 4 cgroups and 4 pairs, the first ones
// to run keep their entries (their counters only grow) and every insert
// beyond is refused and counted, where an LRU map evicted silently.
TEST_F(RunqHost, FullMapsCountFailedInsertsInsteadOfEvicting) {
  LoaderOptions o;
  o.pin = false;
  o.max_cgroups = 4;
  o.max_pairs = 4;
  auto small = RunqBpf::open_and_load(o);
  ASSERT_TRUE(small.ok()) << small.error().str();
  BpfMapSource maps((*small)->map_fds());
  auto& hog = cgroup("hog");
  spawn(hog, 0, [] { busy_loop(); });
  for (int i = 0; i < 6; i++) {
    auto& cg = cgroup("s" + std::to_string(i));
    spawn(cg, 0, [] { sleep_loop(1000000); });
  }
  sleep_s(0.5);
  auto r0 = maps.read();
  ASSERT_TRUE(r0.ok()) << r0.error().str();
  sleep_s(0.5);
  auto r1 = maps.read();
  ASSERT_TRUE(r1.ok()) << r1.error().str();
  std::printf("4-entry maps: %zu cgroups, %zu pairs; failed inserts: %llu cgroup, %llu pair\n", r1->cgroups.size(),
              r1->pairs.size(), static_cast<unsigned long long>(r1->counters[KH_CNT_STATS_FULL]),
              static_cast<unsigned long long>(r1->counters[KH_CNT_PAIRS_FULL]));
  EXPECT_EQ(r1->cgroups.size(), 4u);
  EXPECT_LE(r1->pairs.size(), 4u);
  // 7 busy test cgroups and the host's own: most of them found no room.
  EXPECT_GT(r1->counters[KH_CNT_STATS_FULL], r0->counters[KH_CNT_STATS_FULL]);
  EXPECT_GT(r1->counters[KH_CNT_PAIRS_FULL], 0u);
  // The same cgroups kept their entries and their counts went on growing.
  for (const auto& [id, c0] : r0->cgroups) {
    auto it = r1->cgroups.find(id);
    ASSERT_NE(it, r1->cgroups.end()) << "cgroup " << id << " lost its entry";
    EXPECT_GE(it->second.waits, c0.waits);
    EXPECT_GE(it->second.cpu_ns, c0.cpu_ns);
  }
}

// Removing a cgroup while the agent runs: its entries are deleted, no crash.
TEST_F(RunqHost, RemovedCgroupsAreForgotten) {
  CgroupIndex index(m_.cgroup2);
  Collector col(*maps_, index, nullptr, ThrottleSource::None);
  uint64_t id;
  {
    TestCgroup gone(m_.cgroup2, parent_->rel + "/gone");
    id = gone.id();
    Child c({gone.dir() + "/cgroup.procs"}, kCpu, 0, [] { sleep_loop(1000000); });
    ASSERT_GT(c.pid, 0);
    sleep_s(0.3);
    ASSERT_TRUE(col.tick_at(1'000'000'000ULL, 1).ok());
    ASSERT_TRUE(read().cgroups.count(id)) << "the cgroup was never seen";
    c.stop();
  }  // rmdir
  ASSERT_NE(::access((m_.cgroup2 + parent_->rel + "/gone").c_str(), F_OK), 0);
  auto s = col.tick_at(100'000'000'000ULL, 2);  // late enough for a fresh walk
  ASSERT_TRUE(s.ok());
  for (const auto& cg : s->cgroups) EXPECT_NE(cg.id, id);
  EXPECT_FALSE(read().cgroups.count(id)) << "entry of a removed cgroup left in the map";
  EXPECT_GE(col.forgotten(), 1u);
}

// Reads of only the slots whose moved bit is set (the owner of the maps)
// give the collector the same counts as reads of every slot (any other
// reader of the same maps): run side by side, each cgroup's sum of
// intervals agrees once the load has stopped, and an idle cgroup is not
// listed at all.
TEST_F(RunqHost, TheMovedSlotsGiveWhatWholeReadsGive) {
  RunqMapFds fds = bpf_->map_fds(true);
  ASSERT_TRUE(fds.owner());
  BpfMapSource whole_src(bpf_->map_fds());
  BpfMapSource moved_src(fds);
  CgroupIndex index(m_.cgroup2);
  Collector whole(whole_src, index, nullptr, ThrottleSource::None);
  Collector moved(moved_src, index, nullptr, ThrottleSource::None);
  whole.set_changes_only(true);
  moved.set_changes_only(true);
  auto& busy = cgroup("busy");
  auto& sleepy = cgroup("sleepy");
  auto& idle = cgroup("idle");
  std::map<uint64_t, uint64_t> waits_whole, waits_moved, cpu_whole, cpu_moved;
  auto add = [](const Sample& s, std::map<uint64_t, uint64_t>& waits, std::map<uint64_t, uint64_t>& cpu) {
    for (const auto& c : s.cgroups) {
      waits[c.id] += c.interval.waits;
      cpu[c.id] += c.interval.cpu_ns;
    }
  };
  uint64_t tick = 0;
  size_t idle_listed = 0;
  auto tick_both = [&] {
    tick++;
    auto a = whole.tick_at(tick * 200'000'000, tick);
    auto b = moved.tick_at(tick * 200'000'000, tick);
    ASSERT_TRUE(a.ok() && b.ok());
    add(*a, waits_whole, cpu_whole);
    add(*b, waits_moved, cpu_moved);
    for (const auto& c : b->cgroups) idle_listed += c.id == idle.id() && tick > 2;
  };
  {
    Child i({idle.dir() + "/cgroup.procs"}, kCpu, 0, [] { sleep_loop(1000000); });
    sleep_s(0.05);
    i.stop();  // it ran once: it has an entry, then nothing moves
  }
  spawn(busy, 0, [] { busy_loop(); });
  spawn(sleepy, 0, [] { sleep_loop(1000); });
  for (int i = 0; i < 8; i++) {
    sleep_s(0.2);
    tick_both();
  }
  children_.clear();  // stop the load
  sleep_s(0.1);       // every CPU's batch flushed (10 ms, or going idle)
  tick_both();
  tick_both();
  EXPECT_GT(moved_src.moved_reads(), 0u);
  for (const TestCgroup* cg : {&busy, &sleepy}) {
    EXPECT_GT(waits_whole[cg->id()] + cpu_whole[cg->id()], 0u) << cg->rel;
    EXPECT_EQ(waits_moved[cg->id()], waits_whole[cg->id()]) << cg->rel;
    EXPECT_EQ(cpu_moved[cg->id()], cpu_whole[cg->id()]) << cg->rel;
  }
  EXPECT_EQ(idle_listed, 0u) << "an idle cgroup was listed";
  std::printf("moved slots: %llu moved reads; busy %llu waits, sleepy %llu waits\n",
              static_cast<unsigned long long>(moved_src.moved_reads()),
              static_cast<unsigned long long>(waits_moved[busy.id()]),
              static_cast<unsigned long long>(waits_moved[sleepy.id()]));
}

// On a cgroup2 mount as root, ids resolve by file handle (no tree walk) and
// a removed cgroup is found by its stale handle within seconds, well before
// the next full walk (a minute).
TEST_F(RunqHost, IdsResolveByHandleAndRemovalsShowWithoutAWalk) {
  CgroupIndex index(m_.cgroup2);
  ASSERT_TRUE(index.handles()) << "open_by_handle_at refused on " << m_.cgroup2;
  TestCgroup fresh(m_.cgroup2, parent_->rel + "/fresh");
  auto p = index.resolve(fresh.id());
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, fresh.rel);
  EXPECT_EQ(index.alive(fresh.id()), CgroupIndex::Liveness::Alive);

  Collector col(*maps_, index, nullptr, ThrottleSource::None);
  uint64_t id;
  {
    TestCgroup gone(m_.cgroup2, parent_->rel + "/gone");
    id = gone.id();
    Child c({gone.dir() + "/cgroup.procs"}, kCpu, 0, [] { sleep_loop(1000000); });
    ASSERT_GT(c.pid, 0);
    sleep_s(0.3);
    auto first = col.tick_at(1'000'000'000ULL, 1);  // the first tick walks once
    ASSERT_TRUE(first.ok());
    sleep_s(0.3);
    auto second = col.tick_at(2'000'000'000ULL, 2);  // resolved, no walk
    ASSERT_TRUE(second.ok());
    bool named = false;
    for (const auto& cg : second->cgroups) named = named || (cg.id == id && cg.path == gone.rel);
    EXPECT_TRUE(named) << "the new cgroup was not resolved to its path";
    c.stop();
  }  // rmdir
  EXPECT_EQ(index.alive(id), CgroupIndex::Liveness::Gone);
  // Its last switch-out made it active in the interval it ended in; an idle
  // check after that one (every 5 s, still long before the next walk) finds
  // it. The dead task's final switch-out can land after waitpid() and the
  // rmdir (slow under emulation): let it land first, and allow a second
  // idle check for a switch-out that still straddles a tick.
  sleep_s(0.5);
  ASSERT_TRUE(col.tick_at(7'000'000'000ULL, 3).ok());
  ASSERT_TRUE(col.tick_at(13'000'000'000ULL, 4).ok());
  auto s = col.tick_at(19'000'000'000ULL, 5);
  ASSERT_TRUE(s.ok());
  for (const auto& cg : s->cgroups) EXPECT_NE(cg.id, id);
  EXPECT_FALSE(read().cgroups.count(id)) << "entry of a removed cgroup left in the map";
  EXPECT_GE(col.forgotten(), 1u);
}

// The kernel reports removed cgroups (tp_btf/cgroup_rmdir): a cgroup with
// counts is queued when it goes away; one that never had a task is not.
TEST_F(RunqHost, RemovedCgroupsAreReportedByTheKernel) {
  ASSERT_TRUE(bpf_->reports_removals()) << "handle_cgroup_rmdir did not attach";
  ASSERT_TRUE(maps_->reports_removals());
  uint64_t counted = 0, empty = 0;
  {
    TestCgroup used(m_.cgroup2, parent_->rel + "/removed-used");
    TestCgroup unused(m_.cgroup2, parent_->rel + "/removed-unused");
    counted = used.id();
    empty = unused.id();
    Child c({used.dir() + "/cgroup.procs"}, kCpu, 0, [] { sleep_loop(1000000); });
    ASSERT_GT(c.pid, 0);
    sleep_s(0.2);
    auto before = read();
    ASSERT_TRUE(before.cgroups.count(counted)) << "the sleeper's cgroup has no counts";
    EXPECT_TRUE(before.removed.empty());
    c.stop();
  }  // rmdir
  auto after = read();
  auto has = [&](uint64_t id) { return std::count(after.removed.begin(), after.removed.end(), id) > 0; };
  EXPECT_TRUE(has(counted)) << "the removal of a counted cgroup was not reported";
  EXPECT_FALSE(has(empty)) << "a cgroup that never had counts was reported";
  EXPECT_EQ(after.counters[KH_CNT_REMOVALS_LOST], 0u);
  EXPECT_TRUE(read().removed.empty()) << "a removal was reported twice";
}

// (5) the agent itself starts and reports its throttle source; fentry where
// the kernel takes it, cpu.stat where it refuses (this development kernel).
TEST(AgentBinary, ObserveJsonReportsThrottleSource) {
  REQUIRE_ROOT();
  std::string cmd = std::string(KHAGENT_BINARY) + " --no-pin observe --json --interval 300ms --count 2 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::vector<nlohmann::json> lines;
  char buf[1 << 16];
  std::string all;
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) all.append(buf, n);
  EXPECT_EQ(pclose(p), 0);
  std::istringstream in(all);
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  bool fentry = probe_fentry("throttle_cfs_rq") && probe_fentry("unthrottle_cfs_rq");
  for (const auto& j : lines) {
    EXPECT_EQ(j["throttle_source"], fentry ? "fentry" : "cpu.stat");
    EXPECT_GT(j["interval_ns"].get<uint64_t>(), 250'000'000u);
    ASSERT_FALSE(j["cgroups"].empty());
    bool root_seen = false;
    for (const auto& c : j["cgroups"]) root_seen |= c["path"] == "/";
    EXPECT_TRUE(root_seen) << "the root cgroup always has tasks";
  }
}

// Not root: a clear error and exit code 2.
TEST(AgentBinary, NonRootGetsAClearErrorAndExitTwo) {
  REQUIRE_ROOT();
  int out_pipe[2];
  ASSERT_EQ(pipe(out_pipe), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(out_pipe[1], STDERR_FILENO);
    ::close(out_pipe[0]);
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(99);
    execl(KHAGENT_BINARY, KHAGENT_BINARY, "observe", "--count", "1", nullptr);
    _exit(98);
  }
  ::close(out_pipe[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(out_pipe[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(out_pipe[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 2) << out;
  EXPECT_NE(out.find("must run as root"), std::string::npos) << out;
}

// Fast path: a protected cgroup's long waits reach userspace through the ring
// buffer at once, rate-limited per cgroup in the kernel; others never do.
TEST_F(RunqHost, FastPathReportsLongWaitsOfProtectedCgroups) {
  auto& a = cgroup("a");
  auto& b = cgroup("b");
  LoaderOptions o;
  o.pin = false;
  o.event_min_ns = 5000;
  o.event_interval_ns = 50'000'000;
  auto fast = RunqBpf::open_and_load(o);
  ASSERT_TRUE(fast.ok()) << fast.error().str();
  std::vector<kh_wait_event> events;
  ASSERT_TRUE((*fast)->open_events([&](const kh_wait_event& e) { events.push_back(e); }).ok());
  // Timed from before B is protected, so that no event can precede t0: the
  // rate limit's bound below then has one event of slack.
  timespec t0{}, t1{};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ASSERT_TRUE((*fast)->sync_protected({{b.id(), 5000}}).ok());
  spawn(a, 0, [] { busy_loop(); });
  spawn(b, 0, [] { sleep_loop(1000000); });
  double elapsed = 0;
  while (elapsed < 2.0) {
    ASSERT_TRUE((*fast)->poll_events(100).ok());
    clock_gettime(CLOCK_MONOTONIC, &t1);
    elapsed = static_cast<double>(t1.tv_sec - t0.tv_sec) + static_cast<double>(t1.tv_nsec - t0.tv_nsec) / 1e9;
  }
  size_t by_a = 0;
  for (const auto& e : events) {
    EXPECT_EQ(e.cgroup_id, b.id()) << "only the protected cgroup reports";
    EXPECT_GE(e.wait_ns, 5000u);
    by_a += e.aggressor_id == a.id();
  }
  std::printf("fast path: %zu events in %.1f s, %zu blamed on the hog\n", events.size(), elapsed, by_a);
  for (size_t i = 0; i < events.size() && i < 8; i++)
    std::printf("  wait %llu ns aggressor %llu (%llu ns) cause %u\n",
                static_cast<unsigned long long>(events[i].wait_ns),
                static_cast<unsigned long long>(events[i].aggressor_id),
                static_cast<unsigned long long>(events[i].aggressor_ns), events[i].cause);
  ASSERT_GE(events.size(), 5u) << "waits behind a hog should pass 5 us often";
  EXPECT_LE(events.size(), static_cast<size_t>(elapsed / 0.05) + 2) << "rate limit not enforced";
  // Mostly the hog; on a busy machine other cgroups hold CPU 0 now and then,
  // and the long waits the fast path picks are where they show up.
  EXPECT_GE(static_cast<double>(by_a), 0.6 * static_cast<double>(events.size()));
  // Unprotect: no more events. A program already past its lookup on the other
  // CPU may still submit one, so what is in the ring a moment later is
  // dropped; after that nothing may come.
  ASSERT_TRUE((*fast)->sync_protected({}).ok());
  sleep_s(0.01);
  ASSERT_TRUE((*fast)->drain_events().ok());
  events.clear();
  sleep_s(0.3);
  ASSERT_TRUE((*fast)->drain_events().ok());
  EXPECT_TRUE(events.empty()) << events.size() << " events after the cgroup was unprotected";
}

// The protected map follows what the agent asks each tick: entries added,
// thresholds changed, entries dropped, and the rate-limit state BPF keeps in
// an entry that stays is left alone.
TEST_F(RunqHost, ProtectedMapFollowsEachSync) {
  int fd = bpf_obj_get(("/sys/fs/bpf/" + unique("khagent-test") + "/protected_cgroups").c_str());
  ASSERT_GE(fd, 0) << "protected_cgroups not pinned: " << std::strerror(errno);
  auto contents = [&] {
    std::map<uint64_t, kh_protect> out;
    uint64_t key = 0, next = 0;
    const uint64_t* cur = nullptr;
    kh_protect v{};
    while (bpf_map_get_next_key(fd, cur, &next) == 0) {
      if (bpf_map_lookup_elem(fd, &next, &v) == 0) out[next] = v;
      key = next;
      cur = &key;
    }
    return out;
  };
  ASSERT_TRUE(bpf_->sync_protected({{1, 100}, {2, 200}}).ok());
  auto m = contents();
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[1].threshold_ns, 100u);
  EXPECT_EQ(m[2].threshold_ns, 200u);
  kh_protect rate{200, 777};  // as if BPF had sent an event for id 2
  uint64_t two = 2;
  ASSERT_EQ(bpf_map_update_elem(fd, &two, &rate, BPF_EXIST), 0);
  ASSERT_TRUE(bpf_->sync_protected({{2, 200}, {3, 300}}).ok());
  m = contents();
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m.count(1), 0u);
  EXPECT_EQ(m[2].last_event_ns, 777u) << "an entry that stays keeps its rate-limit state";
  EXPECT_EQ(m[3].threshold_ns, 300u);
  ASSERT_TRUE(bpf_->sync_protected({{2, 250}}).ok());
  m = contents();
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[2].threshold_ns, 250u);
  ASSERT_TRUE(bpf_->sync_protected({}).ok());
  EXPECT_TRUE(contents().empty());
  ::close(fd);
}

// A wait that lasts: a busy task of a protected cgroup preempted on CPU 0 by
// a SCHED_FIFO hog (in another cgroup) waits until the hog stops, up to the
// RT throttle (950 ms of each second). The scan reports it while it still
// goes on, with the hog's cgroup as the aggressor; before the hog, the
// victim never waits that long and the scan reports nothing.
TEST_F(RunqHost, AStarvedWaitIsReportedWhileItLasts) {
  auto& hog_cg = cgroup("rt-hog");
  auto& victim_cg = cgroup("victim");
  LoaderOptions o;
  o.pin = false;
  o.event_min_ns = 5'000'000;
  auto fast = RunqBpf::open_and_load(o);
  ASSERT_TRUE(fast.ok()) << fast.error().str();
  ASSERT_TRUE((*fast)->can_scan_waits()) << "this kernel (5.19+) should run the scan_waits iterator";
  std::vector<kh_wait_event> events;
  ASSERT_TRUE((*fast)->open_events([&](const kh_wait_event& e) { events.push_back(e); }).ok());
  ASSERT_TRUE((*fast)->sync_protected({{victim_cg.id(), 100'000'000}}).ok());
  pid_t victim = spawn(victim_cg, 0, [] { busy_loop(); });
  ASSERT_GT(victim, 0);
  // Control: the victim runs alone on CPU 0.
  sleep_s(0.3);
  ASSERT_TRUE((*fast)->scan_waits().ok());
  ASSERT_TRUE((*fast)->drain_events().ok());
  EXPECT_TRUE(events.empty()) << "a task that is not starved was reported";
  events.clear();

  uint64_t hog_start = mono_ns_now();
  pid_t hog = spawn(hog_cg, 0, [] {
    sched_param sp{};
    sp.sched_priority = 1;
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) _exit(95);
    timespec a{}, b{};
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {  // 600 ms, then exit: never spin unbounded at RT priority
      clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 600000000L);
    _exit(0);
  });
  ASSERT_GT(hog, 0);
  sleep_s(0.3);
  ASSERT_TRUE((*fast)->scan_waits().ok());
  uint64_t scanned = mono_ns_now();
  ASSERT_TRUE((*fast)->drain_events().ok());
  // The hog must still be running: the report came while the wait went on.
  // (Not reaped here: the fixture reaps its children, so no pid is reused.)
  std::string stat = read_file("/proc/" + std::to_string(hog) + "/stat");
  size_t rp = stat.rfind(')');
  bool hog_alive = rp != std::string::npos && rp + 2 < stat.size() && stat[rp + 2] != 'Z';
  ASSERT_TRUE(hog_alive) << "the RT hog ended before the scan (machine too slow?)";
  const kh_wait_event* seen = nullptr;
  for (const auto& e : events)
    if (e.cgroup_id == victim_cg.id()) seen = &e;
  ASSERT_NE(seen, nullptr) << "no event for the starved victim (" << events.size() << " events)";
  std::printf(
      "ongoing wait reported %.0f ms after the hog started: wait so far %.1f ms, aggressor %s for %.1f ms, "
      "cause %u, CPU %u\n",
      static_cast<double>(scanned - hog_start) / 1e6, static_cast<double>(seen->wait_ns) / 1e6,
      seen->aggressor_id == hog_cg.id() ? "the RT hog's cgroup" : std::to_string(seen->aggressor_id).c_str(),
      static_cast<double>(seen->aggressor_ns) / 1e6, seen->cause, seen->cpu);
  EXPECT_TRUE(seen->flags & KH_EVENT_ONGOING);
  EXPECT_EQ(seen->cpu, static_cast<unsigned>(kCpu));
  EXPECT_GE(seen->wait_ns, 200'000'000u);
  EXPECT_LE(seen->ts_ns, scanned);
  EXPECT_EQ(seen->aggressor_id, hog_cg.id());
  EXPECT_EQ(seen->cause, static_cast<uint32_t>(KH_WAIT_OTHER_CGROUP));
  // Blamed for the time since the hog was last switched in: a stopper or
  // other higher-class task that ran on CPU 0 for a moment restarts that
  // (159 of 300 ms in one run), so only "some of it, never more" holds.
  EXPECT_GT(seen->aggressor_ns, 0u);
  EXPECT_LE(seen->aggressor_ns, seen->wait_ns);
  // Once per wait: a second scan of the same wait adds nothing.
  events.clear();
  ASSERT_TRUE((*fast)->scan_waits().ok());
  ASSERT_TRUE((*fast)->drain_events().ok());
  for (const auto& e : events) EXPECT_NE(e.cgroup_id, victim_cg.id()) << "the same wait was reported twice";
}

// The event's aggressor is the cgroup that held the CPU longest in total
// during the wait, not the one with the longest single stretch. A scripted
// pair on CPU 0, both SCHED_FIFO at one priority, preempts a busy victim
// every 50 ms, 20 times: "many" spins 2 ms and yields to "one", which spins 3 ms and
// sleeps; "many" then spins 2 ms more and sleeps. The victim waits about
// 7 ms: 4 ms behind "many" in two stretches, 3 ms behind "one" in one. The
// truth of each cycle is what the two actually ran (their CPU time, kept in
// shared memory), not the script: under emulation a stretch can run long.
TEST_F(RunqHost, TheEventsAggressorHeldTheCpuLongestInTotal) {
  auto& many_cg = cgroup("many");
  auto& one_cg = cgroup("one");
  auto& victim_cg = cgroup("victim");
  LoaderOptions o;
  o.pin = false;
  o.event_min_ns = 1'000'000;
  o.event_interval_ns = 1'000'000;
  auto fast = RunqBpf::open_and_load(o);
  ASSERT_TRUE(fast.ok()) << fast.error().str();
  std::vector<kh_wait_event> events;
  ASSERT_TRUE((*fast)->open_events([&](const kh_wait_event& e) { events.push_back(e); }).ok());
  ASSERT_TRUE((*fast)->sync_protected({{victim_cg.id(), 5'000'000}}).ok());
  ASSERT_GT(spawn(victim_cg, 0, [] { busy_loop(); }), 0);
  // Under emulation a stretch can run long enough that a cycle no longer
  // tells the rules apart (4 of 10 did in one vmtest run): 20 cycles, of
  // which at least kTelling must.
  constexpr int kCycles = 20;
  constexpr int kTelling = 5;
  constexpr uint64_t kCycleNs = 50'000'000;
  // Per task and cycle: CPU time in total and in its longest stretch.
  struct Ran {
    uint64_t total_ns[kCycles], longest_ns[kCycles];
  };
  auto* ran =
      static_cast<Ran*>(mmap(nullptr, 2 * sizeof(Ran), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(ran, MAP_FAILED);
  std::memset(ran, 0, 2 * sizeof(Ran));
  const uint64_t base = mono_ns_now() + 200'000'000;
  // Sleep until base + k cycles + offset, spin for the given stretches
  // (sched_yield between them), for kCycles cycles, then exit.
  auto scripted = [base](Ran* out, uint64_t offset_ns, std::vector<uint64_t> stretches_ns) {
    return [base, out, offset_ns, stretches_ns] {
      sched_param sp{};
      sp.sched_priority = 1;
      if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) _exit(95);
      auto cpu_ns = [] {
        timespec ts{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
      };
      for (int k = 0; k < kCycles; k++) {
        uint64_t at = base + k * kCycleNs + offset_ns;
        timespec ts{static_cast<time_t>(at / 1'000'000'000ULL), static_cast<long>(at % 1'000'000'000ULL)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
        }
        // From the wake-up on, all of it counted: a slow first pass
        // (page faults, emulation) is CPU time the victim waited for too.
        uint64_t c = cpu_ns(), c_wake = c;
        for (size_t i = 0; i < stretches_ns.size(); i++) {
          if (i) sched_yield();
          uint64_t t = mono_ns_now();
          while (mono_ns_now() - t < stretches_ns[i]) asm volatile("" ::: "memory");
          uint64_t now = cpu_ns();
          out->longest_ns[k] = std::max(out->longest_ns[k], now - c);
          c = now;
        }
        out->total_ns[k] = c - c_wake;
      }
      // Exit well after the last cycle: a task's exit runs in its cgroup
      // (5 ms and more under emulation) and would add to that cycle.
      sleep_s(0.2);
      _exit(0);
    };
  };
  ASSERT_GT(spawn(many_cg, 0, scripted(&ran[0], 0, {2'000'000, 2'000'000})), 0);
  ASSERT_GT(spawn(one_cg, 0, scripted(&ran[1], 200'000, {3'000'000})), 0);
  while (mono_ns_now() < base + kCycles * kCycleNs + 50'000'000) ASSERT_TRUE((*fast)->poll_events(50).ok());
  ASSERT_TRUE((*fast)->drain_events().ok());
  int cycles = 0, telling = 0, right = 0;
  for (const auto& e : events) {
    // The scripted waits end within 20 ms of a cycle's start; others (a
    // busy machine's own tasks on CPU 0) are not part of the script.
    if (e.cgroup_id != victim_cg.id() || e.wait_ns < 6'000'000 || e.ts_ns < base ||
        e.ts_ns >= base + kCycles * kCycleNs || (e.ts_ns - base) % kCycleNs > 20'000'000)
      continue;
    size_t k = (e.ts_ns - base) / kCycleNs;
    cycles++;
    // A cycle tells the two rules apart when the cgroup with the most time
    // in total is not the one with the longest single stretch.
    bool many_most = ran[0].total_ns[k] > ran[1].total_ns[k];
    bool many_longest = ran[0].longest_ns[k] > ran[1].longest_ns[k];
    if (many_most == many_longest) continue;
    telling++;
    uint64_t most = many_most ? many_cg.id() : one_cg.id();
    right += e.aggressor_id == most;
    std::printf("  cycle %zu: wait %.2f ms; ran many %.2f (longest %.2f), one %.2f ms; aggressor %s for %.2f ms\n", k,
                static_cast<double>(e.wait_ns) / 1e6, static_cast<double>(ran[0].total_ns[k]) / 1e6,
                static_cast<double>(ran[0].longest_ns[k]) / 1e6, static_cast<double>(ran[1].total_ns[k]) / 1e6,
                e.aggressor_id == many_cg.id()  ? "many"
                : e.aggressor_id == one_cg.id() ? "one"
                                                : std::to_string(e.aggressor_id).c_str(),
                static_cast<double>(e.aggressor_ns) / 1e6);
    // Never the one with the longest stretch and less in total.
    EXPECT_NE(e.aggressor_id, many_most ? one_cg.id() : many_cg.id()) << "cycle " << k;
  }
  munmap(ran, 2 * sizeof(Ran));
  std::printf("%d scripted waits of the victim, %d telling the rules apart: %d blamed on the most time in total\n",
              cycles, telling, right);
  ASSERT_GE(telling, kTelling) << "the scripted waits did not happen (" << events.size() << " events, " << cycles
                               << " scripted)";
  // On a busy machine another task on CPU 0 may hold it longer than both in
  // some waits (it is then the aggressor, rightly); the most name the truth.
  EXPECT_GE(right, telling / 2 + 1);
}

// The agent end to end in dry run: an online pod (laid out like a Burstable
// pod) waits behind a YARN container; the agent cuts the offline budget and
// says what it would write, then exits 0 on SIGINT.
TEST(AgentBinary, RunDryRunSqueezesOfflineForAnOnlinePod) {
  REQUIRE_ROOT();
  Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  std::string k = unique("kh");  // unique names the layout parser still accepts
  std::string pod =
      "/" + k + "-kubepods.slice/" + k + "-kubepods-burstable.slice/" + k + "-kubepods-burstable-pod1111_2222.slice";
  std::string yarn = "/" + k + "-yarn";
  {
    LaidOutCgroup top(m, "/" + k + "-kubepods.slice");
    LaidOutCgroup qos(m, "/" + k + "-kubepods.slice/" + k + "-kubepods-burstable.slice");
    LaidOutCgroup p(m, pod);
    LaidOutCgroup c(m, pod + "/cri-containerd-0123456789ab.scope");
    LaidOutCgroup yr(m, yarn);
    LaidOutCgroup yc(m, yarn + "/container_1_2_3_4");
    Child hog(yc.procs(), 0, 0, [] { busy_loop(); });
    // Nice 19 next to the nice-0 hog on one CPU: its wake-ups rarely preempt
    // the hog, so its waits are long and behind offline on every run (at
    // nice 0 a fast preemption sometimes kept its p99 under the target).
    // The target is far below what a wake-up next to a busy hog takes (p99
    // 18 us was seen, the verdict needs half the target): with 20 us, one run
    // in seven breached at the first tick only and the ladder never climbed.
    Child online(c.procs(), 0, 19, [] { sleep_loop(1000000); });
    std::string cfg = "/tmp/" + k + ".yaml";
    std::ofstream(cfg) << "tick: 200ms\noffline:\n  yarn_hierarchy: " << k
                       << "-yarn\nonline:\n  wait_p99_target: 5us\nfast_path:\n  wait_threshold: 20us\n";
    std::string log = "/tmp/" + k + ".log";
    std::string cmd = std::string(KHAGENT_BINARY) + " --no-pin run --dry-run --config " + cfg + " --state-file /tmp/" +
                      k + "-state.json > " + log + " 2>&1";
    pid_t agent = fork();
    if (agent == 0) {
      execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), nullptr);
      _exit(127);
    }
    // Until the ladder has climbed (a second of lasting breach after the
    // first ticks), at most 20 s: under emulation the start alone takes
    // seconds.
    for (int i = 0; i < 200 && read_file(log).find("ladder escalate") == std::string::npos; i++) sleep_s(0.1);
    ::kill(agent, SIGINT);
    int st = 0;
    waitpid(agent, &st, 0);
    std::string out = read_file(log);
    ::unlink(cfg.c_str());
    ::unlink(log.c_str());
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
    EXPECT_NE(out.find("targets [" + yarn + " (yarn-root)]"), std::string::npos) << out;
    EXPECT_NE(out.find("behind offline"), std::string::npos) << out;
    // The base lever: cpu.idle on the YARN root (v2, or v1 on a hybrid host).
    bool idle = out.find("dry run: would write " + yarn + " cpu.idle: '0' -> '1'") != std::string::npos ||
                out.find("dry run: would write " + yarn + " v1:cpu.idle: '0' -> '1'") != std::string::npos;
    EXPECT_TRUE(idle) << out;
    // A dry run never takes effect, so the breach lasts and the ladder climbs.
    EXPECT_NE(out.find("ladder escalate"), std::string::npos) << out;
    EXPECT_EQ(out.find("rejected"), std::string::npos) << out;
    EXPECT_EQ(out.find("] written"), std::string::npos);
    EXPECT_NE(::access(("/tmp/" + k + "-state.json").c_str(), F_OK), 0) << "dry run wrote a state file";
  }
}

namespace {

// Each CPU's stall_stats as the detector left it.
std::vector<kh_stall_stats> stall_stats(const RunqBpf& b) {
  std::vector<kh_stall_stats> v(static_cast<size_t>(libbpf_num_possible_cpus()));
  uint32_t zero = 0;
  const int fd = b.map_fds().stall_stats;
  if (fd < 0 || bpf_map_lookup_elem(fd, &zero, v.data()) != 0) v.clear();
  return v;
}

// Whether the running kernel is at least major.minor.
bool kernel_at_least(int major, int minor) {
  struct utsname u{};
  int ma = 0, mi = 0;
  if (uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

}  // namespace

// The stall detector (bpf/runq_stall.bpf.h) against an independent timer on
// the same CPU: a SCHED_FIFO thread that sleeps to absolute deadlines one
// detector period apart and sums how late it wakes past the detector's
// 250 us. Both see the same thing (time the CPU ran nothing), sampled the
// same way, while a busy loop keeps the CPU busy (the detector's timer runs
// only on busy CPUs). On a quiet host both are near 0; the timer must have
// run all along. Kernels before 6.7 refuse a pinned BPF timer: the detector
// must then be off (the loader's probe), with no stall_stats handed out.
TEST_F(RunqHost, StallDetectorAgreesWithATimersLateness) {
  if (!kernel_at_least(6, 7)) {
    EXPECT_FALSE(bpf_->stall_detector()) << "a BPF timer pinned to a CPU before 6.7?";
    EXPECT_LT(bpf_->map_fds().stall_stats, 0) << "stall_stats handed out without a detector";
    std::printf("kernel before 6.7: no pinned BPF timers, the stall detector is off as it should be\n");
    return;
  }
  ASSERT_TRUE(bpf_->stall_detector()) << "the stall detector was not set up (see the load log)";
  auto before = stall_stats(*bpf_);
  ASSERT_FALSE(before.empty()) << "no stall_stats map: the stall detector was not set up (see the load log)";
  const uint64_t kPeriod = LoaderOptions{}.stall_period_ns, kMin = LoaderOptions{}.stall_min_ns;
  constexpr uint64_t kRunNs = 3'000'000'000ULL;
  std::atomic<bool> stop{false};
  // Two loops, one always waiting, as where a stall holds a wait up.
  auto loop = [&] {
    pin_to(kCpu);
    while (!stop.load(std::memory_order_relaxed)) {
    }
  };
  std::thread busy(loop), busy2(loop);
  uint64_t late_ns = 0, wakeups = 0;
  std::thread timer([&] {
    pin_to(kCpu);
    sched_param sp{};
    sp.sched_priority = 50;
    sched_setscheduler(0, SCHED_FIFO, &sp);
    const uint64_t end = mono_ns_now() + kRunNs;
    while (mono_ns_now() < end) {
      const uint64_t due = mono_ns_now() + kPeriod;
      timespec ts{static_cast<time_t>(due / 1'000'000'000ULL), static_cast<long>(due % 1'000'000'000ULL)};
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
      const uint64_t l = mono_ns_now() - due;
      if (l > kMin) late_ns += l;
      wakeups++;
    }
  });
  timer.join();
  auto after = stall_stats(*bpf_);
  stop = true;
  busy.join();
  busy2.join();
  ASSERT_EQ(after.size(), before.size());
  const auto& b0 = before[kCpu];
  const auto& b1 = after[kCpu];
  const double det = static_cast<double>(b1.stolen_ns - b0.stolen_ns) / 1e6;
  const double ref = static_cast<double>(late_ns) / 1e6;
  const uint64_t ticks = b1.ticks - b0.ticks;
  std::printf(
      "CPU %d busy for %.1f s: detector %.2f ms in %llu stalls (longest so far %.2f ms), %llu timer runs; a "
      "SCHED_FIFO timer %.2f ms late past 250 us in %llu wakeups\n",
      kCpu, static_cast<double>(kRunNs) / 1e9, det, static_cast<unsigned long long>(b1.stalls - b0.stalls),
      static_cast<double>(b1.longest_ns) / 1e6, static_cast<unsigned long long>(ticks), ref,
      static_cast<unsigned long long>(wakeups));
  EXPECT_EQ(b1.state, static_cast<uint32_t>(KH_STALL_ARMED)) << "err " << b1.err;
  // It fired all along: at least half of the periods of the busy spell (a
  // late expiry and each callback's own latency make fewer than all).
  EXPECT_GE(static_cast<double>(ticks), 0.5 * static_cast<double>(kRunNs / kPeriod));
  // Agreement: the two sample the same CPU at the same rate, at different
  // phases, so a stall is seen by both with up to a period of difference.
  // A timing claim: judged on a real kernel's clock, printed in the
  // emulated guest.
  if (!in_vmtest_guest()) {
    EXPECT_NEAR(det, ref, 0.35 * std::max(det, ref) + 2.0) << "detector and timer disagree on this CPU's stalls";
  }
}

// The split of a wait around a stall, with stalls the test makes itself: a
// test program (tests/host/stall_inject.bpf.c) writes stretches of the near
// future into CPU 0's stall ring, as the stall detector would after a real
// stall, while two busy loops in cgroups A and B share CPU 0: at any moment
// one of them runs and the other waits. Every injected stretch is then
// waited through by exactly one of them: the stolen parts of A's and B's
// waits must add up to what was injected, be taken out of what the other
// one is blamed for (their causes still adding up to their waits, the
// pairs no larger than the other-cgroup part), not be left unattributed.
// The real detector is off in this load, so only the injected stalls count.
TEST_F(RunqHost, AStallInAWaitIsStolenNotBlamedOnWhoRan) {
  LoaderOptions o;
  o.pin_dir = "/sys/fs/bpf/" + unique("khagent-test-stall");
  o.cpu_controller_on_v1 = !m_.cpu_v1.empty();
  o.stall_period_ns = 0;
  auto own = RunqBpf::open_and_load(o);
  ASSERT_TRUE(own.ok()) << own.error().str();
  BpfMapSource src((*own)->map_fds(true));
  const int cs_fd = bpf_obj_get((o.pin_dir + "/cpu_state").c_str());
  ASSERT_GE(cs_fd, 0) << "cpu_state not pinned under " << o.pin_dir;
  stall_inject_bpf* inj = stall_inject_bpf__open();
  ASSERT_NE(inj, nullptr);
  ASSERT_EQ(bpf_map__reuse_fd(inj->maps.cpu_state, cs_fd), 0);
  for (bpf_map* m :
       {inj->maps.cgroup_stats, inj->maps.cgroup_slots, inj->maps.cgroup_free, inj->maps.interference,
        inj->maps.pair_slots, inj->maps.pair_free, inj->maps.protected_cgroups, inj->maps.throttle_stats,
        inj->maps.throttle_start, inj->maps.throttle_clock, inj->maps.reclaim_stats, inj->maps.removed_cgroups})
    bpf_map__set_max_entries(m, 1);
  ASSERT_EQ(stall_inject_bpf__load(inj), 0) << "loading the stall injector";
  auto inject = [&](uint64_t start, uint64_t end) {
    struct {
      uint64_t start, end;
    } args{start, end};
    LIBBPF_OPTS(bpf_test_run_opts, run, .ctx_in = &args, .ctx_size_in = sizeof(args));
    return bpf_prog_test_run_opts(bpf_program__fd(inj->progs.inject_stall), &run) == 0 &&
           run.retval == static_cast<__u32>(kCpu);
  };

  auto& a = cgroup("a");
  auto& b = cgroup("b");
  ASSERT_GT(spawn(a, 0, [] { busy_loop(); }), 0);
  ASSERT_GT(spawn(b, 0, [] { busy_loop(); }), 0);
  sleep_s(0.3);
  auto read_own = [&] {
    auto r = src.read();
    EXPECT_TRUE(r.ok()) << r.error().str();
    return r.ok() ? r.value() : RawMaps{};
  };
  RawMaps r0 = read_own();
  // From CPU 0: stretches of 3 ms starting 2 ms ahead, every 10 ms, for 2 s.
  cpu_set_t old_set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(old_set), &old_set), 0);
  pin_to(kCpu);
  uint64_t injected = 0;
  int stalls = 0;
  const uint64_t stop = mono_ns_now() + 2'000'000'000ULL;
  while (mono_ns_now() < stop) {
    const uint64_t t = mono_ns_now();
    if (inject(t + 2'000'000, t + 5'000'000)) {
      injected += 3'000'000;
      stalls++;
    }
    sleep_s(0.01);
  }
  sched_setaffinity(0, sizeof(old_set), &old_set);
  sleep_s(0.05);  // the last stretch is over; waits through it end, batches are added
  RawMaps r1 = read_own();
  stall_inject_bpf__destroy(inj);
  ::close(cs_fd);
  ASSERT_GT(stalls, 100) << "the injector did not run on CPU " << kCpu;

  CgroupCounters da = counters_delta(of(r1, a.id()), of(r0, a.id()));
  CgroupCounters db = counters_delta(of(r1, b.id()), of(r0, b.id()));
  auto ms = [](uint64_t ns) { return static_cast<double>(ns) / 1e6; };
  const double stolen = static_cast<double>(da.cause_ns[KH_WAIT_STOLEN] + db.cause_ns[KH_WAIT_STOLEN]);
  for (const auto* d : {&da, &db})
    std::printf("%s: wait %.1f ms = other %.1f + same %.1f + stolen %.1f + throttled %.1f + unattributed %.1f ms\n",
                d == &da ? "A" : "B", ms(d->wait_ns), ms(d->cause_ns[KH_WAIT_OTHER_CGROUP]),
                ms(d->cause_ns[KH_WAIT_SAME_CGROUP]), ms(d->cause_ns[KH_WAIT_STOLEN]),
                ms(d->cause_ns[KH_WAIT_THROTTLED]), ms(d->cause_ns[KH_WAIT_UNATTRIBUTED]));
  std::printf("injected %d stalls, %.1f ms; stolen in A's and B's waits %.1f ms (%.3f of it)\n", stalls, ms(injected),
              stolen / 1e6, stolen / static_cast<double>(injected));
  // Each stretch waited through by one of the two; a kworker or the test
  // itself on CPU 0 at that moment makes both wait (a little over).
  EXPECT_GE(stolen, 0.9 * static_cast<double>(injected)) << "stalls in waits not charged as stolen";
  // Twice the injected would be both charged at once, which a kworker or
  // the test running on CPU 0 during a stretch does only for that moment.
  EXPECT_LE(stolen, 1.5 * static_cast<double>(injected)) << "more stolen than was injected";
  for (const auto* d : {&da, &db}) {
    const char* who = d == &da ? "A" : "B";
    const double wait = static_cast<double>(d->wait_ns);
    double sum = 0;
    for (auto c : d->cause_ns) sum += static_cast<double>(c);
    ASSERT_GT(wait, 2e8) << who << " barely waited";
    EXPECT_NEAR(sum / wait, 1.0, 0.01) << who << ": causes do not add up to the wait";
    EXPECT_LE(static_cast<double>(d->cause_ns[KH_WAIT_UNATTRIBUTED]), 0.05 * wait)
        << who << ": stalls left unattributed (taken out of no slice?)";
    // Its other-cgroup part is net of the stalls, and so is its pair.
    const uint64_t other_id = d == &da ? b.id() : a.id();
    const uint64_t victim = d == &da ? a.id() : b.id();
    const double pair = static_cast<double>(pair_ns(r1, victim, other_id) - pair_ns(r0, victim, other_id));
    EXPECT_LE(pair, 1.01 * static_cast<double>(d->cause_ns[KH_WAIT_OTHER_CGROUP]))
        << who << ": its pair with the other loop still holds the stolen time";
    EXPECT_GE(pair, 0.8 * static_cast<double>(d->cause_ns[KH_WAIT_OTHER_CGROUP]));
  }
}
