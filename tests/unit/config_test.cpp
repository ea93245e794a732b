#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <string>
#include <vector>

#include "khagent/config/config.h"
#include "test_util.h"

using namespace khagent;

namespace {

const char* const kSource = "test.yaml";

Result<Config> load(const std::string& text, const NodeIdentity& node = {}) {
  return load_config_text(text, kSource, node);
}

// The message of a load that must fail with EINVAL ("" and a test failure if it loads).
std::string load_error(const std::string& text, const NodeIdentity& node = {}) {
  auto r = load(text, node);
  if (r.ok()) {
    ADD_FAILURE() << "loaded without error:\n" << text;
    return "";
  }
  EXPECT_EQ(r.error().err, EINVAL) << r.error().message;
  return r.error().message;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

void expect_same_rule(const ClassRule& a, const ClassRule& b) {
  EXPECT_EQ(a.qos, b.qos);
  EXPECT_EQ(a.path_glob, b.path_glob);
  EXPECT_EQ(a.priority_class, b.priority_class);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.annotations, b.annotations);
  EXPECT_EQ(a.yarn, b.yarn);
  EXPECT_EQ(a.batch_resources, b.batch_resources);
  EXPECT_EQ(a.cls, b.cls);
}

// Field by field (Config has no operator==); doubles must be bit-for-bit equal.
void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.tick_ns, b.tick_ns);
  EXPECT_EQ(a.dry_run, b.dry_run);
  EXPECT_EQ(a.state_file, b.state_file);
  EXPECT_EQ(a.kubelet_pods_url, b.kubelet_pods_url);

  EXPECT_EQ(a.classes.default_pod_class, b.classes.default_pod_class);
  EXPECT_EQ(a.classes.default_class, b.classes.default_class);
  ASSERT_EQ(a.classes.rules.size(), b.classes.rules.size());
  for (size_t i = 0; i < a.classes.rules.size(); i++) {
    SCOPED_TRACE("rule " + std::to_string(i));
    expect_same_rule(a.classes.rules[i], b.classes.rules[i]);
  }

  EXPECT_EQ(a.online.wait_p99_target_us, b.online.wait_p99_target_us);
  EXPECT_EQ(a.online.interference_share_limit, b.online.interference_share_limit);
  EXPECT_EQ(a.online.min_offline_share, b.online.min_offline_share);
  EXPECT_EQ(a.online.self_throttle_share, b.online.self_throttle_share);
  EXPECT_EQ(a.online.min_waits, b.online.min_waits);
  EXPECT_EQ(a.online.self_throttle_window_ns, b.online.self_throttle_window_ns);
  EXPECT_EQ(a.online.burst_share, b.online.burst_share);

  EXPECT_EQ(a.budget.floor_cores, b.budget.floor_cores);
  EXPECT_EQ(a.budget.allow_zero, b.budget.allow_zero);
  EXPECT_EQ(a.budget.reserve_cores, b.budget.reserve_cores);
  EXPECT_EQ(a.budget.initial_cores, b.budget.initial_cores);
  EXPECT_EQ(a.budget.decrease_factor, b.budget.decrease_factor);
  EXPECT_EQ(a.budget.min_decrease_interval_ns, b.budget.min_decrease_interval_ns);
  EXPECT_EQ(a.budget.increase_step_cores, b.budget.increase_step_cores);
  EXPECT_EQ(a.budget.increase_interval_ns, b.budget.increase_interval_ns);
  EXPECT_EQ(a.budget.calm_period_ns, b.budget.calm_period_ns);
  EXPECT_EQ(a.budget.deadband_cores, b.budget.deadband_cores);
  EXPECT_EQ(a.budget.cpu_max_period_us, b.budget.cpu_max_period_us);

  EXPECT_EQ(a.cpuset.enabled, b.cpuset.enabled);
  EXPECT_EQ(a.cpuset.reserved_cpus, b.cpuset.reserved_cpus);
  EXPECT_EQ(a.cpuset.cpu_manager_state, b.cpuset.cpu_manager_state);
  EXPECT_EQ(a.cpuset.throttle, b.cpuset.throttle);

  EXPECT_EQ(a.offline.targets, b.offline.targets);
  EXPECT_EQ(a.offline.besteffort, b.offline.besteffort);
  EXPECT_EQ(a.offline.yarn, b.offline.yarn);
  EXPECT_EQ(a.offline.yarn_hierarchy, b.offline.yarn_hierarchy);
  EXPECT_EQ(a.offline.idle, b.offline.idle);
  EXPECT_EQ(a.offline.weight, b.offline.weight);

  EXPECT_EQ(a.ladder.rungs, b.ladder.rungs);
  EXPECT_EQ(a.ladder.always, b.ladder.always);
  EXPECT_EQ(a.ladder.escalate_after_ns, b.ladder.escalate_after_ns);
  EXPECT_EQ(a.ladder.verify_window_ns, b.ladder.verify_window_ns);
  EXPECT_EQ(a.ladder.min_improvement, b.ladder.min_improvement);
  EXPECT_EQ(a.ladder.retry_after_ns, b.ladder.retry_after_ns);
  EXPECT_EQ(a.ladder.relax_after_ns, b.ladder.relax_after_ns);
  EXPECT_EQ(a.memory.enabled, b.memory.enabled);
  EXPECT_EQ(a.memory.node_cgroup, b.memory.node_cgroup);
  EXPECT_EQ(a.memory.reserve_bytes, b.memory.reserve_bytes);
  EXPECT_EQ(a.memory.reserve_share, b.memory.reserve_share);
  EXPECT_EQ(a.memory.reserve_min_bytes, b.memory.reserve_min_bytes);
  EXPECT_EQ(a.memory.eviction_threshold_bytes, b.memory.eviction_threshold_bytes);
  EXPECT_EQ(a.memory.min_offline_bytes, b.memory.min_offline_bytes);
  EXPECT_EQ(a.memory.grow_per_second_bytes, b.memory.grow_per_second_bytes);
  EXPECT_EQ(a.memory.deadband_bytes, b.memory.deadband_bytes);
  EXPECT_EQ(a.memory.stall_limit, b.memory.stall_limit);
  EXPECT_EQ(a.memory.stall_cut, b.memory.stall_cut);
  EXPECT_EQ(a.memory.stall_window_ns, b.memory.stall_window_ns);
  EXPECT_EQ(a.memory.oom_order, b.memory.oom_order);
  EXPECT_EQ(a.memory.backstop, b.memory.backstop);
  EXPECT_EQ(a.memory.oom_group, b.memory.oom_group);
  EXPECT_EQ(a.memory.reclaim, b.memory.reclaim);
  EXPECT_EQ(a.memory.reclaim_refault_rate_bytes, b.memory.reclaim_refault_rate_bytes);
  EXPECT_EQ(a.memory.reclaim_step_bytes, b.memory.reclaim_step_bytes);
  EXPECT_EQ(a.memory.reclaim_interval_ns, b.memory.reclaim_interval_ns);
  EXPECT_EQ(a.memory.refault_halflife_ns, b.memory.refault_halflife_ns);
  EXPECT_EQ(a.fast_path.enabled, b.fast_path.enabled);
  EXPECT_EQ(a.fast_path.wait_threshold_ns, b.fast_path.wait_threshold_ns);
  EXPECT_EQ(a.fast_path.min_interval_ns, b.fast_path.min_interval_ns);
  EXPECT_EQ(a.fast_path.scan_interval_ns, b.fast_path.scan_interval_ns);

  const auto &ya = a.yarn, &yb = b.yarn;
  EXPECT_EQ(ya.enabled, yb.enabled);
  EXPECT_EQ(ya.rm_urls, yb.rm_urls);
  EXPECT_EQ(ya.node_id, yb.node_id);
  EXPECT_EQ(ya.nm_url, yb.nm_url);
  EXPECT_EQ(ya.auth, yb.auth);
  EXPECT_EQ(ya.user, yb.user);
  EXPECT_EQ(ya.ca_file, yb.ca_file);
  EXPECT_EQ(ya.insecure_skip_verify, yb.insecure_skip_verify);
  EXPECT_EQ(ya.request_timeout_ms, yb.request_timeout_ms);
  EXPECT_EQ(ya.connect_timeout_ms, yb.connect_timeout_ms);
  EXPECT_EQ(ya.retries, yb.retries);
  EXPECT_EQ(ya.retry_backoff_ms, yb.retry_backoff_ms);
  EXPECT_EQ(ya.refresh_interval_ns, yb.refresh_interval_ns);
  EXPECT_EQ(ya.vcores_per_core, yb.vcores_per_core);
  EXPECT_EQ(ya.rounding, yb.rounding);
  EXPECT_EQ(ya.reserve_vcores, yb.reserve_vcores);
  EXPECT_EQ(ya.min_vcores, yb.min_vcores);
  EXPECT_EQ(ya.memory_mb, yb.memory_mb);
  EXPECT_EQ(ya.memory_follows_cpu, yb.memory_follows_cpu);
  EXPECT_EQ(ya.memory_follows_budget, yb.memory_follows_budget);
  EXPECT_EQ(ya.deadband_vcores, yb.deadband_vcores);
  EXPECT_EQ(ya.grow_stable_ns, yb.grow_stable_ns);
  EXPECT_EQ(ya.grow_interval_ns, yb.grow_interval_ns);
  EXPECT_EQ(ya.over_commit_timeout_ms, yb.over_commit_timeout_ms);
  EXPECT_EQ(ya.reclaim, yb.reclaim);
  EXPECT_EQ(ya.reclaim_grace_ns, yb.reclaim_grace_ns);
  EXPECT_EQ(ya.queue_priority, yb.queue_priority);
  EXPECT_EQ(ya.emergency, yb.emergency);
  EXPECT_EQ(ya.emergency_p99_factor, yb.emergency_p99_factor);
  EXPECT_EQ(ya.memory_emergency, yb.memory_emergency);
  EXPECT_EQ(a.io.enabled, b.io.enabled);
  EXPECT_DOUBLE_EQ(a.io.stall_limit, b.io.stall_limit);
  EXPECT_EQ(a.io.limit, b.io.limit);
  EXPECT_DOUBLE_EQ(a.io.limit_step, b.io.limit_step);
  EXPECT_EQ(a.io.min_bps, b.io.min_bps);
  EXPECT_EQ(a.io.min_iops, b.io.min_iops);
  EXPECT_EQ(a.io.verdict_after_ns, b.io.verdict_after_ns);
  EXPECT_EQ(a.io.hold_off_ns, b.io.hold_off_ns);
  EXPECT_EQ(a.io.calm_after_ns, b.io.calm_after_ns);
  const auto& ka = a.capacity;
  const auto& kb = b.capacity;
  EXPECT_EQ(ka.enabled, kb.enabled);
  EXPECT_EQ(ka.api_server, kb.api_server);
  EXPECT_EQ(ka.token_file, kb.token_file);
  EXPECT_EQ(ka.ca_file, kb.ca_file);
  EXPECT_EQ(ka.node_name, kb.node_name);
  EXPECT_EQ(ka.split, kb.split);
  EXPECT_DOUBLE_EQ(ka.batch_share, kb.batch_share);
  EXPECT_DOUBLE_EQ(ka.min_share, kb.min_share);
  EXPECT_DOUBLE_EQ(ka.floor_cores, kb.floor_cores);
  EXPECT_EQ(ka.floor_memory_bytes, kb.floor_memory_bytes);
  EXPECT_DOUBLE_EQ(ka.deadband, kb.deadband);
  EXPECT_EQ(ka.grow_stable_ns, kb.grow_stable_ns);
  EXPECT_EQ(ka.grow_interval_ns, kb.grow_interval_ns);
  EXPECT_EQ(ka.reassert_interval_ns, kb.reassert_interval_ns);
  EXPECT_EQ(ka.stale_after_ns, kb.stale_after_ns);
  EXPECT_EQ(ka.request_timeout_ms, kb.request_timeout_ms);
}

}  // namespace

