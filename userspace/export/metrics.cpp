#include "khagent/export/metrics.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>
#include <httplib.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "khagent/actuate/actuator.h"
#include "khagent/collect/sample.h"
#include "khagent/export/observe.h"
#include "khagent/loader/runq_loader.h"
#include "khagent/model/bpf_counters.h"
#include "khagent/model/yarn_status.h"
#include "khagent/policy/controller.h"
#include "khagent/policy/memory.h"
#include "khagent/signals/workload.h"
#include "khagent/util/clock.h"

namespace khagent {

namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

constexpr const char* kOther = "other";  // label value of aggregated pods / aggressors
constexpr size_t kClasses = 3;           // CgroupClass values, index = enum value

// khagent_runq_wait_seconds bounds in ns (integers, so kernel bucket edges
// compare exactly). No 1 us bound: the kernel's first bucket already reaches
// 1.024 us, so it would always be empty.
constexpr std::array<uint64_t, 19> kWaitBoundsNs = {2'000,       5'000,       10'000,        20'000,        50'000,
                                                    100'000,     200'000,     500'000,       1'000'000,     2'000'000,
                                                    5'000'000,   10'000'000,  20'000'000,    50'000'000,    100'000'000,
                                                    200'000'000, 500'000'000, 1'000'000'000, 10'000'000'000};

const std::vector<double> kReactionBounds = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0};

static_assert(KH_NR_WAIT_CAUSES == 5, "new wait cause: name it in kCauseNames");
constexpr std::array<const char*, KH_NR_RECLAIM_KINDS> kReclaimKindNames = {"node", "memcg"};
constexpr std::array<const char*, KH_NR_WAIT_CAUSES> kCauseNames = {"throttled", "same_cgroup", "other_cgroup",
                                                                    "unattributed", "stolen"};

constexpr std::array<BudgetAction, 6> kBudgetActions = {BudgetAction::Hold,     BudgetAction::Init,
                                                        BudgetAction::Decrease, BudgetAction::Increase,
                                                        BudgetAction::Ceiling,  BudgetAction::Floor};

double secs(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

const char* cls_name(size_t c) { return class_name(static_cast<CgroupClass>(c)); }

// For each kernel bucket, the index of the fixed bound it is counted under
// (kWaitBoundsNs.size() stands for +Inf).
const std::array<size_t, KH_HIST_BUCKETS>& kernel_to_fixed() {
  static const auto table = [] {
    std::array<size_t, KH_HIST_BUCKETS> t{};
    for (uint32_t b = 0; b < KH_HIST_BUCKETS; b++) {
      uint64_t high = hist_bucket_high(b);
      t[b] = static_cast<size_t>(std::lower_bound(kWaitBoundsNs.begin(), kWaitBoundsNs.end(), high) -
                                 kWaitBoundsNs.begin());
    }
    return t;
  }();
  return table;
}

void observe_waits(Histogram& h, const WaitHistogram& kernel, uint64_t wait_ns) {
  auto buckets = runq_wait_buckets(kernel);
  h.ObserveMultiple(std::vector<double>(buckets.begin(), buckets.end()), secs(wait_ns));
}

// A Prometheus counter fed from a kernel counter that only grows, or starts
// over from zero when its program is reloaded: it advances by the difference.
struct CumulativeCounter {
  Counter* counter = nullptr;
  uint64_t last = 0;
  void advance(uint64_t now, double scale) {
    uint64_t d = now >= last ? now - last : now;
    last = now;
    if (d) counter->Increment(static_cast<double>(d) * scale);
  }
};

// Which keys get a series of their own, given each present key's weight this
// interval and the keys that have one already. Series are sticky: a key keeps
// its series while it is present, so one near the cut does not flap between
// its own series and "other". The `cap` heaviest keys (weight > 0) always get
// one; when all `cap` slots are taken, a newcomer evicts the lightest holder
// outside that top. Never more than `cap` keys.
std::set<std::string> pick_series(std::vector<std::pair<std::string, uint64_t>> items,
                                  const std::set<std::string>& have, size_t cap) {
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::map<std::string, uint64_t> kept;  // holders still present -> weight
  for (const auto& [k, w] : items)
    if (have.count(k)) kept.emplace(k, w);
  std::set<std::string> top;
  for (size_t i = 0; i < items.size() && i < cap && items[i].second > 0; i++) top.insert(items[i].first);
  for (size_t i = 0; i < items.size() && i < cap && items[i].second > 0; i++) {
    const auto& [k, w] = items[i];
    if (kept.count(k)) continue;
    while (kept.size() >= cap) {
      auto victim = kept.end();
      for (auto it = kept.begin(); it != kept.end(); ++it)
        if (!top.count(it->first) && (victim == kept.end() || it->second < victim->second)) victim = it;
      if (victim == kept.end()) break;
      kept.erase(victim);
    }
    if (kept.size() < cap) kept.emplace(k, w);
  }
  std::set<std::string> out;
  for (const auto& [k, _] : kept) out.insert(k);
  return out;
}

std::string endpoint(const std::string& address, int port) {
  if (address.find(':') != std::string::npos) return fmt::format("[{}]:{}", address, port);
  return fmt::format("{}:{}", address, port);
}

}  // namespace

