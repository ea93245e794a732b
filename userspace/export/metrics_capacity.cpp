// The capacity published to Kubernetes: the budget's terms, the split, the
// value on the node and the publisher's requests (the families appear on
// the first call).
#include <array>

#include "khagent/model/capacity_status.h"
#include "khagent/policy/capacity.h"
#include "metrics_parts.h"

namespace khagent::metrics {

namespace {

enum CapacityFamily : size_t { kCpu, kMemory, kPatches, kReasserts, kStale, kNrCapacityFamilies };
constexpr std::array<FamilySpec, kNrCapacityFamilies> kCapacityFamilies = {{
    {kCpu,
     "khagent_capacity_cpu_cores",
     MetricType::Gauge,
     {"term"},
     "The offline CPU budget's explanation and its split: capacity - online - reserve - margin = budget = yarn "
     "+ batch; published: what the node is to show as kubernetes.io/batch-cpu, on_node: what it showed"},
    {kMemory,
     "khagent_capacity_memory_bytes",
     MetricType::Gauge,
     {"term"},
     "The offline memory budget's explanation and its split, as khagent_capacity_cpu_cores "
     "(kubernetes.io/batch-memory)"},
    {kPatches,
     "khagent_capacity_patches_total",
     MetricType::Counter,
     {"outcome"},
     "PATCHes of the node's status with the batch resources, by outcome"},
    {kReasserts,
     "khagent_capacity_reasserts_total",
     MetricType::Counter,
     {},
     "PATCHes because the node no longer showed the published value (zeroed, removed or changed)"},
    {kStale,
     "khagent_capacity_stale",
     MetricType::Gauge,
     {},
     "1 while no capacity decision came for capacity.stale_after: the node keeps the last value"},
}};
static_assert(rows_in_order(kCapacityFamilies));

constexpr std::array<const char*, 9> kTerms = {"capacity", "online", "reserve",   "margin", "budget",
                                               "yarn",     "batch",  "published", "on_node"};

}  // namespace

void CapacityMetrics::build() {
  const auto& t = kCapacityFamilies;
  TableFamily<Gauge> cpu(r_, t[kCpu]);
  TableFamily<Gauge> memory(r_, t[kMemory]);
  for (const char* term : kTerms) {
    cpu_[term] = &cpu.add({term});
    memory_[term] = &memory.add({term});
  }
  TableFamily<Counter> patches(r_, t[kPatches]);
  for (const char* o : {"ok", "failed"}) patches_[o].counter = &patches.add({o});
  reasserts_.counter = &TableFamily<Counter>(r_, t[kReasserts]).add({});
  stale_ = &TableFamily<Gauge>(r_, t[kStale]).add({});
  built_ = true;
}

void CapacityMetrics::update(const CapacityPlan& p) {
  if (!built_) build();
  auto terms = [](std::map<std::string, Gauge*>& g, const std::optional<BudgetTerms>& t) {
    if (!t) return;
    g["capacity"]->Set(t->capacity);
    g["online"]->Set(t->online);
    g["reserve"]->Set(t->reserve);
    g["margin"]->Set(t->margin);
  };
  terms(cpu_, p.cpu_terms);
  terms(memory_, p.memory_terms);
  cpu_["budget"]->Set(p.split.budget_cores);
  cpu_["yarn"]->Set(p.yarn.budget_cores);
  cpu_["batch"]->Set(p.split.batch_cores);
  cpu_["published"]->Set(static_cast<double>(p.publish.value.cpu_milli) / 1000.0);
  if (p.split.budget_memory) {
    memory_["budget"]->Set(static_cast<double>(*p.split.budget_memory));
    memory_["yarn"]->Set(static_cast<double>(p.yarn.memory_budget_bytes.value_or(0)));
    memory_["batch"]->Set(static_cast<double>(p.split.batch_memory.value_or(0)));
  }
  if (p.publish.value.memory_bytes >= 0) memory_["published"]->Set(static_cast<double>(p.publish.value.memory_bytes));
}

void CapacityMetrics::update(const CapacityStatus& st) {
  if (!built_) build();
  if (st.on_node) {
    cpu_["on_node"]->Set(st.on_node->cpu_milli >= 0 ? static_cast<double>(st.on_node->cpu_milli) / 1000.0 : 0);
    memory_["on_node"]->Set(st.on_node->memory_bytes >= 0 ? static_cast<double>(st.on_node->memory_bytes) : 0);
  }
  patches_["ok"].advance(st.patches_ok, 1);
  patches_["failed"].advance(st.patches_failed, 1);
  reasserts_.advance(st.reasserts, 1);
  stale_->Set(st.stale ? 1 : 0);
}

}  // namespace khagent::metrics
