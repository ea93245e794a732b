// The YARN downscaler: node resources, containers, updates, kills and REST
// traffic (the families appear on the first call).
#include <array>

#include "khagent/model/yarn_status.h"
#include "metrics_parts.h"

namespace khagent::metrics {

namespace {

enum YarnFamily : size_t {
  kVcores,
  kMemory,
  kContainers,
  kUp,
  kUpdates,
  kKills,
  kRequests,
  kFailures,
  kFailovers,
  kNrYarnFamilies
};
constexpr std::array<FamilySpec, kNrYarnFamilies> kYarnFamilies = {{
    {kVcores,
     "khagent_yarn_node_vcores",
     MetricType::Gauge,
     {"kind"},
     "vcores of this NodeManager: configured (its own), advertised (what the RM "
     "has) and target (what the offline budget asks for)"},
    {kMemory,
     "khagent_yarn_node_memory_bytes",
     MetricType::Gauge,
     {"kind"},
     "Memory of this NodeManager: configured, advertised and target"},
    {kContainers,
     "khagent_yarn_containers",
     MetricType::Gauge,
     {"state"},
     "YARN containers on this node: active, and victims (over capacity, in their grace)"},
    {kUp,
     "khagent_yarn_up",
     MetricType::Gauge,
     {},
     "1 when the last round with the ResourceManager and NodeManager went through"},
    {kUpdates,
     "khagent_yarn_resource_updates_total",
     MetricType::Counter,
     {"outcome"},
     "Node resource updates posted to the ResourceManager, by outcome"},
    {kKills,
     "khagent_yarn_container_kills_total",
     MetricType::Counter,
     {"outcome"},
     "YARN containers killed locally after their grace, by outcome"},
    {kRequests,
     "khagent_yarn_requests_total",
     MetricType::Counter,
     {"peer"},
     "HTTP requests sent to the ResourceManager (rm) and NodeManager (nm), retries included"},
    {kFailures,
     "khagent_yarn_request_failures_total",
     MetricType::Counter,
     {"peer"},
     "Requests that ended without a usable answer after retries and failover"},
    {kFailovers,
     "khagent_yarn_rm_failovers_total",
     MetricType::Counter,
     {},
     "Moves to another ResourceManager address (HA standby, errors)"},
}};
static_assert(rows_in_order(kYarnFamilies));

}  // namespace

void YarnMetrics::build() {
  const auto& t = kYarnFamilies;
  TableFamily<Gauge> vcores(r_, t[kVcores]);
  TableFamily<Gauge> memory(r_, t[kMemory]);
  for (const char* k : {"configured", "advertised", "target"}) {
    vcores_[k] = &vcores.add({k});
    memory_[k] = &memory.add({k});
  }
  TableFamily<Gauge> containers(r_, t[kContainers]);
  active_ = &containers.add({"active"});
  victims_ = &containers.add({"victim"});
  up_ = &TableFamily<Gauge>(r_, t[kUp]).add({});
  TableFamily<Counter> updates(r_, t[kUpdates]);
  TableFamily<Counter> kills(r_, t[kKills]);
  for (const char* o : {"ok", "failed", "dry_run"}) {
    updates_[o].counter = &updates.add({o});
    kills_[o].counter = &kills.add({o});
  }
  TableFamily<Counter> requests(r_, t[kRequests]);
  TableFamily<Counter> failures(r_, t[kFailures]);
  for (const char* p : {"rm", "nm"}) {
    requests_[p].counter = &requests.add({p});
    failures_[p].counter = &failures.add({p});
  }
  failovers_.counter = &TableFamily<Counter>(r_, t[kFailovers]).add({});
  built_ = true;
}

void YarnMetrics::update(const YarnStatus& st) {
  if (!built_) build();
  auto set = [&](const char* kind, bool known, const YarnResource& r) {
    vcores_[kind]->Set(known ? static_cast<double>(r.vcores) : 0);
    memory_[kind]->Set(known ? static_cast<double>(r.memory_mb) * 1024 * 1024 : 0);
  };
  set("configured", st.configured_known, st.configured);
  set("advertised", st.advertised_known, st.advertised);
  set("target", st.configured_known, st.target);
  active_->Set(static_cast<double>(st.containers));
  victims_->Set(static_cast<double>(st.victims));
  up_->Set(st.last_error.empty() && !st.node_id.empty() ? 1 : 0);
  updates_["ok"].advance(st.updates_ok, 1);
  updates_["failed"].advance(st.updates_failed, 1);
  updates_["dry_run"].advance(st.updates_dry_run, 1);
  kills_["ok"].advance(st.kills_ok, 1);
  kills_["failed"].advance(st.kills_failed, 1);
  kills_["dry_run"].advance(st.kills_dry_run, 1);
  requests_["rm"].advance(st.rm_requests, 1);
  requests_["nm"].advance(st.nm_requests, 1);
  failures_["rm"].advance(st.rm_failures, 1);
  failures_["nm"].advance(st.nm_failures, 1);
  failovers_.advance(st.rm_failovers, 1);
}

}  // namespace khagent::metrics