const std::vector<double>& runq_wait_bounds() {
  static const std::vector<double> bounds = [] {
    std::vector<double> b;
    b.reserve(kWaitBoundsNs.size());
    for (auto ns : kWaitBoundsNs) b.push_back(secs(ns));
    return b;
  }();
  return bounds;
}

std::vector<uint64_t> runq_wait_buckets(const WaitHistogram& h) {
  std::vector<uint64_t> out(kWaitBoundsNs.size() + 1, 0);
  const auto& map = kernel_to_fixed();
  for (uint32_t b = 0; b < KH_HIST_BUCKETS; b++) out[map[b]] += h[b];
  return out;
}

struct Metrics::Impl {
  explicit Impl(MetricsOptions o) : opt(std::move(o)) {}

  MetricsOptions opt;

  // Guards the registry and the series bookkeeping below, so that a scrape
  // sees one tick entirely or not at all.
  std::mutex mu;
  prometheus::Registry registry;

  Family<Histogram>* class_wait = nullptr;
  Family<Histogram>* pod_wait = nullptr;
  Family<Counter>* aggressor = nullptr;
  Family<Counter>* actions = nullptr;
  Family<Gauge>* lever_active = nullptr;
  Family<Counter>* ladder_steps = nullptr;
  Family<Gauge>* lever_effect = nullptr;
  Family<Gauge>* source_info = nullptr;
  Family<Counter>* prog_time = nullptr;
  Family<Counter>* prog_runs = nullptr;

  std::array<Histogram*, kClasses> class_wait_h{};
  std::array<std::array<Counter*, KH_NR_WAIT_CAUSES>, kClasses> cause{};
  std::array<std::array<Counter*, kClasses>, kClasses> interference{};  // [victim][aggressor]
  std::array<Counter*, kClasses> throttled{};
  // Direct memory reclaim by class and enum kh_reclaim_kind: seconds, reclaims.
  std::array<std::array<Counter*, KH_NR_RECLAIM_KINDS>, kClasses> reclaim_s{}, reclaims{};
  std::array<Counter*, kClasses> cpu{};
  Gauge* budget = nullptr;
  Gauge* ceiling = nullptr;
  Gauge* floor_cores = nullptr;
  // The memory lever: budget, ceiling, node capacity, node and offline working sets.
  std::array<Gauge*, 7> memory{};
  std::array<Counter*, 2> online_memory_stall{};  // some, full
  Counter* psi_triggers = nullptr;
  Gauge* burst_pods = nullptr;
  Gauge* burst_cgroups = nullptr;
  std::array<Counter*, 4> memory_events{};  // kills online, offline; refaults online, offline
  std::map<BudgetAction, Counter*> decisions;
  Histogram* reaction = nullptr;
  std::array<CumulativeCounter, KH_NR_COUNTERS> bpf_events{};
  CumulativeCounter stall_seconds, stall_count;
  Gauge* stall_cpus_failed = nullptr;
  std::map<std::string, std::pair<CumulativeCounter, CumulativeCounter>> progs;  // time, runs
  Gauge* source = nullptr;
  std::string source_value;

  struct PodSeries {
    CgroupClass cls = CgroupClass::Online;
    Histogram* hist = nullptr;
  };
  std::map<std::string, PodSeries> pods;         // by uid
  std::array<Histogram*, kClasses> pod_other{};  // pod_uid="other", per class
  std::map<std::string, Counter*> aggressors;    // by YARN container
  Counter* aggressor_other = nullptr;

  // YARN downscaler series, registered on the first update_yarn().
  struct Yarn {
    std::map<std::string, Gauge*> vcores, memory;  // by kind: configured, advertised, target
    Gauge* active = nullptr;
    Gauge* victims = nullptr;
    Gauge* up = nullptr;
    std::map<std::string, CumulativeCounter> updates, kills;      // by outcome
    std::map<std::string, CumulativeCounter> requests, failures;  // by peer
    CumulativeCounter failovers;
  };
  std::unique_ptr<Yarn> yarn;
  void build_yarn();

  // Health, read by the HTTP thread without `mu`.
  std::atomic<bool> bpf_attached{false};
  std::atomic<bool> ready{false};
  std::atomic<uint64_t> last_update_ns{0};  // steady clock; 0 = never

  // Server lifecycle, guarded by `life_mu`.
  std::mutex life_mu;
  std::unique_ptr<httplib::Server> server;
  std::thread thread;
  std::atomic<bool> listen_done{false};
  std::atomic<int> bound_port{0};

