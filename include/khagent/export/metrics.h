// Prometheus metrics and health endpoints. The agent feeds plain data in
// once per tick; an HTTP thread serves
//   /metrics  the text exposition format (version 0.0.4)
//   /healthz  200 "ok" while the BPF programs are attached (and ticks come),
//             else 503 with the reason
//   /readyz   503 until the first tick has been recorded, then 200
// Every method is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "khagent/model/histogram.h"
#include "khagent/util/result.h"
#include "khagent/version.h"

namespace khagent {

struct BurstReport;
struct CacheReclaimReport;
struct IoReport;

struct NodeSignals;
struct Sample;
struct Decision;
struct ActionRecord;
struct ProgStats;
struct YarnStatus;
struct CapacityPlan;
struct CapacityStatus;
struct MemoryInput;
struct MemoryDecision;
struct MemoryStall;
struct MemoryEvents;

struct MetricsOptions {
  std::string address = "0.0.0.0";
  int port = 9464;                        // 0: any free port (see Metrics::port())
  size_t max_pod_series = 50;             // pods with a runq wait histogram of their own
  size_t top_aggressors = 5;              // YARN containers with an interference counter of their own
  std::string version = KHAGENT_VERSION;  // khagent_build_info{version}
  // /healthz fails when update() has not been called for this long after its
  // first call (a wedged main loop); 0 turns the check off.
  double stall_seconds = 0;
};

// Upper bounds (seconds) of the khagent_runq_wait_seconds buckets, +Inf excluded.
const std::vector<double>& runq_wait_bounds();

// The kernel's log-linear histogram re-bucketed onto runq_wait_bounds(): one
// (non-cumulative) count per bound plus a last one for +Inf. Each kernel
// bucket goes to the smallest bound at or above its upper edge, so a wait is
// never counted below its true value (at most one kernel bucket, <= 25%, above).
std::vector<uint64_t> runq_wait_buckets(const WaitHistogram& h);

class Metrics {
 public:
  explicit Metrics(MetricsOptions o);
  ~Metrics();  // stops the server
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Binds address:port (the error names both) and serves on a thread.
  Result<void> start();
  // The bound port once started (the configured one before).
  int port() const;
  // Stops serving and joins the thread; idempotent.
  void stop();

  void set_bpf_attached(bool attached);
  void set_ready();
  // khagent_throttle_source_info{source} 1 ("fentry" | "cpu.stat").
  void set_throttle_source(const std::string& source);

  // Per tick: runq wait histograms, wait by cause, interference, CPU and
  // throttling by class, per-pod histograms, top aggressors, BPF counters.
  void update(const NodeSignals& node, const Sample& sample);
  // Budget, ceiling and floor gauges; decisions counted by action.
  void record_decision(const Decision& d);
  // The memory lever's budget and what it was taken from (the
  // khagent_*memory* gauges appear on the first call).
  void record_memory(const MemoryInput& in, const MemoryDecision& d);
  // Online pods' memory stall (PSI) in the last tick, summed over the pods.
  void record_memory_stall(const MemoryStall& s);
  // PSI triggers on online pods' memory.pressure that fired between ticks.
  void record_psi_triggers(size_t n);
  // Online pods given CPU burst (self-throttled), their cgroups with one,
  // the self-throttled pods and those refused one, by why.
  void record_burst(const BurstReport& r);
  // Proactive reclaim steps of offline page cache, their verdicts and pace.
  void record_cache_reclaim(const CacheReclaimReport& r);
  // Online pods' IO stall and offline IO per device (the IO controller).
  void record_io(const IoReport& r);
  // OOM kills and refaults of online pods and offline parents.
  void record_memory_events(const MemoryEvents& e);
  // Actuator results counted by cgroup file and outcome.
  void record_actions(const std::vector<ActionRecord>& recs);
  // Time from a breach (fast-path event) to the budget being applied.
  void record_reaction(double seconds);
  // Which levers are in force (lever -> on), and each ladder step with the
  // online wait behind offline (s/s) before it and, for a verdict, after.
  void record_levers(const std::vector<std::pair<std::string, bool>>& active);
  void record_ladder_step(const std::string& lever, const std::string& action, double before_ratio, double after_ratio,
                          bool verdict);
  // Cumulative per-program run time and count (kernel.bpf_stats_enabled).
  void update_bpf_cost(const std::vector<ProgStats>& progs);

  // The YARN downscaler's node resources, containers, updates, kills and
  // REST traffic (the khagent_yarn_* families appear on the first call).
  void update_yarn(const YarnStatus& status);
  // The capacity published to Kubernetes: a tick's plan, and what the
  // publisher did (the khagent_capacity_* families appear on the first call).
  void update_capacity(const CapacityPlan& plan);
  void update_capacity(const CapacityStatus& status);
  // What /metrics serves.
  std::string render();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace khagent
