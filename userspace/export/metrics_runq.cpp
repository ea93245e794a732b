// Per-tick metrics: run-queue waits by class, cause and pod, CPU, throttling,
// direct reclaim, interference between classes and by YARN container; and
// the BPF side's own counters and cost.
#include <algorithm>
#include <array>
#include <set>
#include <utility>

#include "khagent/collect/sample.h"
#include "khagent/loader/runq_loader.h"
#include "khagent/signals/workload.h"
#include "metrics_parts.h"

namespace khagent {

namespace {

using metrics::Counter;
using metrics::FamilySpec;
using metrics::Histogram;
using metrics::MetricType;
using metrics::secs;

enum RunqFamily : size_t {
  kWait,
  kPodWait,
  kWaitByCause,
  kInterference,
  kAggressor,
  kThrottled,
  kReclaimSeconds,
  kReclaims,
  kCpuUsage,
  kNrRunqFamilies
};
constexpr std::array<FamilySpec, kNrRunqFamilies> kRunqFamilies = {{
    {kWait,
     "khagent_runq_wait_seconds",
     MetricType::Histogram,
     {"class"},
     "Run-queue wait of the tasks of each cgroup class (time runnable before running)"},
    {kPodWait,
     "khagent_pod_runq_wait_seconds",
     MetricType::Histogram,
     {"pod_uid", "class"},
     "Run-queue wait of the tasks of a pod; the pods with most wait get a series, "
     "the rest are summed under pod_uid=\"other\""},
    {kWaitByCause,
     "khagent_runq_wait_by_cause_seconds_total",
     MetricType::Counter,
     {"class", "cause"},
     "Run-queue wait by cause: throttled by its own quota, behind the same "
     "cgroup, behind another cgroup, or not attributed"},
    {kInterference,
     "khagent_interference_seconds_total",
     MetricType::Counter,
     {"victim_class", "aggressor_class"},
     "Run-queue wait of victim_class tasks while aggressor_class tasks held the CPU"},
    {kAggressor,
     "khagent_aggressor_interference_seconds_total",
     MetricType::Counter,
     {"aggressor"},
     "Run-queue wait of online tasks while a YARN container held the CPU; the "
     "top containers get a series, the rest are summed under aggressor=\"other\""},
    {kThrottled,
     "khagent_throttled_seconds_total",
     MetricType::Counter,
     {"class"},
     "Time the cgroups of a class spent CFS-throttled, as the throttle source reports it"},
    {kReclaimSeconds,
     "khagent_memory_reclaim_seconds_total",
     MetricType::Counter,
     {"class", "kind"},
     "Time the tasks of a class spent reclaiming memory themselves (direct reclaim, "
     "from the vmscan tracepoints): kind=\"node\" when the node ran short, "
     "kind=\"memcg\" at a memory cgroup's limit (their own or an ancestor's)"},
    {kReclaims,
     "khagent_memory_reclaims_total",
     MetricType::Counter,
     {"class", "kind"},
     "Direct memory reclaims by the tasks of a class, by kind (node, memcg)"},
    {kCpuUsage,
     "khagent_cpu_usage_seconds_total",
     MetricType::Counter,
     {"class"},
     "CPU time used by the tasks of a class"},
}};
static_assert(metrics::rows_in_order(kRunqFamilies));

enum BpfFamily : size_t {
  kProgRunSeconds,
  kProgRuns,
  kBpfEvents,
  kStallSeconds,
  kStalls,
  kStallFailedCpus,
  kThrottleSource,
  kNrBpfFamilies
};
constexpr std::array<FamilySpec, kNrBpfFamilies> kBpfFamilies = {{
    {kProgRunSeconds,
     "khagent_bpf_prog_run_seconds_total",
     MetricType::Counter,
     {"prog"},
     "Time the kernel spent in each BPF program (needs kernel.bpf_stats_enabled=1)"},
    {kProgRuns,
     "khagent_bpf_prog_runs_total",
     MetricType::Counter,
     {"prog"},
     "Runs of each BPF program (needs kernel.bpf_stats_enabled=1)"},
    {kBpfEvents,
     "khagent_bpf_events_total",
     MetricType::Counter,
     {"counter"},
     "Counters of the BPF side: events seen and failures (storage_miss, "
     "ring_overflow, stats_full, pairs_full, events_dropped, removals_lost)"},
    {kStallSeconds,
     "khagent_cpu_stall_seconds_total",
     MetricType::Counter,
     {},
     "Time the node's CPUs ran nothing at all (vCPU stalls seen by the stall "
     "detector; waits through them are cause=\"stolen\"), summed over CPUs"},
    {kStalls, "khagent_cpu_stalls_total", MetricType::Counter, {}, "CPU stalls seen by the stall detector, all CPUs"},
    {kStallFailedCpus,
     "khagent_cpu_stall_detector_failed_cpus",
     MetricType::Gauge,
     {},
     "CPUs whose stall detector timer the kernel refused (needs Linux 6.7+)"},
    {kThrottleSource,
     "khagent_throttle_source_info",
     MetricType::Gauge,
     {"source"},
     "Where throttling numbers come from: fentry (BPF) or cpu.stat"},
}};
static_assert(metrics::rows_in_order(kBpfFamilies));

// khagent_runq_wait_seconds bounds in ns (integers, so kernel bucket edges
// compare exactly). No 1 us bound: the kernel's first bucket already reaches
// 1.024 us, so it would always be empty.
constexpr std::array<uint64_t, 19> kWaitBoundsNs = {2'000,       5'000,       10'000,        20'000,        50'000,
                                                    100'000,     200'000,     500'000,       1'000'000,     2'000'000,
                                                    5'000'000,   10'000'000,  20'000'000,    50'000'000,    100'000'000,
                                                    200'000'000, 500'000'000, 1'000'000'000, 10'000'000'000};

static_assert(KH_NR_WAIT_CAUSES == 5, "new wait cause: name it in kCauseNames");
constexpr std::array<const char*, KH_NR_RECLAIM_KINDS> kReclaimKindNames = {"node", "memcg"};
constexpr std::array<const char*, KH_NR_WAIT_CAUSES> kCauseNames = {"throttled", "same_cgroup", "other_cgroup",
                                                                    "unattributed", "stolen"};

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

namespace metrics {

RunqMetrics::RunqMetrics(prometheus::Registry& r, const MetricsOptions& opt) : opt_(opt) {
  const auto& t = kRunqFamilies;
  TableFamily<Histogram> wait(r, t[kWait]);
  pod_wait_ = TableFamily<Histogram>(r, t[kPodWait]);
  TableFamily<Counter> cause(r, t[kWaitByCause]);
  TableFamily<Counter> interference(r, t[kInterference]);
  aggressor_ = TableFamily<Counter>(r, t[kAggressor]);
  TableFamily<Counter> throttled(r, t[kThrottled]);
  TableFamily<Counter> reclaim_s(r, t[kReclaimSeconds]);
  TableFamily<Counter> reclaims(r, t[kReclaims]);
  TableFamily<Counter> cpu(r, t[kCpuUsage]);
  for (size_t c = 0; c < kClasses; c++) {
    class_wait_[c] = &wait.add({cls_name(c)}, runq_wait_bounds());
    for (size_t k = 0; k < KH_NR_WAIT_CAUSES; k++) cause_[c][k] = &cause.add({cls_name(c), kCauseNames[k]});
    for (size_t a = 0; a < kClasses; a++) interference_[c][a] = &interference.add({cls_name(c), cls_name(a)});
    throttled_[c] = &throttled.add({cls_name(c)});
    for (size_t k = 0; k < KH_NR_RECLAIM_KINDS; k++) {
      reclaim_s_[c][k] = &reclaim_s.add({cls_name(c), kReclaimKindNames[k]});
      reclaims_[c][k] = &reclaims.add({cls_name(c), kReclaimKindNames[k]});
    }
    cpu_[c] = &cpu.add({cls_name(c)});
  }
}

void RunqMetrics::update(const NodeSignals& node) {
  for (size_t c = 0; c < kClasses; c++) {
    const auto& cs = node.classes[c];
    observe_waits(*class_wait_[c], cs.interval.hist, cs.interval.wait_ns);
    for (size_t k = 0; k < KH_NR_WAIT_CAUSES; k++) cause_[c][k]->Increment(secs(cs.interval.cause_ns[k]));
    for (size_t a = 0; a < kClasses; a++) interference_[c][a]->Increment(secs(cs.wait_by_aggressor_class_ns[a]));
    cpu_[c]->Increment(secs(cs.interval.cpu_ns));
  }
  update_pods(node.pods);
  update_aggressors(node.yarn);
  update_throttled(node);
}

void RunqMetrics::update_pods(const std::vector<PodSignals>& list) {
  std::vector<std::pair<std::string, uint64_t>> items;
  items.reserve(list.size());
  for (const auto& p : list) items.emplace_back(p.uid, p.interval.wait_ns);
  std::set<std::string> have;
  for (const auto& [uid, _] : pods_) have.insert(uid);
  auto own = pick_series(std::move(items), have, opt_.max_pod_series);

  // Pods that are gone, or lost their slot, lose their series.
  for (auto it = pods_.begin(); it != pods_.end();) {
    if (own.count(it->first)) {
      ++it;
      continue;
    }
    pod_wait_.remove(it->second.hist);
    it = pods_.erase(it);
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
    auto& s = pods_[p.uid];
    if (s.hist && s.cls != p.cls) {  // reclassified: the class label changes
      pod_wait_.remove(s.hist);
      s.hist = nullptr;
    }
    if (!s.hist) {
      s.cls = p.cls;
      s.hist = &pod_wait_.add({p.uid, class_name(p.cls)}, runq_wait_bounds());
    }
    observe_waits(*s.hist, p.interval.hist, p.interval.wait_ns);
  }
  for (size_t c = 0; c < kClasses; c++) {
    if (!pod_other_[c]) {
      if (hist_count(other[c]) == 0 && other_ns[c] == 0) continue;  // created on first use
      pod_other_[c] = &pod_wait_.add({kOther, cls_name(c)}, runq_wait_bounds());
    }
    observe_waits(*pod_other_[c], other[c], other_ns[c]);
  }
}

void RunqMetrics::update_aggressors(const std::vector<YarnContainerSignals>& yarn) {
  std::vector<std::pair<std::string, uint64_t>> items;
  items.reserve(yarn.size());
  for (const auto& y : yarn) items.emplace_back(y.container, y.online_wait_caused_ns);
  std::set<std::string> have;
  for (const auto& [k, _] : aggressors_) have.insert(k);
  auto own = pick_series(std::move(items), have, opt_.top_aggressors);

  for (auto it = aggressors_.begin(); it != aggressors_.end();) {
    if (own.count(it->first)) {
      ++it;
      continue;
    }
    aggressor_.remove(it->second);
    it = aggressors_.erase(it);
  }
  uint64_t other_ns = 0;
  for (const auto& y : yarn) {
    if (!own.count(y.container)) {
      other_ns += y.online_wait_caused_ns;
      continue;
    }
    auto& c = aggressors_[y.container];
    if (!c) c = &aggressor_.add({y.container});
    c->Increment(secs(y.online_wait_caused_ns));
  }
  if (other_ns > 0 && !aggressor_other_) aggressor_other_ = &aggressor_.add({kOther});
  if (aggressor_other_) aggressor_other_->Increment(secs(other_ns));
}

void RunqMetrics::update_throttled(const NodeSignals& node) {
  for (size_t c = 0; c < kClasses; c++)
    if (node.throttled_ns[c]) throttled_[c]->Increment(secs(node.throttled_ns[c]));
  for (size_t c = 0; c < kClasses; c++)
    for (size_t k = 0; k < KH_NR_RECLAIM_KINDS; k++) {
      if (node.reclaim[c].ns[k]) reclaim_s_[c][k]->Increment(secs(node.reclaim[c].ns[k]));
      if (node.reclaim[c].count[k]) reclaims_[c][k]->Increment(static_cast<double>(node.reclaim[c].count[k]));
    }
}

BpfMetrics::BpfMetrics(prometheus::Registry& r) {
  const auto& t = kBpfFamilies;
  prog_time_ = TableFamily<Counter>(r, t[kProgRunSeconds]);
  prog_runs_ = TableFamily<Counter>(r, t[kProgRuns]);
  TableFamily<Counter> events(r, t[kBpfEvents]);
  for (size_t i = 0; i < KH_NR_COUNTERS; i++) events_[i].counter = &events.add({kBpfCounterNames[i]});
  stall_seconds_.counter = &TableFamily<Counter>(r, t[kStallSeconds]).add({});
  stall_count_.counter = &TableFamily<Counter>(r, t[kStalls]).add({});
  stall_cpus_failed_ = &TableFamily<Gauge>(r, t[kStallFailedCpus]).add({});
  source_info_ = TableFamily<Gauge>(r, t[kThrottleSource]);
}

void BpfMetrics::update(const Sample& sample) {
  for (size_t i = 0; i < KH_NR_COUNTERS; i++) events_[i].advance(sample.bpf_counters[i], 1.0);
  if (sample.stall_total.available) {
    stall_seconds_.advance(sample.stall_total.stolen_ns, 1e-9);
    stall_count_.advance(sample.stall_total.stalls, 1.0);
    stall_cpus_failed_->Set(static_cast<double>(sample.stall_total.cpus_failed));
  }
}

void BpfMetrics::update_cost(const std::vector<ProgStats>& progs) {
  for (const auto& p : progs) {
    auto [it, added] = progs_.try_emplace(p.name);
    auto& [run_time, runs] = it->second;
    if (added) {
      run_time.counter = &prog_time_.add({p.name});
      runs.counter = &prog_runs_.add({p.name});
    }
    run_time.advance(p.run_time_ns, 1e-9);
    runs.advance(p.run_cnt, 1.0);
  }
}

void BpfMetrics::set_throttle_source(const std::string& source) {
  if (source_ && source_value_ == source) return;
  if (source_) source_info_.remove(source_);
  source_ = &source_info_.add({source});
  source_->Set(1);
  source_value_ = source;
}

}  // namespace metrics
}  // namespace khagent