  void build();
  void update_pods(const std::vector<PodSignals>& pods);
  void update_aggressors(const std::vector<YarnContainerSignals>& yarn);
  void update_throttled(const NodeSignals& node);
  std::pair<bool, std::string> health() const;
  std::string render();
};

void Metrics::Impl::build() {
  auto& r = registry;
  class_wait = &prometheus::BuildHistogram()
                    .Name("khagent_runq_wait_seconds")
                    .Help("Run-queue wait of the tasks of each cgroup class (time runnable before running)")
                    .Register(r);
  pod_wait = &prometheus::BuildHistogram()
                  .Name("khagent_pod_runq_wait_seconds")
                  .Help(
                      "Run-queue wait of the tasks of a pod; the pods with most wait get a series, "
                      "the rest are summed under pod_uid=\"other\"")
                  .Register(r);
  auto& cause_f = prometheus::BuildCounter()
                      .Name("khagent_runq_wait_by_cause_seconds_total")
                      .Help(
                          "Run-queue wait by cause: throttled by its own quota, behind the same "
                          "cgroup, behind another cgroup, or not attributed")
                      .Register(r);
  auto& interf_f = prometheus::BuildCounter()
                       .Name("khagent_interference_seconds_total")
                       .Help("Run-queue wait of victim_class tasks while aggressor_class tasks held the CPU")
                       .Register(r);
  aggressor = &prometheus::BuildCounter()
                   .Name("khagent_aggressor_interference_seconds_total")
                   .Help(
                       "Run-queue wait of online tasks while a YARN container held the CPU; the "
                       "top containers get a series, the rest are summed under aggressor=\"other\"")
                   .Register(r);
  auto& thr_f = prometheus::BuildCounter()
                    .Name("khagent_throttled_seconds_total")
                    .Help("Time the cgroups of a class spent CFS-throttled, as the throttle source reports it")
                    .Register(r);
  auto& reclaim_f = prometheus::BuildCounter()
                        .Name("khagent_memory_reclaim_seconds_total")
                        .Help(
                            "Time the tasks of a class spent reclaiming memory themselves (direct reclaim, "
                            "from the vmscan tracepoints): kind=\"node\" when the node ran short, "
                            "kind=\"memcg\" at a memory cgroup's limit (their own or an ancestor's)")
                        .Register(r);
  auto& reclaims_f = prometheus::BuildCounter()
                         .Name("khagent_memory_reclaims_total")
                         .Help("Direct memory reclaims by the tasks of a class, by kind (node, memcg)")
                         .Register(r);
  auto& cpu_f = prometheus::BuildCounter()
                    .Name("khagent_cpu_usage_seconds_total")
                    .Help("CPU time used by the tasks of a class")
                    .Register(r);
  for (size_t c = 0; c < kClasses; c++) {
    class_wait_h[c] = &class_wait->Add({{"class", cls_name(c)}}, runq_wait_bounds());
    for (size_t k = 0; k < KH_NR_WAIT_CAUSES; k++)
      cause[c][k] = &cause_f.Add({{"class", cls_name(c)}, {"cause", kCauseNames[k]}});
    for (size_t a = 0; a < kClasses; a++)
      interference[c][a] = &interf_f.Add({{"victim_class", cls_name(c)}, {"aggressor_class", cls_name(a)}});
    throttled[c] = &thr_f.Add({{"class", cls_name(c)}});
    for (size_t k = 0; k < KH_NR_RECLAIM_KINDS; k++) {
      reclaim_s[c][k] = &reclaim_f.Add({{"class", cls_name(c)}, {"kind", kReclaimKindNames[k]}});
      reclaims[c][k] = &reclaims_f.Add({{"class", cls_name(c)}, {"kind", kReclaimKindNames[k]}});
    }
    cpu[c] = &cpu_f.Add({{"class", cls_name(c)}});
  }

  budget = &prometheus::BuildGauge()
                .Name("khagent_offline_cpu_budget_cores")
                .Help("CPU the offline class may use, as decided by the controller")
                .Register(r)
                .Add({});
  ceiling = &prometheus::BuildGauge()
                 .Name("khagent_offline_cpu_ceiling_cores")
                 .Help("Largest offline budget: node CPUs minus online usage minus the reserve")
                 .Register(r)
                 .Add({});
  floor_cores = &prometheus::BuildGauge()
                     .Name("khagent_offline_cpu_floor_cores")
                     .Help("Smallest offline budget")
                     .Register(r)
                     .Add({});
  auto& dec_f = prometheus::BuildCounter()
                    .Name("khagent_budget_decisions_total")
                    .Help("Controller steps by the action taken on the offline budget")
                    .Register(r);
  for (auto a : kBudgetActions) decisions[a] = &dec_f.Add({{"action", action_name(a)}});
  actions = &prometheus::BuildCounter()
                 .Name("khagent_actions_total")
                 .Help("Values the actuator handled, by cgroup file and outcome")
                 .Register(r);
  lever_active = &prometheus::BuildGauge()
                      .Name("khagent_lever_active")
                      .Help(
                          "1 while a lever restrains the offline side (idle is the base lever; cpuset and "
                          "quota are ladder rungs)")
                      .Register(r);
  ladder_steps = &prometheus::BuildCounter()
                      .Name("khagent_ladder_steps_total")
                      .Help("Ladder steps by lever and action (escalate, kept, undone, relaxed)")
                      .Register(r);
  lever_effect = &prometheus::BuildGauge()
                      .Name("khagent_lever_effect_offline_wait_ratio")
                      .Help(
                          "Online run-queue wait behind offline work (seconds per second) over the window "
                          "before and after the last step of a lever")
                      .Register(r);
  reaction = &prometheus::BuildHistogram()
                  .Name("khagent_reaction_seconds")
                  .Help("Time from a fast-path breach to the new offline budget being applied")
                  .Register(r)
                  .Add({}, kReactionBounds);

  prog_time = &prometheus::BuildCounter()
                   .Name("khagent_bpf_prog_run_seconds_total")
                   .Help("Time the kernel spent in each BPF program (needs kernel.bpf_stats_enabled=1)")
                   .Register(r);
  prog_runs = &prometheus::BuildCounter()
                   .Name("khagent_bpf_prog_runs_total")
                   .Help("Runs of each BPF program (needs kernel.bpf_stats_enabled=1)")
                   .Register(r);
  auto& ev_f = prometheus::BuildCounter()
                   .Name("khagent_bpf_events_total")
                   .Help(
                       "Counters of the BPF side: events seen and failures (storage_miss, "
                       "ring_overflow, stats_full, pairs_full, events_dropped, removals_lost)")
                   .Register(r);
  for (size_t i = 0; i < KH_NR_COUNTERS; i++) bpf_events[i].counter = &ev_f.Add({{"counter", kBpfCounterNames[i]}});
  stall_seconds.counter = &prometheus::BuildCounter()
                               .Name("khagent_cpu_stall_seconds_total")
                               .Help(
                                   "Time the node's CPUs ran nothing at all (vCPU stalls seen by the stall "
                                   "detector; waits through them are cause=\"stolen\"), summed over CPUs")
                               .Register(r)
                               .Add({});
  stall_count.counter = &prometheus::BuildCounter()
                             .Name("khagent_cpu_stalls_total")
                             .Help("CPU stalls seen by the stall detector, all CPUs")
                             .Register(r)
                             .Add({});
  stall_cpus_failed = &prometheus::BuildGauge()
                           .Name("khagent_cpu_stall_detector_failed_cpus")
                           .Help("CPUs whose stall detector timer the kernel refused (needs Linux 6.7+)")
                           .Register(r)
                           .Add({});

  source_info = &prometheus::BuildGauge()
                     .Name("khagent_throttle_source_info")
                     .Help("Where throttling numbers come from: fentry (BPF) or cpu.stat")
                     .Register(r);
  prometheus::BuildGauge()
      .Name("khagent_build_info")
      .Help("khagent version")
      .Register(r)
      .Add({{"version", opt.version}})
      .Set(1);
}

