// The memory lever's budget and what it was taken from, online pods' memory
// stall and PSI triggers, and OOM kills and refaults. Each group of families
// appears on the first call that records it (a node without the memory lever
// shows none of them).
#include <array>

#include "khagent/policy/memory.h"
#include "metrics_parts.h"

namespace khagent::metrics {

namespace {

enum MemoryFamily : size_t {
  kBudget,  // kBudget .. kEviction: the memory lever, in the order of MemoryMetrics::lever_
  kCeiling,
  kCapacity,
  kNodeWorkingSet,
  kOfflineWorkingSet,
  kReserve,
  kEviction,
  kRefaultCredit,
  kStall,
  kPsiTriggers,
  kOomKills,
  kRefaults,
  kNrMemoryFamilies
};
constexpr std::array<FamilySpec, kNrMemoryFamilies> kMemoryFamilies = {{
    {kBudget,
     "khagent_offline_memory_budget_bytes",
     MetricType::Gauge,
     {},
     "Memory the offline parents may hold in all (their limits add up to it, "
     "or to more where memory.min_offline applies)"},
    {kCeiling,
     "khagent_offline_memory_ceiling_bytes",
     MetricType::Gauge,
     {},
     "Largest offline memory budget: capacity minus the kubelet's eviction threshold, the reserve and what "
     "the rest of the node uses"},
    {kCapacity,
     "khagent_node_memory_capacity_bytes",
     MetricType::Gauge,
     {},
     "The node's memory (or memory.node_cgroup's limit)"},
    {kNodeWorkingSet,
     "khagent_node_memory_working_set_bytes",
     MetricType::Gauge,
     {},
     "The node's memory in use, inactive page cache excluded"},
    {kOfflineWorkingSet,
     "khagent_offline_memory_working_set_bytes",
     MetricType::Gauge,
     {},
     "The offline parents' memory in use, inactive page cache excluded"},
    {kReserve,
     "khagent_node_memory_reserve_bytes",
     MetricType::Gauge,
     {},
     "Memory kept free for online growth (memory.reserve or its share)"},
    {kEviction,
     "khagent_node_memory_eviction_threshold_bytes",
     MetricType::Gauge,
     {},
     "The kubelet's eviction threshold kept free too (memory.eviction_threshold)"},
    {kRefaultCredit,
     "khagent_online_memory_refault_credit_bytes",
     MetricType::Gauge,
     {},
     "Online page cache counted with online's working set because online pods refaulted it lately "
     "(memory.refault_halflife; at most their inactive page cache)"},
    {kStall,
     "khagent_online_memory_stall_seconds_total",
     MetricType::Counter,
     {"kind"},
     "Time online pods stalled on memory (PSI of their memory.pressure, summed over the pods): "
     "kind some (a task stalled) or full (all stalled)"},
    {kPsiTriggers,
     "khagent_online_memory_psi_triggers_total",
     MetricType::Counter,
     {},
     "PSI triggers on online pods' memory.pressure that woke the agent between ticks "
     "(memory.stall_limit of memory.stall_window stalled)"},
    {kOomKills,
     "khagent_memory_oom_kills_total",
     MetricType::Counter,
     {"class"},
     "Processes the kernel's OOM killer took in online pods or offline parents "
     "(memory.events, v1 memory.oom_control)"},
    {kRefaults,
     "khagent_memory_refaults_total",
     MetricType::Counter,
     {"class"},
     "Pages of online pods or offline parents read back soon after reclaim "
     "(memory.stat workingset_refault_anon + _file): their working set did not fit"},
}};
static_assert(rows_in_order(kMemoryFamilies));
static_assert(kRefaultCredit - kBudget + 1 == 8, "the memory lever's gauges are MemoryMetrics::lever_");

}  // namespace

void MemoryMetrics::record(const MemoryInput& in, const MemoryDecision& d) {
  if (!lever_[0])
    for (size_t i = 0; i < lever_.size(); i++)
      lever_[i] = &TableFamily<Gauge>(r_, kMemoryFamilies[kBudget + i]).add({});
  const std::array<uint64_t, 8> v = {d.budget,        d.ceiling, in.capacity, in.node_used,
                                     in.offline_used, d.reserve, d.eviction,  in.online_refault_credit};
  for (size_t i = 0; i < v.size(); i++) lever_[i]->Set(static_cast<double>(v[i]));
}

void MemoryMetrics::record_stall(const MemoryStall& s) {
  if (!stall_[0]) {
    TableFamily<Counter> f(r_, kMemoryFamilies[kStall]);
    stall_ = {&f.add({"some"}), &f.add({"full"})};
  }
  stall_[0]->Increment(static_cast<double>(s.some_us) / 1e6);
  stall_[1]->Increment(static_cast<double>(s.full_us) / 1e6);
}

void MemoryMetrics::record_psi_triggers(size_t n) {
  if (!psi_triggers_) psi_triggers_ = &TableFamily<Counter>(r_, kMemoryFamilies[kPsiTriggers]).add({});
  psi_triggers_->Increment(static_cast<double>(n));
}

void MemoryMetrics::record_events(const MemoryEvents& e) {
  if (!events_[0]) {
    TableFamily<Counter> kills(r_, kMemoryFamilies[kOomKills]);
    TableFamily<Counter> refaults(r_, kMemoryFamilies[kRefaults]);
    events_ = {&kills.add({"online"}), &kills.add({"offline"}), &refaults.add({"online"}), &refaults.add({"offline"})};
  }
  const std::array<uint64_t, 4> v = {e.online_oom_kills, e.offline_oom_kills, e.online_refaults, e.offline_refaults};
  for (size_t i = 0; i < v.size(); i++) events_[i]->Increment(static_cast<double>(v[i]));
}

}  // namespace khagent::metrics
