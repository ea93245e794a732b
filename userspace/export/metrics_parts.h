// Internal to the export stage: the parts of khagent::Metrics, one per
// concern. Each part's file declares its Prometheus families once, in a table
// of FamilySpec rows (name, type, label names, help), next to the code that
// records them; metrics.cpp keeps the server, health and the shared registry.
// A part is not thread-safe: Metrics calls it under its registry mutex.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "khagent/export/metrics.h"
#include "khagent/model/bpf_counters.h"
#include "khagent/model/cgroup_class.h"
#include "khagent/policy/burst_controller.h"
#include "khagent/policy/cache_reclaim.h"

namespace khagent {

struct PodSignals;
struct YarnContainerSignals;
enum class BudgetAction;

namespace metrics {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;

enum class MetricType { Counter, Gauge, Histogram };

inline constexpr size_t kMaxLabels = 2;

// One family of a part's table. `row` is its index in the table, which
// rows_in_order() checks, so that a part can name a row by its enum.
struct FamilySpec {
  size_t row;
  const char* name;
  MetricType type;
  std::array<const char*, kMaxLabels> labels;  // label names in order; nullptr past the last
  const char* help;
};

template <size_t N>
constexpr bool rows_in_order(const std::array<FamilySpec, N>& table) {
  for (size_t i = 0; i < N; i++)
    if (table[i].row != i) return false;
  return true;
}

// A family registered from a table row. Its series are named by label values
// alone, in the order of the row's label names.
template <typename T>
class TableFamily {
 public:
  TableFamily() = default;
  // Registers the row's family in `r` (T must be the row's type).
  TableFamily(prometheus::Registry& r, const FamilySpec& spec);

  // The series with these label values; Add() returns an existing one.
  T& add(std::initializer_list<std::string_view> values)
    requires(!std::is_same_v<T, Histogram>);
  T& add(std::initializer_list<std::string_view> values, const std::vector<double>& bounds)
    requires std::is_same_v<T, Histogram>;
  void remove(T* series) { family_->Remove(series); }
  explicit operator bool() const { return family_ != nullptr; }

 private:
  const FamilySpec* spec_ = nullptr;
  prometheus::Family<T>* family_ = nullptr;
};

extern template class TableFamily<Counter>;
extern template class TableFamily<Gauge>;
extern template class TableFamily<Histogram>;

constexpr const char* kOther = "other";  // label value of aggregated pods / aggressors
constexpr size_t kClasses = 3;           // CgroupClass values, index = enum value

inline double secs(uint64_t ns) { return static_cast<double>(ns) / 1e9; }
inline const char* cls_name(size_t c) { return class_name(static_cast<CgroupClass>(c)); }

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

// metrics_runq.cpp: per tick, run-queue waits by class, cause and pod, CPU,
// throttling, direct reclaim, interference and the top YARN aggressors.
class RunqMetrics {
 public:
  RunqMetrics(prometheus::Registry& r, const MetricsOptions& opt);
  void update(const NodeSignals& node);

 private:
  void update_pods(const std::vector<PodSignals>& list);
  void update_aggressors(const std::vector<YarnContainerSignals>& yarn);
  void update_throttled(const NodeSignals& node);

  const MetricsOptions& opt_;
  TableFamily<Histogram> pod_wait_;
  TableFamily<Counter> aggressor_;
  std::array<Histogram*, kClasses> class_wait_{};
  std::array<std::array<Counter*, KH_NR_WAIT_CAUSES>, kClasses> cause_{};
  std::array<std::array<Counter*, kClasses>, kClasses> interference_{};  // [victim][aggressor]
  std::array<Counter*, kClasses> throttled_{};
  // Direct memory reclaim by class and enum kh_reclaim_kind: seconds, reclaims.
  std::array<std::array<Counter*, KH_NR_RECLAIM_KINDS>, kClasses> reclaim_s_{}, reclaims_{};
  std::array<Counter*, kClasses> cpu_{};

  struct PodSeries {
    CgroupClass cls = CgroupClass::Online;
    Histogram* hist = nullptr;
  };
  std::map<std::string, PodSeries> pods_;         // by uid
  std::array<Histogram*, kClasses> pod_other_{};  // pod_uid="other", per class
  std::map<std::string, Counter*> aggressors_;    // by YARN container
  Counter* aggressor_other_ = nullptr;
};

// metrics_runq.cpp: the BPF side's own counters, the stall detector, the
// programs' run time and where throttling numbers come from.
class BpfMetrics {
 public:
  explicit BpfMetrics(prometheus::Registry& r);
  void update(const Sample& sample);
  void update_cost(const std::vector<ProgStats>& progs);
  void set_throttle_source(const std::string& source);

 private:
  TableFamily<Counter> prog_time_;
  TableFamily<Counter> prog_runs_;
  TableFamily<Gauge> source_info_;
  std::array<CumulativeCounter, KH_NR_COUNTERS> events_{};
  CumulativeCounter stall_seconds_, stall_count_;
  Gauge* stall_cpus_failed_ = nullptr;
  std::map<std::string, std::pair<CumulativeCounter, CumulativeCounter>> progs_;  // time, runs
  Gauge* source_ = nullptr;
  std::string source_value_;
};

// metrics_cpu.cpp: the offline CPU budget, decisions and reaction time.
class BudgetMetrics {
 public:
  explicit BudgetMetrics(prometheus::Registry& r);
  void record_decision(const Decision& d);
  void record_reaction(double seconds);