void Metrics::Impl::build_yarn() {
  auto& r = registry;
  yarn = std::make_unique<Yarn>();
  auto& vc = prometheus::BuildGauge()
                 .Name("khagent_yarn_node_vcores")
                 .Help(
                     "vcores of this NodeManager: configured (its own), advertised (what the RM "
                     "has) and target (what the offline budget asks for)")
                 .Register(r);
  auto& mem = prometheus::BuildGauge()
                  .Name("khagent_yarn_node_memory_bytes")
                  .Help("Memory of this NodeManager: configured, advertised and target")
                  .Register(r);
  for (const char* k : {"configured", "advertised", "target"}) {
    yarn->vcores[k] = &vc.Add({{"kind", k}});
    yarn->memory[k] = &mem.Add({{"kind", k}});
  }
  auto& cont = prometheus::BuildGauge()
                   .Name("khagent_yarn_containers")
                   .Help("YARN containers on this node: active, and victims (over capacity, in their grace)")
                   .Register(r);
  yarn->active = &cont.Add({{"state", "active"}});
  yarn->victims = &cont.Add({{"state", "victim"}});
  yarn->up = &prometheus::BuildGauge()
                  .Name("khagent_yarn_up")
                  .Help("1 when the last round with the ResourceManager and NodeManager went through")
                  .Register(r)
                  .Add({});
  auto& upd = prometheus::BuildCounter()
                  .Name("khagent_yarn_resource_updates_total")
                  .Help("Node resource updates posted to the ResourceManager, by outcome")
                  .Register(r);
  auto& kill = prometheus::BuildCounter()
                   .Name("khagent_yarn_container_kills_total")
                   .Help("YARN containers killed locally after their grace, by outcome")
                   .Register(r);
  for (const char* o : {"ok", "failed", "dry_run"}) {
    yarn->updates[o].counter = &upd.Add({{"outcome", o}});
    yarn->kills[o].counter = &kill.Add({{"outcome", o}});
  }
  auto& req = prometheus::BuildCounter()
                  .Name("khagent_yarn_requests_total")
                  .Help("HTTP requests sent to the ResourceManager (rm) and NodeManager (nm), retries included")
                  .Register(r);
  auto& fail = prometheus::BuildCounter()
                   .Name("khagent_yarn_request_failures_total")
                   .Help("Requests that ended without a usable answer after retries and failover")
                   .Register(r);
  for (const char* p : {"rm", "nm"}) {
    yarn->requests[p].counter = &req.Add({{"peer", p}});
    yarn->failures[p].counter = &fail.Add({{"peer", p}});
  }
  yarn->failovers.counter = &prometheus::BuildCounter()
                                 .Name("khagent_yarn_rm_failovers_total")
                                 .Help("Moves to another ResourceManager address (HA standby, errors)")
                                 .Register(r)
                                 .Add({});
}

