// The effective configuration as YAML (`khagent config`, the agent's start-up
// log): every key, with the values in force.
#include <string>

#include <yaml-cpp/yaml.h>

#include "config_text.h"
#include "khagent/config/config.h"
#include "khagent/util/bytes.h"

namespace khagent {

using namespace config_text;

namespace {

// Writes one rule with only the fields it sets.
void emit_rule(YAML::Emitter& out, const ClassRule& r) {
  out << YAML::BeginMap << YAML::Key << "class" << YAML::Value << class_name(r.cls);
  if (r.qos) out << YAML::Key << "qos" << YAML::Value << *r.qos;
  if (r.path_glob) out << YAML::Key << "path" << YAML::Value << *r.path_glob;
  if (r.priority_class) out << YAML::Key << "priority_class" << YAML::Value << *r.priority_class;
  if (!r.labels.empty()) out << YAML::Key << "labels" << YAML::Value << r.labels;
  if (!r.annotations.empty()) out << YAML::Key << "annotations" << YAML::Value << r.annotations;
  if (r.yarn) out << YAML::Key << "yarn" << YAML::Value << *r.yarn;
  if (r.batch_resources) out << YAML::Key << "batch_resources" << YAML::Value << *r.batch_resources;
  out << YAML::EndMap;
}

}  // namespace

std::string config_to_yaml(const Config& c) {
  YAML::Emitter out;
  auto key = [&out](const char* k) -> YAML::Emitter& { return out << YAML::Key << k << YAML::Value; };
  out << YAML::BeginMap;
  key("tick") << format_duration_ns(c.tick_ns);
  key("dry_run") << c.dry_run;
  key("state_file") << c.state_file;
  key("kubelet_pods_url") << c.kubelet_pods_url;
  key("kubelet_token_file") << c.kubelet_token_file;
  key("kubelet_ca_file") << c.kubelet_ca_file;
  key("kubelet_insecure_skip_verify") << c.kubelet_insecure_skip_verify;

  key("classes") << YAML::BeginMap;
  key("default_pod_class") << class_name(c.classes.default_pod_class);
  key("default_class") << class_name(c.classes.default_class);
  key("rules") << YAML::BeginSeq;
  for (const auto& r : c.classes.rules) emit_rule(out, r);
  out << YAML::EndSeq << YAML::EndMap;

  const auto& o = c.online;
  key("online") << YAML::BeginMap;
  key("wait_p99_target") << format_duration_us(o.wait_p99_target_us);
  key("interference_share_limit") << format_double(o.interference_share_limit);
  key("min_offline_share") << format_double(o.min_offline_share);
  key("self_throttle_share") << format_double(o.self_throttle_share);
  key("min_waits") << o.min_waits;
  key("self_throttle_window") << format_duration_ns(o.self_throttle_window_ns);
  key("burst_share") << format_double(o.burst_share);
  out << YAML::EndMap;

  const auto& b = c.budget;
  key("budget") << YAML::BeginMap;
  key("floor") << format_double(b.floor_cores);
  key("allow_zero") << b.allow_zero;
  key("reserve") << format_double(b.reserve_cores);
  key("initial") << format_double(b.initial_cores);
  key("decrease_factor") << format_double(b.decrease_factor);
  key("min_decrease_interval") << format_duration_ns(b.min_decrease_interval_ns);
  key("increase_step") << format_double(b.increase_step_cores);
  key("increase_interval") << format_duration_ns(b.increase_interval_ns);
  key("calm_period") << format_duration_ns(b.calm_period_ns);
  key("deadband") << format_double(b.deadband_cores);
  key("cpu_max_period") << format_duration_us(b.cpu_max_period_us);
  out << YAML::EndMap;

  key("cpuset") << YAML::BeginMap;
  key("enabled") << c.cpuset.enabled;
  key("reserved_cpus") << format_cpu_list(c.cpuset.reserved_cpus);
  key("cpu_manager_state") << c.cpuset.cpu_manager_state;
  key("throttle") << c.cpuset.throttle;
  out << YAML::EndMap;

  key("offline") << YAML::BeginMap;
  key("targets") << YAML::Flow << c.offline.targets;
  key("besteffort") << c.offline.besteffort;
  key("yarn") << c.offline.yarn;
  key("yarn_hierarchy") << c.offline.yarn_hierarchy;
  key("idle") << c.offline.idle;
  key("weight") << c.offline.weight;
  out << YAML::EndMap;

  key("memory") << YAML::BeginMap;
  key("enabled") << c.memory.enabled;
  key("node_cgroup") << c.memory.node_cgroup;
  key("reserve") << format_bytes(c.memory.reserve_bytes);
  key("reserve_share") << format_double(c.memory.reserve_share);
  key("reserve_min") << format_bytes(c.memory.reserve_min_bytes);
  key("eviction_threshold") << format_bytes(c.memory.eviction_threshold_bytes);
  key("min_offline") << format_bytes(c.memory.min_offline_bytes);
  key("grow_per_second") << format_bytes(c.memory.grow_per_second_bytes);
  key("deadband") << format_bytes(c.memory.deadband_bytes);
  key("stall_limit") << format_double(c.memory.stall_limit);
  key("stall_cut") << format_double(c.memory.stall_cut);
  key("stall_window") << format_duration_ns(c.memory.stall_window_ns);
  key("oom_order") << c.memory.oom_order;
  key("backstop") << c.memory.backstop;
  key("oom_group") << c.memory.oom_group;
  key("reclaim") << c.memory.reclaim;
  key("reclaim_refault_rate") << format_bytes(c.memory.reclaim_refault_rate_bytes);
  key("reclaim_step") << format_bytes(c.memory.reclaim_step_bytes);
  key("reclaim_interval") << format_duration_ns(c.memory.reclaim_interval_ns);
  key("refault_halflife") << format_duration_ns(c.memory.refault_halflife_ns);
  out << YAML::EndMap;

  key("ladder") << YAML::BeginMap;
  {
    std::vector<std::string> rungs;
    rungs.reserve(c.ladder.rungs.size());
    for (Lever l : c.ladder.rungs) rungs.emplace_back(lever_name(l));
    key("rungs") << YAML::Flow << rungs;
    rungs.clear();
    for (Lever l : c.ladder.always) rungs.emplace_back(lever_name(l));
    key("always") << YAML::Flow << rungs;
  }
  key("escalate_after") << format_duration_ns(c.ladder.escalate_after_ns);
  key("verify_window") << format_duration_ns(c.ladder.verify_window_ns);
  key("min_improvement") << format_double(c.ladder.min_improvement);
  key("retry_after") << format_duration_ns(c.ladder.retry_after_ns);
  key("relax_after") << format_duration_ns(c.ladder.relax_after_ns);
  out << YAML::EndMap;

  key("fast_path") << YAML::BeginMap;
  key("enabled") << c.fast_path.enabled;
  key("wait_threshold") << format_duration_ns(c.fast_path.wait_threshold_ns);
  key("min_interval") << format_duration_ns(c.fast_path.min_interval_ns);
  key("scan_interval") << format_duration_ns(c.fast_path.scan_interval_ns);
  out << YAML::EndMap;

  const auto& y = c.yarn;
  key("yarn") << YAML::BeginMap;
  key("enabled") << y.enabled;
  key("rm_urls") << YAML::Flow << y.rm_urls;
  key("node_id") << y.node_id;
  key("nm_url") << y.nm_url;
  key("auth") << http_auth_name(y.auth);
  key("user") << y.user;
  key("ca_file") << y.ca_file;
  key("insecure_skip_verify") << y.insecure_skip_verify;
  key("request_timeout") << format_duration_ns(y.request_timeout_ms * kNsPerMs);
  key("connect_timeout") << format_duration_ns(y.connect_timeout_ms * kNsPerMs);
  key("retries") << y.retries;
  key("retry_backoff") << format_duration_ns(y.retry_backoff_ms * kNsPerMs);
  key("refresh_interval") << format_duration_ns(y.refresh_interval_ns);
  key("vcores_per_core") << format_double(y.vcores_per_core);
  key("rounding") << vcore_rounding_name(y.rounding);
  key("reserve_vcores") << y.reserve_vcores;
  key("min_vcores") << y.min_vcores;
  key("memory_mb") << y.memory_mb;
  key("memory_follows_cpu") << y.memory_follows_cpu;
  key("memory_follows_budget") << y.memory_follows_budget;
  key("deadband_vcores") << y.deadband_vcores;
  key("grow_stable") << format_duration_ns(y.grow_stable_ns);
  key("grow_interval") << format_duration_ns(y.grow_interval_ns);
  if (y.over_commit_timeout_ms < 0) {
    key("over_commit_timeout") << "never";
  } else {
    key("over_commit_timeout") << format_duration_ns(static_cast<uint64_t>(y.over_commit_timeout_ms) * kNsPerMs);
  }
  key("resize_with_other_resources") << y.resize_with_other_resources;
  key("reclaimer") << reclaimer_name(y.reclaimer);
  key("reclaim") << y.reclaim;
  key("reclaim_grace") << format_duration_ns(y.reclaim_grace_ns);
  key("queue_priority") << YAML::BeginMap;
  for (const auto& [q, p] : y.queue_priority) key(q.c_str()) << p;
  out << YAML::EndMap;
  key("emergency") << y.emergency;
  key("emergency_p99_factor") << format_double(y.emergency_p99_factor);
  key("memory_emergency") << y.memory_emergency;
  out << YAML::EndMap;

  key("io") << YAML::BeginMap;
  key("enabled") << c.io.enabled;
  key("stall_limit") << format_double(c.io.stall_limit);
  key("limit") << c.io.limit;
  key("limit_step") << format_double(c.io.limit_step);
  key("min_bps") << format_bytes(c.io.min_bps);
  key("min_iops") << c.io.min_iops;
  key("verdict_after") << format_duration_ns(c.io.verdict_after_ns);
  key("hold_off") << format_duration_ns(c.io.hold_off_ns);
  key("calm_after") << format_duration_ns(c.io.calm_after_ns);
  out << YAML::EndMap;

  const auto& k = c.capacity;
  key("capacity") << YAML::BeginMap;
  key("enabled") << k.enabled;
  key("api_server") << k.api_server;
  key("token_file") << k.token_file;
  key("ca_file") << k.ca_file;
  key("node_name") << k.node_name;
  key("split") << capacity_split_name(k.split);
  key("batch_share") << format_double(k.batch_share);
  key("min_share") << format_double(k.min_share);
  key("floor_cpu") << format_double(k.floor_cores);
  key("floor_memory") << format_bytes(k.floor_memory_bytes);
  key("deadband") << format_double(k.deadband);
  key("grow_stable") << format_duration_ns(k.grow_stable_ns);
  key("grow_interval") << format_duration_ns(k.grow_interval_ns);
  key("reassert_interval") << format_duration_ns(k.reassert_interval_ns);
  key("stale_after") << format_duration_ns(k.stale_after_ns);
  key("request_timeout") << format_duration_ns(k.request_timeout_ms * kNsPerMs);
  out << YAML::EndMap;

  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace khagent