 private:
  Gauge* budget_ = nullptr;
  Gauge* ceiling_ = nullptr;
  Gauge* floor_ = nullptr;
  std::map<BudgetAction, Counter*> decisions_;
  Histogram* reaction_ = nullptr;
};

// metrics_cpu.cpp: the levers in force and the ladder's steps.
class LeverMetrics {
 public:
  explicit LeverMetrics(prometheus::Registry& r);
  void record_levers(const std::vector<std::pair<std::string, bool>>& active);
  void record_ladder_step(const std::string& lever, const std::string& action, double before_ratio, double after_ratio,
                          bool verdict);

 private:
  TableFamily<Gauge> active_;
  TableFamily<Counter> steps_;
  TableFamily<Gauge> effect_;
};

// metrics_actions.cpp: the actuator's results.
class ActionMetrics {
 public:
  explicit ActionMetrics(prometheus::Registry& r);
  void record(const std::vector<ActionRecord>& recs);

 private:
  TableFamily<Counter> actions_;
};

// metrics_memory.cpp: the memory lever, online stall, PSI triggers, OOM kills
// and refaults; each family appears on the first call that records it.
class MemoryMetrics {
 public:
  explicit MemoryMetrics(prometheus::Registry& r) : r_(r) {}
  void record(const MemoryInput& in, const MemoryDecision& d);
  void record_stall(const MemoryStall& s);
  void record_psi_triggers(size_t n);
  void record_events(const MemoryEvents& e);

 private:
  prometheus::Registry& r_;
  std::array<Gauge*, 8> lever_{};    // budget, ceiling, capacity, working sets, reserve, eviction, refault credit
  std::array<Counter*, 2> stall_{};  // some, full
  Counter* psi_triggers_ = nullptr;
  std::array<Counter*, 4> events_{};  // kills online, offline; refaults online, offline
};

// metrics_burst.cpp: online pods given CPU burst (on the first call).
class BurstMetrics {
 public:
  explicit BurstMetrics(prometheus::Registry& r) : r_(r) {}
  void record(const BurstReport& r);

 private:
  prometheus::Registry& r_;
  Gauge* pods_ = nullptr;
  Gauge* cgroups_ = nullptr;
  Gauge* self_throttled_ = nullptr;
  std::array<Gauge*, kNrBurstRefusals> refused_{};
};

// metrics_cache_reclaim.cpp: proactive reclaim of offline page cache (on the first call).
class CacheReclaimMetrics {
 public:
  explicit CacheReclaimMetrics(prometheus::Registry& r) : r_(r) {}
  void record(const CacheReclaimReport& r);

 private:
  prometheus::Registry& r_;
  std::array<Counter*, 4> steps_{};  // asked, helped, useless, costly
  Counter* bytes_ = nullptr;
  Gauge* pace_ = nullptr;
};

// metrics_yarn.cpp: the YARN downscaler (the families appear on the first call).
class YarnMetrics {
 public:
  explicit YarnMetrics(prometheus::Registry& r) : r_(r) {}
  void update(const YarnStatus& st);

 private:
  void build();

  prometheus::Registry& r_;
  bool built_ = false;
  std::map<std::string, Gauge*> vcores_, memory_;  // by kind: configured, advertised, target
  Gauge* active_ = nullptr;
  Gauge* victims_ = nullptr;
  Gauge* up_ = nullptr;
  std::map<std::string, CumulativeCounter> updates_, kills_;      // by outcome
  std::map<std::string, CumulativeCounter> requests_, failures_;  // by peer
  CumulativeCounter failovers_;
};

// metrics_io.cpp: the IO controller's signals (the families appear on the
// first call).
class IoMetrics {
 public:
  explicit IoMetrics(prometheus::Registry& r) : r_(r) {}
  void record(const IoReport& r);

 private:
  prometheus::Registry& r_;
  bool built_ = false;
  std::map<std::string, Counter*> stall_;  // some, full
  Gauge* stalled_ = nullptr;
  TableFamily<Counter> bytes_, ios_;
  std::set<std::string> devices_;
  Gauge* limits_ = nullptr;
  std::map<std::string, Counter*> steps_;  // by step
};

// metrics_capacity.cpp: the capacity published to Kubernetes (the families
// appear on the first call).
class CapacityMetrics {
 public:
  explicit CapacityMetrics(prometheus::Registry& r) : r_(r) {}
  void update(const CapacityPlan& plan);
  void update(const CapacityStatus& st);

 private:
  void build();

  prometheus::Registry& r_;
  bool built_ = false;
  std::map<std::string, Gauge*> cpu_, memory_;  // by term
  std::map<std::string, CumulativeCounter> patches_;
  CumulativeCounter reasserts_;
  Gauge* stale_ = nullptr;
};

}  // namespace metrics
}  // namespace khagent