void Metrics::Impl::update_pods(const std::vector<PodSignals>& list) {
  std::vector<std::pair<std::string, uint64_t>> items;
  items.reserve(list.size());
  for (const auto& p : list) items.emplace_back(p.uid, p.interval.wait_ns);
  std::set<std::string> have;
  for (const auto& [uid, _] : pods) have.insert(uid);
  auto own = pick_series(std::move(items), have, opt.max_pod_series);

  // Pods that are gone, or lost their slot, lose their series.
  for (auto it = pods.begin(); it != pods.end();) {
    if (own.count(it->first)) {
      ++it;
      continue;
    }
    pod_wait->Remove(it->second.hist);
    it = pods.erase(it);
  }

  std::array<WaitHistogram, kClasses> other{};
  std::array<uint64_t, kClasses> other_ns{};
  for (const auto& p : list) {
    auto c = static_cast<size_t>(p.cls);
    if (!own.count(p.uid)) {
      for (size_t b = 0; b < other[c].size(); b++) other[c][b] += p.interval.hist[b];
      other_ns[c] += p.interval.wait_ns;
      continue;
    }
    auto& s = pods[p.uid];
    if (s.hist && s.cls != p.cls) {  // reclassified: the class label changes
      pod_wait->Remove(s.hist);
      s.hist = nullptr;
    }
    if (!s.hist) {
      s.cls = p.cls;
      s.hist = &pod_wait->Add({{"pod_uid", p.uid}, {"class", class_name(p.cls)}}, runq_wait_bounds());
    }
    observe_waits(*s.hist, p.interval.hist, p.interval.wait_ns);
  }
  for (size_t c = 0; c < kClasses; c++) {
    if (!pod_other[c]) {
      if (hist_count(other[c]) == 0 && other_ns[c] == 0) continue;  // created on first use
      pod_other[c] = &pod_wait->Add({{"pod_uid", kOther}, {"class", cls_name(c)}}, runq_wait_bounds());
    }
    observe_waits(*pod_other[c], other[c], other_ns[c]);
  }
}

void Metrics::Impl::update_aggressors(const std::vector<YarnContainerSignals>& yarn) {
  std::vector<std::pair<std::string, uint64_t>> items;
  items.reserve(yarn.size());
  for (const auto& y : yarn) items.emplace_back(y.container, y.online_wait_caused_ns);
  std::set<std::string> have;
  for (const auto& [k, _] : aggressors) have.insert(k);
  auto own = pick_series(std::move(items), have, opt.top_aggressors);

  for (auto it = aggressors.begin(); it != aggressors.end();) {
    if (own.count(it->first)) {
      ++it;
      continue;
    }
    aggressor->Remove(it->second);
    it = aggressors.erase(it);
  }
  uint64_t other_ns = 0;
  for (const auto& y : yarn) {
    if (!own.count(y.container)) {
      other_ns += y.online_wait_caused_ns;
      continue;
    }
    auto& c = aggressors[y.container];
    if (!c) c = &aggressor->Add({{"aggressor", y.container}});
    c->Increment(secs(y.online_wait_caused_ns));
  }
  if (other_ns > 0 && !aggressor_other) aggressor_other = &aggressor->Add({{"aggressor", kOther}});
  if (aggressor_other) aggressor_other->Increment(secs(other_ns));
}

void Metrics::Impl::update_throttled(const NodeSignals& node) {
  for (size_t c = 0; c < kClasses; c++)
    if (node.throttled_ns[c]) throttled[c]->Increment(secs(node.throttled_ns[c]));
  for (size_t c = 0; c < kClasses; c++)
    for (size_t k = 0; k < KH_NR_RECLAIM_KINDS; k++) {
      if (node.reclaim[c].ns[k]) reclaim_s[c][k]->Increment(secs(node.reclaim[c].ns[k]));
      if (node.reclaim[c].count[k]) reclaims[c][k]->Increment(static_cast<double>(node.reclaim[c].count[k]));
    }
}