// --- Loading ------------------------------------------------------------------

TEST(ConfigLoad, EmptyInputGivesDefaults) {
  for (const char* text : {"", "\n", "# only a comment\n   # and another\n", "---\n", "{}\n"}) {
    SCOPED_TRACE(text);
    auto c = load(text);
    ASSERT_TRUE(c.ok()) << c.error().message;
    expect_same(*c, default_config());
  }
}

TEST(ConfigLoad, DefaultRulesArePriorityClassYarnBestEffort) {
  // What an empty file classifies with; the round trip tests rely on it having rules.
  auto c = load("");
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->classes.rules.size(), 5u);
  EXPECT_EQ(c->classes.rules[0].priority_class, "high-priority-online");
  EXPECT_EQ(c->classes.rules[2].batch_resources, true);
  EXPECT_EQ(c->classes.rules[2].cls, CgroupClass::Offline);
  EXPECT_EQ(c->classes.rules[4].qos, "besteffort");
  EXPECT_EQ(c->classes.rules[4].cls, CgroupClass::Offline);
}

TEST(ConfigLoad, EveryKeyOverrides) {
  const char* text = R"(
tick: 1.5s
dry_run: true
state_file: /run/khagent/state.json
kubelet_pods_url: https://127.0.0.1:10250/pods
classes:
  default_pod_class: offline
  default_class: online
  rules:
    - class: online
      qos: guaranteed
      path: "/kubepods.slice/*"
      priority_class: high-priority-online
      labels: {app: web, tier: front}
      annotations: {"colocation.io/class": online}
      yarn: false
    - class: system
online:
  wait_p99_target: 500us
  interference_share_limit: 0.4
  min_offline_share: 0.1
  self_throttle_share: 0.7
  min_waits: 50
  self_throttle_window: 3500ms
  burst_share: 0.25
budget:
  floor: 2
  allow_zero: true
  reserve: 1.5
  initial: 4
  decrease_factor: 0.75
  min_decrease_interval: 250ms
  increase_step: 0.5
  increase_interval: 2m
  calm_period: 30s
  deadband: 0.05
  cpu_max_period: 50ms
cpuset:
  enabled: true
  reserved_cpus: "0-1,4"
  cpu_manager_state: /tmp/cpu_manager_state
  throttle: true
offline:
  targets: ["/batch.slice", "/yarn/extra"]
  besteffort: false
  yarn: false
  yarn_hierarchy: yarn-root
  idle: true
  weight: 0  # idle cgroups have no weight (a weight with idle is an error)
fast_path:
  enabled: false
  wait_threshold: 10ms
  min_interval: 100ms
  scan_interval: 0s
)";
  auto r = load(text);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const Config& c = *r;
  EXPECT_EQ(c.tick_ns, 1'500'000'000u);
  EXPECT_TRUE(c.dry_run);
  EXPECT_EQ(c.state_file, "/run/khagent/state.json");
  EXPECT_EQ(c.kubelet_pods_url, "https://127.0.0.1:10250/pods");

  EXPECT_EQ(c.classes.default_pod_class, CgroupClass::Offline);
  EXPECT_EQ(c.classes.default_class, CgroupClass::Online);
  ASSERT_EQ(c.classes.rules.size(), 2u);
  const ClassRule& r0 = c.classes.rules[0];
  EXPECT_EQ(r0.cls, CgroupClass::Online);
  EXPECT_EQ(r0.qos, "guaranteed");
  EXPECT_EQ(r0.path_glob, "/kubepods.slice/*");
  EXPECT_EQ(r0.priority_class, "high-priority-online");
  EXPECT_EQ(r0.labels, (std::map<std::string, std::string>{{"app", "web"}, {"tier", "front"}}));
  EXPECT_EQ(r0.annotations, (std::map<std::string, std::string>{{"colocation.io/class", "online"}}));
  EXPECT_EQ(r0.yarn, false);
  // A rule with only a class has every matcher unset (it matches everything).
  const ClassRule& r1 = c.classes.rules[1];
  EXPECT_EQ(r1.cls, CgroupClass::System);
  EXPECT_FALSE(r1.qos || r1.path_glob || r1.priority_class || r1.yarn);
  EXPECT_TRUE(r1.labels.empty() && r1.annotations.empty());

  EXPECT_EQ(c.online.wait_p99_target_us, 500.0);
  EXPECT_EQ(c.online.interference_share_limit, 0.4);
  EXPECT_EQ(c.online.min_offline_share, 0.1);
  EXPECT_EQ(c.online.self_throttle_share, 0.7);
  EXPECT_EQ(c.online.min_waits, 50u);
  EXPECT_EQ(c.online.self_throttle_window_ns, 3'500'000'000u);
  EXPECT_EQ(c.online.burst_share, 0.25);

  EXPECT_EQ(c.budget.floor_cores, 2.0);
  EXPECT_TRUE(c.budget.allow_zero);
  EXPECT_EQ(c.budget.reserve_cores, 1.5);
  EXPECT_EQ(c.budget.initial_cores, 4.0);
  EXPECT_EQ(c.budget.decrease_factor, 0.75);
  EXPECT_EQ(c.budget.min_decrease_interval_ns, 250'000'000u);
  EXPECT_EQ(c.budget.increase_step_cores, 0.5);
  EXPECT_EQ(c.budget.increase_interval_ns, 120'000'000'000u);
  EXPECT_EQ(c.budget.calm_period_ns, 30'000'000'000u);
  EXPECT_EQ(c.budget.deadband_cores, 0.05);
  EXPECT_EQ(c.budget.cpu_max_period_us, 50'000u);

  EXPECT_TRUE(c.cpuset.enabled);
  EXPECT_EQ(c.cpuset.reserved_cpus, (CpuSet{0, 1, 4}));
  EXPECT_EQ(c.cpuset.cpu_manager_state, "/tmp/cpu_manager_state");
  EXPECT_TRUE(c.cpuset.throttle);

  EXPECT_EQ(c.offline.targets, (std::vector<std::string>{"/batch.slice", "/yarn/extra"}));
  EXPECT_FALSE(c.offline.besteffort);
  EXPECT_FALSE(c.offline.yarn);
  EXPECT_EQ(c.offline.yarn_hierarchy, "yarn-root");
  EXPECT_TRUE(c.offline.idle);
  EXPECT_EQ(c.offline.weight, 0u);

  EXPECT_FALSE(c.fast_path.enabled);
  EXPECT_EQ(c.fast_path.wait_threshold_ns, 10'000'000u);
  EXPECT_EQ(c.fast_path.min_interval_ns, 100'000'000u);
  EXPECT_EQ(c.fast_path.scan_interval_ns, 0u);
}

TEST(ConfigLoad, UnsetKeysKeepDefaults) {
  auto c = load("budget:\n  floor: 2\noffline:\n");
  ASSERT_TRUE(c.ok()) << c.error().message;
  Config want = default_config();
  want.budget.floor_cores = 2;
  expect_same(*c, want);
}

TEST(ConfigLoad, DurationUnits) {
  struct Case {
    const char* text;
    uint64_t ns;
  } cases[] = {
      {"0s", 0},
      {"250ns", 250},
      {"500us", 500'000},
      {"200ms", 200'000'000},
      {"5s", 5'000'000'000},
      {"1.5s", 1'500'000'000},
      {"1.1s", 1'100'000'000},  // exact, not 1099999999
      {".5s", 500'000'000},
      {"0.001s", 1'000'000},
      {"2m", 120'000'000'000},
      {"1h", 3'600'000'000'000},
      {"'3s'", 3'000'000'000},  // quoted is fine for a duration
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    auto r = load(std::string("budget: {calm_period: ") + c.text + "}");
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->budget.calm_period_ns, c.ns);
  }
}

TEST(ConfigLoad, MicrosecondDurations) {
  auto r = load("online: {wait_p99_target: 1.5ms}\nbudget: {cpu_max_period: 1.5ms}\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->online.wait_p99_target_us, 1500.0);
  EXPECT_EQ(r->budget.cpu_max_period_us, 1500u);
  // The p99 target is a double: finer than a microsecond is kept.
  r = load("online: {wait_p99_target: 250ns}");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_DOUBLE_EQ(r->online.wait_p99_target_us, 0.25);
}

TEST(ConfigLoad, BooleansAndNulls) {
  auto r = load("dry_run: yes\nkubelet_pods_url:\noffline:\n  targets:\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->dry_run);
  EXPECT_EQ(r->kubelet_pods_url, "");
  EXPECT_TRUE(r->offline.targets.empty());
}

TEST(ConfigLoad, RulesReplaceTheDefaults) {
  auto r = load("classes:\n  rules:\n    - {class: offline, path: '/batch/*'}\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->classes.rules.size(), 1u);
  EXPECT_EQ(r->classes.rules[0].cls, CgroupClass::Offline);
  EXPECT_EQ(r->classes.rules[0].path_glob, "/batch/*");

  r = load("classes: {rules: []}");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->classes.rules.empty());

  // Other keys of `classes` leave the default rules alone.
  r = load("classes: {default_class: offline}");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->classes.rules.size(), default_config().classes.rules.size());
}

TEST(ConfigLoad, AnchorsAndAliasesWork) {
  auto r = load("classes:\n  rules:\n    - &web {class: online, labels: {app: web}}\n    - *web\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->classes.rules.size(), 2u);
  EXPECT_EQ(r->classes.rules[1].labels.at("app"), "web");
}

// --- Errors while loading -------------------------------------------------------

TEST(ConfigErrors, NameTheFileTheKeyAndTheProblem) {
  struct Case {
    std::string text;
    std::vector<std::string> says;
  } cases[] = {
      // Syntax.
      {"tick: [200ms\n", {"test.yaml:", "YAML syntax error"}},
      {"tick: 1s\n---\ntick: 2s\n", {"one YAML document"}},
      {"- a\n- b\n", {"expected a map at the top level"}},
      {"just words\n", {"expected a map at the top level"}},
      // Unknown keys at every level.
      {"tik: 200ms\n", {"test.yaml:1: tik: unknown key (known: tick, dry_run, state_file"}},
      {"budget:\n  flor: 1\n", {"test.yaml:2: budget.flor: unknown key (known: floor, allow_zero, reserve"}},
      {"classes:\n  rules:\n    - class: online\n      qoss: x\n", {"test.yaml:4: classes.rules[0].qoss: unknown key"}},
      {"fast_path: {enable: true}\n", {"fast_path.enable: unknown key"}},
      {"budget: {floor: 1}\nbudget: {floor: 2}\n", {"test.yaml:2: budget: duplicate key"}},
      // Wrong types.
      {"budget: {floor: abc}\n", {"budget.floor: expected a number, got \"abc\""}},
      {"budget: {floor: '2'}\n", {"budget.floor: expected a number"}},
      {"budget:\n  floor:\n  reserve: 1\n", {"test.yaml:2: budget.floor: expected a number, got nothing"}},
      {"budget: {floor: .inf}\n", {"budget.floor: expected a number"}},
      {"dry_run: maybe\n", {"dry_run: expected true or false, got \"maybe\""}},
      {"dry_run: 'true'\n", {"dry_run: expected true or false"}},
      {"online: {min_waits: 2.5}\n", {"online.min_waits: expected a whole number"}},
      {"online: {min_waits: -3}\n", {"online.min_waits: must not be negative"}},
      {"online: {self_throttle_window: 0s}\n", {"online.self_throttle_window: must be above 0"}},
      {"online: {self_throttle_window: 2m}\n", {"online.self_throttle_window: must be above 0 and at most 1m"}},
      {"online: {min_waits: 99999999999999999999999}\n", {"online.min_waits:", "out of range"}},
      {"offline: {weight: 4294967296}\n", {"offline.weight:", "out of range"}},
      {"budget: 5\n", {"budget: expected a map, got \"5\""}},
      {"budget: [1]\n", {"budget: expected a map, got a list"}},
      {"state_file: {a: 1}\n", {"state_file: expected a string, got a map"}},
      {"offline: {targets: /x}\n", {"offline.targets: expected a list"}},
      {"offline: {targets: [[a]]}\n", {"offline.targets[0]: expected a string"}},
      {"classes: {rules: {class: online}}\n", {"classes.rules: expected a list"}},
      {"classes: {rules: [online]}\n", {"classes.rules[0]: expected a map"}},
      {"classes: {rules: [{class: online, labels: {app: [a]}}]}\n", {"classes.rules[0].labels.app: expected a string"}},
      {"classes: {rules: [{class: online, yarn: sometimes}]}\n", {"classes.rules[0].yarn: expected true or false"}},
      // Durations.
      {"tick: fast\n", {"tick: not a duration: \"fast\""}},
      {"tick: 5\n", {"tick: duration \"5\" needs a unit"}},
      {"tick: 5d\n", {"tick: unknown unit in duration \"5d\""}},
      {"tick: 5 s\n", {"tick: unknown unit"}},
      {"tick: -5s\n", {"tick: must not be negative"}},
      {"tick: {a: 1}\n", {"tick: expected a duration"}},
      {"tick: 99999999999999999999s\n", {"tick:", "too long"}},
      {"fast_path: {wait_threshold: 1.5ns}\n", {"fast_path.wait_threshold:", "whole number of ns"}},
      {"budget: {cpu_max_period: 1500ns}\n", {"budget.cpu_max_period: must be a whole number of microseconds"}},
      {"online: {wait_p99_target: -2ms}\n", {"online.wait_p99_target: must not be negative"}},
      // Classes and QoS names.
      {"classes: {default_class: batch}\n", {"classes.default_class: unknown class \"batch\""}},
      {"classes: {default_pod_class: Online}\n", {"classes.default_pod_class: unknown class"}},
      {"classes: {rules: [{class: batch}]}\n", {"classes.rules[0].class: unknown class \"batch\""}},
      {"classes:\n  rules:\n    - class: online\n    - qos: besteffort\n",
       {"test.yaml:4: classes.rules[1]: a rule needs a class"}},
      {"classes: {rules: [{class: online, qos: premium}]}\n", {"classes.rules[0].qos: unknown qos \"premium\""}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    std::string msg = load_error(c.text);
    EXPECT_TRUE(contains(msg, kSource)) << msg;
    for (const auto& s : c.says) EXPECT_TRUE(contains(msg, s)) << "want \"" << s << "\" in: " << msg;
  }
  // A cpu list is parsed where it is read, once: its error names the line too.
  for (const char* text :
       {"cpuset: {reserved_cpus: 3-1}", "cpuset: {reserved_cpus: abc}", "cpuset: {reserved_cpus: '0,,1'}"}) {
    std::string msg = load_error(text);
    EXPECT_TRUE(contains(msg, std::string(kSource) + ":1: cpuset.reserved_cpus: not a cpu list")) << msg;
  }
}

TEST(ConfigErrors, LineNumberPointsAtTheValue) {
  std::string msg = load_error("tick: 200ms\ndry_run: false\n\nbudget:\n  reserve: 1\n  floor: x\n");
  EXPECT_TRUE(contains(msg, "test.yaml:6: budget.floor")) << msg;
}

TEST(ConfigErrors, UnknownKeyListsTheKnownOnes) {
  std::string msg = load_error("cpuset: {enable: true}");
  EXPECT_TRUE(contains(msg, "(known: enabled, reserved_cpus, cpu_manager_state, throttle)")) << msg;
}

// --- Validation -----------------------------------------------------------------

TEST(ConfigValidate, DefaultsAreValid) {
  auto v = validate_config(default_config());
  EXPECT_TRUE(v.ok()) << v.error().message;
}

TEST(ConfigValidate, RejectsImpossibleValues) {
  struct Case {
    std::string text;
    std::vector<std::string> says;
  } cases[] = {
      {"tick: 5ms", {"tick: must be between 10ms and 60s, got 5ms"}},
      {"tick: 61s", {"tick: must be between 10ms and 60s"}},
      {"state_file: ''", {"state_file: must not be empty"}},
      {"budget: {floor: -1}", {"budget.floor: must not be negative"}},
      {"memory: {reclaim_refault_rate: 0}", {"memory.reclaim_refault_rate: must be above 0"}},
      {"memory: {reclaim_step: 512Ki}", {"memory.reclaim_step: must be between 1Mi and 4Gi"}},
      {"memory: {reclaim_interval: 100ms}", {"memory.reclaim_interval: must be between 200ms and 1m"}},
      {"memory: {reclaim_interval: 2m}", {"memory.reclaim_interval:"}},
      {"memory: {refault_halflife: 5s}",
       {"memory.refault_halflife: must be 0 (refaulted page cache not counted) or "
        "between 10s and 24h"}},
      {"memory: {refault_halflife: 25h}", {"memory.refault_halflife:"}},
      {"budget: {floor: 0}", {"budget.floor:", "budget.allow_zero: true"}},
      {"budget: {reserve: -0.5}", {"budget.reserve: must not be negative"}},
      {"budget: {decrease_factor: 0}", {"budget.decrease_factor: must be between 0 and 1"}},
      {"budget: {decrease_factor: 1}", {"budget.decrease_factor:"}},
      {"budget: {decrease_factor: 1.5}", {"budget.decrease_factor:"}},
      {"budget: {increase_step: 0}", {"budget.increase_step: must be positive"}},
      {"budget: {increase_step: -0.25}", {"budget.increase_step:"}},
      {"budget: {deadband: -0.1}", {"budget.deadband: must not be negative"}},
      {"budget: {cpu_max_period: 999us}", {"budget.cpu_max_period:", "kernel limits", "999us"}},
      {"budget: {cpu_max_period: 2s}", {"budget.cpu_max_period:", "kernel limits"}},
      {"budget: {initial: 0.2}", {"budget.initial: 0.2 is below budget.floor (0.5)"}},
      {"budget: {initial: 0, floor: 0, allow_zero: true, decrease_factor: 0}", {"budget.decrease_factor"}},
      {"online: {wait_p99_target: 0s}", {"online.wait_p99_target: must be positive"}},
      {"online: {interference_share_limit: 1.5}", {"online.interference_share_limit: must be between 0 and 1"}},
      {"online: {min_offline_share: -0.1}", {"online.min_offline_share:"}},
      {"online: {self_throttle_share: 2}", {"online.self_throttle_share:"}},
      {"offline: {weight: 10001}", {"offline.weight:", "10001"}},
      {"fast_path: {wait_threshold: 0s}", {"fast_path.wait_threshold: must be positive"}},
      {"offline: {targets: [relative/x]}", {"offline.targets[0]:", "absolute"}},
      {"offline: {targets: [/ok, /a/../b]}", {"offline.targets[1]:", "\"..\""}},
      {"offline: {targets: [/a/..]}", {"offline.targets[0]:", "\"..\""}},
      {"offline: {targets: ['']}", {"offline.targets[0]:", "absolute"}},
      {"offline: {targets: [/]}", {"offline.targets[0]:", "root"}},
      {"offline: {targets: [/.]}", {"offline.targets[0]:", "root"}},
      {"offline: {targets: [/./]}", {"offline.targets[0]:", "root"}},
      {"offline: {yarn_hierarchy: ../../../../tmp/X/yh}", {"offline.yarn_hierarchy:", "\"..\""}},
      {"offline: {yarn_hierarchy: ''}", {"offline.yarn_hierarchy:"}},
      {"offline: {yarn_hierarchy: .}", {"offline.yarn_hierarchy:", "root"}},
      {"offline: {yarn_hierarchy: /hadoop-yarn}", {"offline.yarn_hierarchy:", "relative"}},
      {"ladder: {min_improvement: 1}", {"ladder.min_improvement"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    std::string msg = load_error(c.text);
    EXPECT_TRUE(contains(msg, std::string(kSource) + ": ")) << msg;
    for (const auto& s : c.says) EXPECT_TRUE(contains(msg, s)) << "want \"" << s << "\" in: " << msg;
  }
}

TEST(ConfigLadder, RungsAreKnownLeversOnce) {
  struct Case {
    std::string text;
    std::vector<std::string> says;
  } cases[] = {
      {"ladder: {rungs: [idle]}", {"test.yaml:1:", "ladder.rungs[0]", "unknown lever \"idle\""}},
      {"ladder: {rungs: [quota, quota]}", {"ladder.rungs[1]", "twice"}},
      {"ladder: {rungs: quota}", {"ladder.rungs", "expected a list"}},
      {"ladder: {always: [quota, idle]}", {"ladder.always[1]", "unknown lever"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    std::string msg = load_error(c.text);
    for (const auto& want : c.says) EXPECT_TRUE(contains(msg, want)) << msg;
  }
  auto r = load("ladder: {rungs: [quota], always: [cpuset]}");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->ladder.rungs, std::vector<Lever>{Lever::Quota});
  EXPECT_EQ(r->ladder.always, std::vector<Lever>{Lever::Cpuset});
  EXPECT_TRUE(default_config().offline.idle);  // cpu.idle is the default lever
}

TEST(ConfigValidate, AcceptsTheEdgesOfEachRange) {
  const char* texts[] = {
      "tick: 10ms",
      "tick: 60s",
      "budget: {floor: 0, allow_zero: true}",
      "budget: {floor: 0, allow_zero: true, initial: 0}",
      "budget: {initial: 0.5}",  // == floor
      "budget: {initial: -1}",
      "budget: {reserve: 0, deadband: 0, decrease_factor: 0.999}",
      "budget: {cpu_max_period: 1ms}",
      "budget: {cpu_max_period: 1s}",
      "online: {interference_share_limit: 0, min_offline_share: 1, self_throttle_share: 1}",
      "offline: {weight: 0}",
      "offline: {idle: false, weight: 1}",
      "offline: {idle: false, weight: 10000}",
      "ladder: {rungs: [], min_improvement: 0}",
      "ladder: {rungs: [quota, cpuset], verify_window: 1ms, min_improvement: 0.99}",
      "offline: {targets: [/a/..b, /x.slice/y]}",  // "..b" is a name, not a ".." component
      "fast_path: {enabled: false, wait_threshold: 0s}",
      "cpuset: {reserved_cpus: ''}",
      "cpuset: {reserved_cpus: '0-3,8'}",
  };
  for (const char* text : texts) {
    auto r = load(text);
    EXPECT_TRUE(r.ok()) << text << ": " << r.error().message;
  }
}

TEST(ConfigValidate, ChecksConfigsBuiltInCode) {
  Config c = default_config();
  c.budget.decrease_factor = std::nan("");
  auto v = validate_config(c);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().err, EINVAL);
  EXPECT_TRUE(contains(v.error().message, "budget.decrease_factor")) << v.error().message;

  c = default_config();
  c.classes.rules[0].qos = "premium";
  v = validate_config(c);
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(contains(v.error().message, "classes.rules[0].qos")) << v.error().message;

  c = default_config();
  c.offline.weight = 20000;
  EXPECT_FALSE(validate_config(c).ok());

  c = default_config();
  c.tick_ns = 0;
  EXPECT_FALSE(validate_config(c).ok());
}

// --- Per-node overrides -----------------------------------------------------------

namespace {

const char* const kNodesDoc = R"(
budget:
  floor: 1
  reserve: 0.75
offline:
  targets: ["/a", "/b"]
  idle: false
nodes:
  - match: {name: node-7}
    set: {budget: {floor: 2}}
  - match: {name: "gpu-*"}
    set: {offline: {targets: ["/gpu"]}}
  - match: {labels: {pool: colo, zone: a}}
    set:
      tick: 500ms
      offline: {idle: true}
  - match: {name: node-7, labels: {pool: colo}}
    set: {budget: {floor: 3}}
)";

Config load_for(const NodeIdentity& node) {
  auto r = load(kNodesDoc, node);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : Config{};
}

}  // namespace

TEST(ConfigNodes, NoMatchKeepsTheBase) {
  Config c = load_for({"node-1", {{"pool", "other"}}});
  EXPECT_EQ(c.budget.floor_cores, 1.0);
  EXPECT_EQ(c.budget.reserve_cores, 0.75);
  EXPECT_EQ(c.offline.targets, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_FALSE(c.offline.idle);
  EXPECT_EQ(c.tick_ns, 200'000'000u);
  // An unnamed node matches no name pattern either.
  c = load_for({});
  EXPECT_EQ(c.budget.floor_cores, 1.0);
}

TEST(ConfigNodes, ByNameMergesMapsKeyByKey) {
  Config c = load_for({"node-7", {}});
  EXPECT_EQ(c.budget.floor_cores, 2.0);
  EXPECT_EQ(c.budget.reserve_cores, 0.75);  // from the base, not reset by the override
  EXPECT_EQ(c.offline.targets, (std::vector<std::string>{"/a", "/b"}));
}

TEST(ConfigNodes, ByGlobAndListsReplace) {
  Config c = load_for({"gpu-12", {}});
  EXPECT_EQ(c.offline.targets, (std::vector<std::string>{"/gpu"}));
  EXPECT_EQ(c.budget.floor_cores, 1.0);
  c = load_for({"xgpu-12", {}});  // the glob is anchored
  EXPECT_EQ(c.offline.targets, (std::vector<std::string>{"/a", "/b"}));
}

TEST(ConfigNodes, ByLabelsAllMustMatch) {
  Config c = load_for({"n1", {{"pool", "colo"}, {"zone", "a"}, {"extra", "x"}}});
  EXPECT_TRUE(c.offline.idle);
  EXPECT_EQ(c.tick_ns, 500'000'000u);
  EXPECT_EQ(c.offline.targets, (std::vector<std::string>{"/a", "/b"}));

  c = load_for({"n1", {{"pool", "colo"}}});  // zone missing
  EXPECT_FALSE(c.offline.idle);
  c = load_for({"n1", {{"pool", "colo"}, {"zone", "b"}}});  // zone differs
  EXPECT_FALSE(c.offline.idle);
}

TEST(ConfigNodes, NameAndLabelsTogetherMustBothMatch) {
  // node-7 without the label: only the first entry (floor 2), not the last (floor 3).
  EXPECT_EQ(load_for({"node-7", {{"zone", "a"}}}).budget.floor_cores, 2.0);
  EXPECT_EQ(load_for({"node-8", {{"pool", "colo"}}}).budget.floor_cores, 1.0);
}

TEST(ConfigNodes, LaterEntriesWin) {
  Config c = load_for({"node-7", {{"pool", "colo"}, {"zone", "a"}}});
  EXPECT_EQ(c.budget.floor_cores, 3.0);  // entries 0 and 3 both set it; 3 is applied last
  EXPECT_TRUE(c.offline.idle);           // entry 2 applies too
  EXPECT_EQ(c.budget.reserve_cores, 0.75);

  // The same two overrides in the other order: the other value wins.
  const char* reversed = R"(
nodes:
  - match: {labels: {pool: colo}}
    set: {budget: {floor: 3}}
  - match: {name: node-7}
    set: {budget: {floor: 2}}
)";
  auto r = load(reversed, {"node-7", {{"pool", "colo"}}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->budget.floor_cores, 2.0);
}

TEST(ConfigNodes, RulesInAnOverrideReplaceTheBaseRules) {
  const char* text = R"(
classes:
  default_class: offline
  rules: [{class: online, qos: guaranteed}, {class: offline, qos: besteffort}]
nodes:
  - match: {name: a}
    set: {classes: {rules: [{class: offline, yarn: true}]}}
  - match: {name: b}
    set: {classes: {default_pod_class: system}}
)";
  auto a = load(text, {"a", {}});
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_EQ(a->classes.rules.size(), 1u);
  EXPECT_EQ(a->classes.rules[0].yarn, true);
  EXPECT_EQ(a->classes.default_class, CgroupClass::Offline);

  auto b = load(text, {"b", {}});
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->classes.rules.size(), 2u);
  EXPECT_EQ(b->classes.default_pod_class, CgroupClass::System);
  EXPECT_EQ(b->classes.default_class, CgroupClass::Offline);
}

TEST(ConfigNodes, OverrideResultIsValidated) {
  const char* text = "nodes:\n  - match: {name: z}\n    set: {budget: {floor: 0}}\n";
  EXPECT_TRUE(load(text, {"a", {}}).ok());
  std::string msg = load_error(text, {"z", {}});
  EXPECT_TRUE(contains(msg, "budget.floor") && contains(msg, "allow_zero")) << msg;
}

TEST(ConfigNodes, BadEntriesAreErrorsOnEveryNode) {
  struct Case {
    std::string text;
    std::string says;
  } cases[] = {
      {"nodes: [{match: {}, set: {}}]", "nodes[0].match: empty match"},
      {"nodes: [{match: {labels: {}}, set: {}}]", "nodes[0].match: empty match"},
      {"nodes:\n  - match:\n    set: {}\n", "nodes[0].match: empty match"},
      {"nodes: [{set: {tick: 1s}}]", "nodes[0]: missing match"},
      {"nodes: [{match: {name: x}}]", "nodes[0]: missing set"},
      {"nodes: [{match: {nam: x}, set: {}}]", "nodes[0].match.nam: unknown key"},
      {"nodes: [{match: {name: x}, set: {}, when: now}]", "nodes[0].when: unknown key"},
      {"nodes: {match: {name: x}}", "nodes: expected a list"},
      {"nodes: [x]", "nodes[0]: expected a map"},
      {"nodes: [{match: {name: x}, set: 5}]", "nodes[0].set: expected a map"},
      // The same checks as the base document, even though "x" never matches here.
      {"nodes:\n  - match: {name: x}\n    set: {budget: {flor: 1}}\n",
       "test.yaml:3: nodes[0].set.budget.flor: unknown key"},
      {"nodes: [{match: {name: x}, set: {tick: soon}}]", "nodes[0].set.tick: not a duration"},
      {"nodes: [{match: {name: x}, set: {nodes: []}}]", "nodes[0].set.nodes: unknown key"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    std::string msg = load_error(c.text, {"node-1", {{"pool", "colo"}}});
    EXPECT_TRUE(contains(msg, c.says)) << "want \"" << c.says << "\" in: " << msg;
  }
}

// --- Files ------------------------------------------------------------------------

TEST(ConfigFile, LoadsAFile) {
  TempDir dir;
  dir.write("khagent.yaml", "budget:\n  floor: 2\nnodes:\n  - match: {name: n1}\n    set: {dry_run: true}\n");
  auto r = load_config_file((dir.path / "khagent.yaml").string(), {"n1", {}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->budget.floor_cores, 2.0);
  EXPECT_TRUE(r->dry_run);
}

TEST(ConfigFile, ErrorsNameThePath) {
  TempDir dir;
  std::string path = (dir.path / "khagent.yaml").string();
  dir.write("khagent.yaml", "\nbudget: {flor: 2}\n");
  auto r = load_config_file(path, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EINVAL);
  EXPECT_TRUE(contains(r.error().message, path + ":2: budget.flor")) << r.error().message;

  dir.write("khagent.yaml", "tick: 1ms\n");
  r = load_config_file(path, {});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error().message, path + ": tick")) << r.error().message;
}

TEST(ConfigFile, UnreadableFileGivesErrnoAndPath) {
  TempDir dir;
  std::string missing = (dir.path / "nope.yaml").string();
  auto r = load_config_file(missing, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ENOENT);
  EXPECT_TRUE(contains(r.error().message, missing)) << r.error().message;

  r = load_config_file(dir.path.string(), {});  // a directory
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EISDIR);
  EXPECT_TRUE(contains(r.error().message, dir.path.string())) << r.error().message;
}

// --- Emitting -----------------------------------------------------------------------

TEST(ConfigYaml, DefaultsRoundTripWithReadableDurations) {
  std::string text = config_to_yaml(default_config());
  for (const char* s : {"tick: 200ms", "wait_p99_target: 2ms", "min_decrease_interval: 100ms", "increase_interval: 5s",
                        "calm_period: 10s", "cpu_max_period: 100ms", "wait_threshold: 5ms", "min_interval: 50ms",
                        "scan_interval: 1s", "kubelet_pods_url: \"\""}) {
    EXPECT_TRUE(contains(text, s)) << "want \"" << s << "\" in:\n" << text;
  }
  auto r = load(text);
  ASSERT_TRUE(r.ok()) << r.error().message << "\n" << text;
  expect_same(*r, default_config());
}

TEST(ConfigYaml, EmitsEveryKeyAndRulesWithOnlyTheirFields) {
  YAML::Node doc = YAML::Load(config_to_yaml(default_config()));
  EXPECT_EQ(doc.size(), 18u);  // tick dry_run state_file, 4 kubelet_* keys, 11 sections
  EXPECT_EQ(doc["memory"].size(), 20u);
  EXPECT_EQ(doc["ladder"].size(), 7u);
  EXPECT_EQ(doc["classes"].size(), 3u);
  EXPECT_EQ(doc["online"].size(), 7u);
  EXPECT_EQ(doc["budget"].size(), 11u);
  EXPECT_EQ(doc["cpuset"].size(), 4u);
  EXPECT_EQ(doc["offline"].size(), 6u);
  EXPECT_EQ(doc["fast_path"].size(), 4u);
  EXPECT_EQ(doc["yarn"].size(), 32u);
  EXPECT_EQ(doc["capacity"].size(), 16u);
  EXPECT_EQ(doc["io"].size(), 9u);
  EXPECT_FALSE(doc["nodes"]);

  YAML::Node yarn = doc["classes"]["rules"][3];  // default rule: {yarn: true} -> offline
  ASSERT_TRUE(yarn.IsMap());
  EXPECT_EQ(yarn.size(), 2u);
  EXPECT_EQ(yarn["class"].as<std::string>(), "offline");
  EXPECT_EQ(yarn["yarn"].as<bool>(), true);
}

TEST(ConfigYaml, EverythingChangedRoundTrips) {
  Config c = default_config();
  c.tick_ns = 1'500'000'000;
  c.dry_run = true;
  c.state_file = "/tmp/state #1: x.json";
  c.kubelet_pods_url = "https://127.0.0.1:10250/pods";
  c.classes.default_pod_class = CgroupClass::System;
  c.classes.default_class = CgroupClass::Offline;
  ClassRule full;
  full.cls = CgroupClass::Online;
  full.qos = "burstable";
  full.path_glob = "*/web/*";
  full.priority_class = "~";
  full.labels = {{"app", "true"}, {"n", "123"}, {"empty", ""}, {"null", "null"}};
  full.annotations = {{"colocation.io/class", "online"}, {"x", "a: b"}};
  full.yarn = false;
  ClassRule only_yarn;
  only_yarn.cls = CgroupClass::Offline;
  only_yarn.yarn = false;
  c.classes.rules = {full, only_yarn, ClassRule{}};
  c.online.wait_p99_target_us = 1234.5678;        // not whole nanoseconds
  c.online.interference_share_limit = 0.1 + 0.2;  // 0.30000000000000004
  c.online.min_offline_share = 1e-5;
  c.online.self_throttle_share = 1;
  c.online.min_waits = 123456789012;
  c.online.self_throttle_window_ns = 1'500'000'001;
  c.online.burst_share = 0.7;
  c.budget.floor_cores = 1.0 / 3;
  c.budget.allow_zero = true;
  c.budget.reserve_cores = 0;
  c.budget.initial_cores = 7.25;
  c.budget.decrease_factor = 0.9;
  c.budget.min_decrease_interval_ns = 1;
  c.budget.increase_step_cores = 2;
  c.budget.increase_interval_ns = 2 * 3'600'000'000'000ULL;
  c.budget.calm_period_ns = 90'000'000'000;
  c.budget.deadband_cores = 0;
  c.budget.cpu_max_period_us = 12'345;
  c.cpuset.enabled = true;
  c.cpuset.reserved_cpus = {0, 1, 8};
  c.cpuset.cpu_manager_state = "/x/cms";
  c.cpuset.throttle = true;
  c.offline.targets = {"/with space", "/x.slice/y"};
  c.offline.besteffort = false;
  c.offline.yarn = false;
  c.offline.yarn_hierarchy = "null";
  c.offline.idle = false;
  c.offline.weight = 10000;
  c.fast_path.enabled = false;
  c.fast_path.wait_threshold_ns = 0;
  c.fast_path.min_interval_ns = 50'000'001;
  c.yarn.enabled = true;
  c.yarn.rm_urls = {"http://rm1:8088", "https://rm2.example:8090"};
  c.yarn.node_id = "worker-3:45454";
  c.yarn.nm_url = "http://worker-3:8042";
  c.yarn.auth = HttpAuth::Kerberos;
  c.yarn.user = "";
  c.yarn.ca_file = "/etc/ca.pem";
  c.yarn.insecure_skip_verify = true;
  c.yarn.request_timeout_ms = 1500;
  c.yarn.connect_timeout_ms = 1;
  c.yarn.retries = 0;
  c.yarn.retry_backoff_ms = 0;
  c.yarn.refresh_interval_ns = 90'000'000'000;
  c.yarn.vcores_per_core = 1.5;
  c.yarn.rounding = VcoreRounding::Nearest;
  c.yarn.reserve_vcores = 2;
  c.yarn.min_vcores = 0;
  c.yarn.memory_mb = 65536;
  c.yarn.memory_follows_cpu = true;
  c.yarn.deadband_vcores = 0;
  c.yarn.grow_stable_ns = 1'000'000;
  c.yarn.grow_interval_ns = 0;
  c.yarn.over_commit_timeout_ms = -1;
  c.yarn.reclaim = false;
  c.yarn.reclaim_grace_ns = 1'000'000'000;
  c.yarn.queue_priority = {{"root.prod", 10}, {"adhoc", -5}, {"a b", 0}};
  c.yarn.emergency = true;
  c.yarn.emergency_p99_factor = 2.5;
  c.yarn.memory_emergency = false;
  c.memory.oom_group = true;
  c.io.enabled = false;
  c.io.stall_limit = 0.25;
  c.io.limit = false;
  c.io.limit_step = 0.7;
  c.io.min_bps = 8u << 20;
  c.io.min_iops = 100;
  c.io.verdict_after_ns = 3'000'000'000;
  c.io.hold_off_ns = 120'000'000'000;
  c.io.calm_after_ns = 30'000'000'000;
  c.capacity.enabled = true;
  c.capacity.api_server = "https://127.0.0.1:6443";
  c.capacity.token_file = "/t";
  c.capacity.ca_file = "/ca";
  c.capacity.node_name = "n1";
  c.capacity.split = CapacitySplitRule::Usage;
  c.capacity.batch_share = 0.3;
  c.capacity.min_share = 0.1;
  c.capacity.floor_cores = 1.5;
  c.capacity.floor_memory_bytes = uint64_t{1} << 30;
  c.capacity.deadband = 0.1;
  c.capacity.grow_stable_ns = 10'000'000'000;
  c.capacity.grow_interval_ns = 20'000'000'000;
  c.capacity.reassert_interval_ns = 15'000'000'000;
  c.capacity.stale_after_ns = 5'000'000'000;
  c.capacity.request_timeout_ms = 2000;
  auto v = validate_config(c);
  ASSERT_TRUE(v.ok()) << v.error().message;

  std::string text = config_to_yaml(c);
  auto r = load(text);
  ASSERT_TRUE(r.ok()) << r.error().message << "\n" << text;
  SCOPED_TRACE(text);
  expect_same(*r, c);
  EXPECT_EQ(config_to_yaml(*r), text);
}

TEST(ConfigYaml, OverriddenConfigRoundTrips) {
  // The effective config of a node no longer has `nodes`, and loads back the same.
  Config c = load_for({"node-7", {{"pool", "colo"}, {"zone", "a"}}});
  auto r = load(config_to_yaml(c), {"other", {}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  expect_same(*r, c);
}

TEST(ConfigValidate, IdleAndWeightConflict) {
  Config c = default_config();
  c.offline.idle = true;
  c.offline.weight = 10;
  auto r = validate_config(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("offline.weight"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("idle"), std::string::npos);
  c.offline.weight = 0;
  EXPECT_TRUE(validate_config(c).ok());
}

TEST(ConfigYarn, KeysLoadAndDefaultsAreOff) {
  Config d = default_config();
  EXPECT_FALSE(d.yarn.enabled);
  EXPECT_EQ(d.yarn.over_commit_timeout_ms, 180'000);
  auto r = load(
      "yarn:\n"
      "  enabled: true\n"
      "  rm_urls: [http://127.0.0.1:8088, http://127.0.0.1:8089]\n"
      "  over_commit_timeout: 3m\n"
      "  reclaim_grace: 90s\n"
      "  request_timeout: 2s\n"
      "  queue_priority: {prod: 10, adhoc: -1}\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->yarn.enabled);
  EXPECT_EQ(r->yarn.rm_urls.size(), 2u);
  EXPECT_EQ(r->yarn.over_commit_timeout_ms, 180'000);
  EXPECT_EQ(r->yarn.reclaim_grace_ns, 90'000'000'000u);
  EXPECT_EQ(r->yarn.request_timeout_ms, 2000u);
  EXPECT_EQ(r->yarn.queue_priority.at("adhoc"), -1);
  auto never = load("yarn: {over_commit_timeout: never}\n");
  ASSERT_TRUE(never.ok()) << never.error().message;
  EXPECT_EQ(never->yarn.over_commit_timeout_ms, -1);
}

TEST(ConfigYarn, BadValuesNameTheKey) {
  struct Case {
    const char* yaml;
    const char* key;
  };
  const Case cases[] = {
      {"yarn: {enabled: true}\n", "yarn.rm_urls"},
      {"yarn: {rm_urls: [\"rm1:8088\"]}\n", "yarn.rm_urls[0]"},
      {"yarn: {rm_urls: [\"http://rm1:8088/ws/v1\"]}\n", "yarn.rm_urls[0]"},
      {"yarn: {nm_url: \"nm:8042\"}\n", "yarn.nm_url"},
      {"yarn: {node_id: worker-3}\n", "yarn.node_id"},
      {"yarn: {auth: basic}\n", "yarn.auth"},
      {"yarn: {rounding: sideways}\n", "yarn.rounding"},
      {"yarn: {vcores_per_core: 0}\n", "yarn.vcores_per_core"},
      {"yarn: {request_timeout: 10us}\n", "yarn.request_timeout"},
      {"yarn: {refresh_interval: 10ms}\n", "yarn.refresh_interval"},
      {"yarn: {over_commit_timeout: 1.5ms}\n", "yarn.over_commit_timeout"},
      {"yarn: {queue_priority: {prod: high}}\n", "prod"},
      {"yarn: {min_vcores: -1}\n", "yarn.min_vcores"},
      {"yarn: {auth: simple, user: \"\"}\n", "yarn.user"},
      {"yarn: {emergency_p99_factor: 0.5}\n", "yarn.emergency_p99_factor"},
      {"yarn: {rm_url: x}\n", "yarn.rm_url"},
  };
  for (const auto& c : cases) {
    auto r = load(c.yaml);
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_NE(r.error().message.find(c.key), std::string::npos) << c.yaml << " -> " << r.error().message;
  }
}

TEST(ConfigIo, BadValuesNameTheKey) {
  struct Case {
    const char* yaml;
    const char* key;
  };
  const Case cases[] = {
      {"io: {stall_limit: 0}\n", "io.stall_limit"},
      {"io: {limit_step: 1}\n", "io.limit_step"},
      {"io: {limit_step: 0.05}\n", "io.limit_step"},
      {"io: {min_bps: 100}\n", "io.min_bps"},
      {"io: {min_iops: 0}\n", "io.min_iops"},
      {"io: {min_iops: -3}\n", "io.min_iops"},
      {"io: {verdict_after: 10ms}\n", "io.verdict_after"},
      {"io: {verdict_after: 5s, calm_after: 2s}\n", "io.calm_after"},
      {"io: {hold_off: 2h}\n", "io.hold_off"},
      {"io: {limt: true}\n", "limt"},
  };
  for (const auto& c : cases) {
    auto r = load(c.yaml);
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_NE(r.error().message.find(c.key), std::string::npos) << c.yaml << " -> " << r.error().message;
  }
  auto ok = load("io: {limit: false, limit_step: 0.25, min_bps: 2Mi, min_iops: 50, verdict_after: 1s}\n");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_FALSE(ok->io.limit);
  EXPECT_EQ(ok->io.min_bps, 2u << 20);
  EXPECT_EQ(ok->io.min_iops, 50u);
  EXPECT_EQ(ok->io.verdict_after_ns, 1'000'000'000u);
}