std::pair<bool, std::string> Metrics::Impl::health() const {
  if (!bpf_attached) return {false, "bpf programs not attached"};
  uint64_t last = last_update_ns;
  if (opt.stall_seconds > 0 && last != 0) {
    double age = secs(mono_ns() - last);
    if (age > opt.stall_seconds)
      return {false, fmt::format("no tick for {:.1f}s (limit {:.1f}s)", age, opt.stall_seconds)};
  }
  return {true, "ok"};
}

std::string Metrics::Impl::render() {
  std::lock_guard lk(mu);
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

Metrics::Metrics(MetricsOptions o) : impl_(std::make_unique<Impl>(std::move(o))) {
  impl_->bound_port = impl_->opt.port;
  impl_->build();
}

Metrics::~Metrics() { stop(); }

Result<void> Metrics::start() {
  auto& m = *impl_;
  std::lock_guard lk(m.life_mu);
  if (m.thread.joinable())
    return make_error(0, fmt::format("metrics server already running on {}", endpoint(m.opt.address, m.bound_port)));

  auto srv = std::make_unique<httplib::Server>();
  // Two workers are plenty for a scraper and probes (the default is >= 8).
  srv->new_task_queue = [] { return new httplib::ThreadPool(2); };
  // httplib sets SO_REUSEPORT by default, which lets a second agent bind the
  // same port and silently share it; SO_REUSEADDR alone still fails then.
  srv->set_socket_options([](socket_t s) {
    int yes = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // One request per connection (a scrape every few seconds gains nothing from
  // keep-alive) and short timeouts, so that stop() is not held up by idle
  // connections: at most ~1 s by one that connected and sent nothing.
  srv->set_keep_alive_max_count(1);
  srv->set_keep_alive_timeout(1);
  srv->set_read_timeout(2);
  srv->set_write_timeout(2);

  Impl* impl = &m;
  srv->Get("/metrics", [impl](const httplib::Request&, httplib::Response& res) {
    res.set_content(impl->render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  srv->Get("/healthz", [impl](const httplib::Request&, httplib::Response& res) {
    auto [ok, why] = impl->health();
    res.status = ok ? 200 : 503;
    res.set_content(why, "text/plain; charset=utf-8");
  });
  srv->Get("/readyz", [impl](const httplib::Request&, httplib::Response& res) {
    bool ok = impl->ready;
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "ok" : "first tick not done", "text/plain; charset=utf-8");
  });

  errno = 0;
  int port = m.opt.port;
  bool bound = false;
  if (port == 0) {
    port = srv->bind_to_any_port(m.opt.address);
    bound = port > 0;
  } else {
    bound = srv->bind_to_port(m.opt.address, port);
  }
  if (!bound)
    return make_error(errno, fmt::format("metrics: cannot listen on {}", endpoint(m.opt.address, m.opt.port)));

  m.bound_port = port;
  m.server = std::move(srv);
  m.listen_done = false;
  m.thread = std::thread([impl] {
    impl->server->listen_after_bind();
    impl->listen_done = true;
  });
  // httplib's stop() does nothing until the accept loop runs: wait for it.
  while (!m.server->is_running() && !m.listen_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (m.listen_done) {
    m.thread.join();
    m.server.reset();
    return make_error(0, fmt::format("metrics: server on {} stopped at once", endpoint(m.opt.address, port)));
  }
  return {};
}

int Metrics::port() const { return impl_->bound_port; }

void Metrics::stop() {
  auto& m = *impl_;
  std::lock_guard lk(m.life_mu);
  if (!m.thread.joinable()) return;
  m.server->stop();
  m.thread.join();
  m.server.reset();
}

void Metrics::set_bpf_attached(bool attached) { impl_->bpf_attached = attached; }

void Metrics::set_ready() { impl_->ready = true; }

void Metrics::set_throttle_source(const std::string& source) {
  auto& m = *impl_;
  std::lock_guard lk(m.mu);
  if (m.source && m.source_value == source) return;
  if (m.source) m.source_info->Remove(m.source);
  m.source = &m.source_info->Add({{"source", source}});
  m.source->Set(1);
  m.source_value = source;
}

void Metrics::update(const NodeSignals& node, const Sample& sample) {
  auto& m = *impl_;
  {
    std::lock_guard lk(m.mu);
    for (size_t c = 0; c < kClasses; c++) {
      const auto& cs = node.classes[c];
      observe_waits(*m.class_wait_h[c], cs.interval.hist, cs.interval.wait_ns);
      for (size_t k = 0; k < KH_NR_WAIT_CAUSES; k++) m.cause[c][k]->Increment(secs(cs.interval.cause_ns[k]));
      for (size_t a = 0; a < kClasses; a++) m.interference[c][a]->Increment(secs(cs.wait_by_aggressor_class_ns[a]));
      m.cpu[c]->Increment(secs(cs.interval.cpu_ns));
    }
    m.update_pods(node.pods);
    m.update_aggressors(node.yarn);
    m.update_throttled(node);
    for (size_t i = 0; i < KH_NR_COUNTERS; i++) m.bpf_events[i].advance(sample.bpf_counters[i], 1.0);
    if (sample.stall_total.available) {
      m.stall_seconds.advance(sample.stall_total.stolen_ns, 1e-9);
      m.stall_count.advance(sample.stall_total.stalls, 1.0);
      m.stall_cpus_failed->Set(static_cast<double>(sample.stall_total.cpus_failed));
    }
  }
  m.last_update_ns = mono_ns();
}

void Metrics::record_decision(const Decision& d) {
  auto& m = *impl_;
  std::lock_guard lk(m.mu);
  m.budget->Set(d.budget_cores);
  m.ceiling->Set(d.ceiling_cores);
  m.floor_cores->Set(d.floor_cores);
  if (auto it = m.decisions.find(d.action); it != m.decisions.end()) it->second->Increment();
}

void Metrics::record_memory(const MemoryInput& in, const MemoryDecision& d) {
  auto& m = *impl_;
  std::lock_guard lk(m.mu);
  if (!m.memory[0]) {
    const std::array<std::pair<const char*, const char*>, 7> kFamilies = {{
        {"khagent_offline_memory_budget_bytes",
         "Memory the offline parents may hold in all (their limits add up to it, "
         "or to more where memory.min_offline applies)"},
        {"khagent_offline_memory_ceiling_bytes",
         "Largest offline memory budget: capacity minus the kubelet's eviction threshold, the reserve and what "
         "the rest of the node uses"},
        {"khagent_node_memory_capacity_bytes", "The node's memory (or memory.node_cgroup's limit)"},
        {"khagent_node_memory_working_set_bytes", "The node's memory in use, inactive page cache excluded"},
        {"khagent_offline_memory_working_set_bytes",
         "The offline parents' memory in use, inactive page cache excluded"},
        {"khagent_node_memory_reserve_bytes", "Memory kept free for online growth (memory.reserve or its share)"},
        {"khagent_node_memory_eviction_threshold_bytes",
         "The kubelet's eviction threshold kept free too (memory.eviction_threshold)"},
    }};
    for (size_t i = 0; i < kFamilies.size(); i++)
      m.memory[i] =
          &prometheus::BuildGauge().Name(kFamilies[i].first).Help(kFamilies[i].second).Register(m.registry).Add({});
  }
  const std::array<uint64_t, 7> v = {d.budget,        d.ceiling, in.capacity, in.node_used,
                                     in.offline_used, d.reserve, d.eviction};
  for (size_t i = 0; i < v.size(); i++) m.memory[i]->Set(static_cast<double>(v[i]));
}

void Metrics::record_memory_stall(const MemoryStall& s) {
  auto& m = *impl_;
  std::lock_guard lk(m.mu);
  if (!m.online_memory_stall[0]) {
    auto& f = prometheus::BuildCounter()
                  .Name("khagent_online_memory_stall_seconds_total")
                  .Help(
                      "Time online pods stalled on memory (PSI of their memory.pressure, summed over the pods): "
                      "kind some (a task stalled) or full (all stalled)")
                  .Register(m.registry);
    m.online_memory_stall = {&f.Add({{"kind", "some"}}), &f.Add({{"kind", "full"}})};
  }
  m.online_memory_stall[0]->Increment(static_cast<double>(s.some_us) / 1e6);
  m.online_memory_stall[1]->Increment(static_cast<double>(s.full_us) / 1e6);
}

void Metrics::record_psi_triggers(size_t n) {
  auto& m = *impl_;
  std::lock_guard lk(m.mu);
  if (!m.psi_triggers)
    m.psi_triggers = &prometheus::BuildCounter()
                          .Name("khagent_online_memory_psi_triggers_total")
                          .Help(
                              "PSI triggers on online pods' memory.pressure that woke the agent between ticks "
                              "(memory.stall_limit of memory.stall_window stalled)")
                          .Register(m.registry)
                          .Add({});
  m.psi_triggers->Increment(static_cast<double>(n));
}

void Metrics::record_burst(size_t pods, size_t cgroups) {
  auto& m = *impl_;
  std::lock_guard lk(m.mu);
  if (!m.burst_pods) {
    auto& f = prometheus::BuildGauge()
                  .Name("khagent_online_burst")
                  .Help(
                      "Online pods given CPU burst because their waits were their own throttling (what=\"pods\"), "
                      "and their cgroups with a quota that carry it (what=\"cgroups\")")
                  .Register(m.registry);
    m.burst_pods = &f.Add({{"what", "pods"}});
    m.burst_cgroups = &f.Add({{"what", "cgroups"}});
  }
  m.burst_pods->Set(static_cast<double>(pods));
  m.burst_cgroups->Set(static_cast<double>(cgroups));
}

void Metrics::record_memory_events(const MemoryEvents& e) {
  auto& m = *impl_;
  std::lock_guard lk(m.mu);
  if (!m.memory_events[0]) {
    auto& kills = prometheus::BuildCounter()
                      .Name("khagent_memory_oom_kills_total")
                      .Help(
                          "Processes the kernel's OOM killer took in online pods or offline parents "
                          "(memory.events, v1 memory.oom_control)")
                      .Register(m.registry);
    auto& refaults = prometheus::BuildCounter()
                         .Name("khagent_memory_refaults_total")
                         .Help(
                             "Pages of online pods or offline parents read back soon after reclaim "
                             "(memory.stat workingset_refault_anon + _file): their working set did not fit")
                         .Register(m.registry);
    m.memory_events = {&kills.Add({{"class", "online"}}), &kills.Add({{"class", "offline"}}),
                       &refaults.Add({{"class", "online"}}), &refaults.Add({{"class", "offline"}})};
  }
  const std::array<uint64_t, 4> v = {e.online_oom_kills, e.offline_oom_kills, e.online_refaults, e.offline_refaults};
  for (size_t i = 0; i < v.size(); i++) m.memory_events[i]->Increment(static_cast<double>(v[i]));
}

void Metrics::record_actions(const std::vector<ActionRecord>& recs) {
  auto& m = *impl_;
  std::lock_guard lk(m.mu);
  // Bounded: 10 files x 8 outcomes. Add() returns the existing series.
  for (const auto& r : recs)
    m.actions->Add({{"file", cgroup_file_name(r.file)}, {"outcome", outcome_name(r.outcome)}}).Increment();
}

void Metrics::record_levers(const std::vector<std::pair<std::string, bool>>& active) {
  auto& m = *impl_;
  std::lock_guard lk(m.mu);
  for (const auto& [lever, on] : active) m.lever_active->Add({{"lever", lever}}).Set(on ? 1 : 0);
}

void Metrics::record_ladder_step(const std::string& lever, const std::string& action, double before_ratio,
                                 double after_ratio, bool verdict) {
  auto& m = *impl_;
  std::lock_guard lk(m.mu);
  m.ladder_steps->Add({{"lever", lever}, {"action", action}}).Increment();
  m.lever_effect->Add({{"lever", lever}, {"window", "before"}}).Set(before_ratio);
  if (verdict) m.lever_effect->Add({{"lever", lever}, {"window", "after"}}).Set(after_ratio);
}

void Metrics::record_reaction(double seconds) {
  auto& m = *impl_;
  std::lock_guard lk(m.mu);
  m.reaction->Observe(seconds);
}

void Metrics::update_bpf_cost(const std::vector<ProgStats>& progs) {
  auto& m = *impl_;
  std::lock_guard lk(m.mu);
  for (const auto& p : progs) {
    auto [it, added] = m.progs.try_emplace(p.name);
    auto& [run_time, runs] = it->second;
    if (added) {
      run_time.counter = &m.prog_time->Add({{"prog", p.name}});
      runs.counter = &m.prog_runs->Add({{"prog", p.name}});
    }
    run_time.advance(p.run_time_ns, 1e-9);
    runs.advance(p.run_cnt, 1.0);
  }
}

void Metrics::update_yarn(const YarnStatus& st) {
  auto& m = *impl_;
  std::lock_guard lk(m.mu);
  if (!m.yarn) m.build_yarn();
  auto& y = *m.yarn;
  auto set = [&](const char* kind, bool known, const YarnResource& r) {
    y.vcores[kind]->Set(known ? static_cast<double>(r.vcores) : 0);
    y.memory[kind]->Set(known ? static_cast<double>(r.memory_mb) * 1024 * 1024 : 0);
  };
  set("configured", st.configured_known, st.configured);
  set("advertised", st.advertised_known, st.advertised);
  set("target", st.configured_known, st.target);
  y.active->Set(static_cast<double>(st.containers));
  y.victims->Set(static_cast<double>(st.victims));
  y.up->Set(st.last_error.empty() && !st.node_id.empty() ? 1 : 0);
  y.updates["ok"].advance(st.updates_ok, 1);
  y.updates["failed"].advance(st.updates_failed, 1);
  y.updates["dry_run"].advance(st.updates_dry_run, 1);
  y.kills["ok"].advance(st.kills_ok, 1);
  y.kills["failed"].advance(st.kills_failed, 1);
  y.kills["dry_run"].advance(st.kills_dry_run, 1);
  y.requests["rm"].advance(st.rm_requests, 1);
  y.requests["nm"].advance(st.nm_requests, 1);
  y.failures["rm"].advance(st.rm_failures, 1);
  y.failures["nm"].advance(st.nm_failures, 1);
  y.failovers.advance(st.rm_failovers, 1);
}

std::string Metrics::render() { return impl_->render(); }

}  // namespace khagent
