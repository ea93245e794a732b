// khagent's configuration: plain data with built-in defaults. Loaded from a
// YAML file (userspace/config/config_yaml.cpp); per-node overrides applied.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "khagent/model/cgroup_class.h"
#include "khagent/model/lever.h"
#include "khagent/util/cpuset.h"
#include "khagent/util/http_client.h"
#include "khagent/util/result.h"

namespace khagent {

// One classification rule; every field that is set must match (AND).
// Rules are tried in order, the first match decides.
struct ClassRule {
  std::optional<std::string> qos;                  // guaranteed | burstable | besteffort
  std::optional<std::string> path_glob;            // fnmatch(3) on the cgroup path, '*' spans '/'
  std::optional<std::string> priority_class;       // pod spec.priorityClassName (kubelet /pods)
  std::map<std::string, std::string> labels;       // pod labels, all must match
  std::map<std::string, std::string> annotations;  // pod annotations, all must match
  std::optional<bool> yarn;                        // a YARN container (or not)
  // A pod that requests kubernetes.io/batch-cpu or batch-memory (or not).
  std::optional<bool> batch_resources;
  CgroupClass cls = CgroupClass::Online;
};

struct ClassConfig {
  std::vector<ClassRule> rules;                         // default: see default_config()
  CgroupClass default_pod_class = CgroupClass::Online;  // k8s pods no rule matched
  CgroupClass default_class = CgroupClass::System;      // everything else
};

struct OnlineConfig {
  double wait_p99_target_us = 2000;       // per online pod, over a tick
  double interference_share_limit = 0.5;  // share of a pod's wait spent behind offline
  double min_offline_share = 0.2;         // a p99 breach only counts if offline had this share
  double self_throttle_share = 0.5;       // above this share of throttled wait: quota too small
  uint64_t min_waits = 20;                // fewer waits in a tick: no verdict for the pod
  // CPU burst judges a pod over this window of ticks, not one tick: a pod
  // with a few requests a second has a few waits a tick. Judged once the
  // window holds min_waits waits or 2 periods the kernel throttled it in.
  uint64_t self_throttle_window_ns = 2'000'000'000;
  // CPU burst for a pod whose waits are its own throttling, as a share of
  // its quota (0: none; at most 1, the kernel's cap).
  double burst_share = 0.5;
};

struct BudgetConfig {
  double floor_cores = 0.5;      // offline never gets less (unless allow_zero)
  bool allow_zero = false;       // let the floor be 0 (offline may be starved)
  double reserve_cores = 0.5;    // ceiling = node CPUs - online usage - reserve
  double initial_cores = -1;     // < 0: start at the ceiling
  double decrease_factor = 0.5;  // multiplicative decrease, 0 < f < 1
  uint64_t min_decrease_interval_ns = 100'000'000;
  double increase_step_cores = 0.25;
  uint64_t increase_interval_ns = 5'000'000'000;
  uint64_t calm_period_ns = 10'000'000'000;  // no breach for this long before increasing
  double deadband_cores = 0.1;               // smaller changes are not applied
  uint64_t cpu_max_period_us = 100'000;
};

struct CpusetConfig {
  bool enabled = false;
  CpuSet reserved_cpus;  // never given to offline (written as a cpu list, e.g. "0-1")
  std::string cpu_manager_state = "/var/lib/kubelet/cpu_manager_state";
  // false: offline gets ceil(budget) CPUs of its own and no quota inside
  // them (cpu.max "max"); the quota is used only when no core can be spared.
  // true: the budget is also enforced with cpu.max inside those CPUs.
  bool throttle = false;
};

struct OfflineConfig {
  std::vector<std::string> targets;  // extra offline parent cgroups (paths in the cgroup2 mount)
  bool besteffort = true;            // write the BestEffort QoS cgroup
  bool yarn = true;                  // write the YARN hierarchy's root
  std::string yarn_hierarchy = "hadoop-yarn";
  // cpu.idle=1 on the YARN root, each BestEffort pod and offline.targets
  // (never on the BestEffort QoS cgroup, whose weight the kubelet writes);
  // without cpu.idle in the kernel, the minimum weight instead.
  bool idle = true;
  uint32_t weight = 0;  // cpu.weight on offline targets khagent owns; 0 = leave
};

// Levers above cpu.idle (the rungs of model/lever.h), climbed in order
// while an online pod stays in breach; each step is checked against the
// online waits behind offline in the window before it, and undone when it
// did not cut them enough.
struct LadderConfig {
  std::vector<Lever> rungs = {Lever::Cpuset, Lever::Quota};
  std::vector<Lever> always;                   // in force from the start, whatever the ladder says
  uint64_t escalate_after_ns = 1'000'000'000;  // breach this long before the next rung
  uint64_t verify_window_ns = 3'000'000'000;   // before/after window of a step
  double min_improvement = 0.25;               // a step must cut the waits behind offline by this share
  uint64_t retry_after_ns = 300'000'000'000;   // an undone rung is not tried again before this
  uint64_t relax_after_ns = 60'000'000'000;    // calm this long: step one rung down
};

// The memory lever: a limit on the offline parents (memory.high on v2,
// memory.limit_in_bytes on a hybrid host's v1 memory hierarchy) that
// follows the memory the rest of the node leaves: capacity - reserve -
// what everything else uses. Cut at once, grown back by grow_per_second.
struct MemoryConfig {
  bool enabled = true;
  // The pressure domain: "" = the whole node (/proc/meminfo); else a cgroup
  // (path in the cgroup2 mount) whose limit is the node's memory and whose
  // use is everyone's, e.g. a parent that holds both online and offline.
  std::string node_cgroup;
  uint64_t reserve_bytes = uint64_t{256} << 20;  // kept free for online growth: at most the larger of
  double reserve_share = 0.05;                   // this and this share of the capacity;
  // once online's growth is measured (30 s of ticks), what it needs: the
  // larger of this, the kernel's high watermarks and the most online grew
  // in one second over five minutes (a value at least the above: fixed).
  uint64_t reserve_min_bytes = uint64_t{64} << 20;
  // The kubelet's hard eviction threshold on memory.available (its default
  // evictionHard is 100Mi): kept free on top of the reserve, so khagent cuts
  // offline before the kubelet evicts a pod for the node's memory.
  uint64_t eviction_threshold_bytes = uint64_t{100} << 20;
  uint64_t min_offline_bytes = uint64_t{256} << 20;  // per offline parent: never limited below
  uint64_t grow_per_second_bytes = uint64_t{64} << 20;
  uint64_t deadband_bytes = uint64_t{32} << 20;  // smaller budget changes are not applied
  // An online cgroup stalled on memory more than this share of a tick (PSI
  // "some"): offline is cut to (1 - stall_cut) of what it holds, whatever
  // the arithmetic says, so the kernel reclaims from offline.
  double stall_limit = 0.05;
  double stall_cut = 0.1;
  // Between ticks, a PSI trigger on each online pod's memory.pressure wakes
  // the agent once the pod stalled stall_limit of this window (the kernel
  // takes 500ms to 10s); 0: no triggers, the tick's reading only.
  uint64_t stall_window_ns = 1'000'000'000;
  // Processes under the YARN roots and offline.targets at oom_score_adj
  // 1000 (as the kubelet sets BestEffort pods), so a node-wide OOM takes
  // them before online pods; put back when khagent stops.
  bool oom_order = true;
  // On cgroup v2, memory.max on each YARN root at its memory.high plus half
  // the reserve: a hard limit the kernel keeps with an OOM kill inside
  // offline when an anonymous hog creeps past memory.high. Never lowered
  // below what the root holds at that moment (a cut does not kill; growth
  // past it does).
  bool backstop = true;
  // On cgroup v2, memory.oom.group=1 on each YARN container (a YARN root's
  // child): an OOM kill at the backstop (or anywhere inside a container)
  // takes the whole container, not one of its processes. Off by default:
  // the operator allows it (a container's launcher then dies with its
  // JVM, which the NodeManager reports as the container's failure).
  bool oom_group = false;
  // Proactive reclaim of offline page cache while online pods refault
  // (their own page cache read back soon after the kernel evicted it):
  // memory.reclaim on v2, a bounded limit pulse on v1, at most once per
  // reclaim_interval (longer while steps do not help), each step judged.
  bool reclaim = true;
  uint64_t reclaim_refault_rate_bytes = uint64_t{4} << 20;  // online file refaults per second that start a step
  uint64_t reclaim_step_bytes = uint64_t{64} << 20;         // the least asked of a parent per step
  uint64_t reclaim_interval_ns = 1'000'000'000;             // the pace, and each step's verdict window
  // Online page cache that online pods read back soon after the kernel
  // evicted it (workingset_refault_file) is in use though the kernel lists
  // it inactive, which the working set counts as free: the bytes refaulted
  // are counted with online's working set, up to online's inactive page
  // cache, and the count halves over this much time without refaults (the
  // room goes back to offline slowly); 0: not counted.
  uint64_t refault_halflife_ns = 1'800'000'000'000;
};

struct FastPathConfig {
  bool enabled = true;
  uint64_t wait_threshold_ns = 5'000'000;  // one wait of a protected cgroup over this: event
  uint64_t min_interval_ns = 50'000'000;   // per cgroup, enforced in the kernel
  // How often the task iterator looks for waits still going on (it visits
  // every task of the node: about 0.6 us each); 0: never.
  uint64_t scan_interval_ns = 1'000'000'000;
};

// How vcores = budget_cores * vcores_per_core is made whole.
enum class VcoreRounding { Down, Nearest, Up };
// Who kills running containers beyond a shrunk node's capacity (docs/yarn.md).
enum class Reclaimer { Khagent, Rm };
const char* vcore_rounding_name(VcoreRounding r);
const char* reclaimer_name(Reclaimer r);
const char* http_auth_name(HttpAuth a);

// The YARN capacity downscaler (docs/yarn.md): keeps the NodeManager's
// advertised resources equal to the offline CPU budget and reclaims running
// containers when the node shrinks.
struct YarnConfig {
  bool enabled = false;
  // ResourceManager web addresses, e.g. http://rm1:8088; several for HA (the
  // active one is followed; a standby's redirect or error moves to the next).
  std::vector<std::string> rm_urls;
  std::string node_id;               // NodeManager id host:port; "" = find by this host's name
  std::string nm_url;                // NodeManager web address; "" = the node's nodeHTTPAddress
  HttpAuth auth = HttpAuth::Simple;  // none | simple (user.name=) | kerberos (SPNEGO)
  std::string user = "khagent";      // user.name for simple auth
  std::string ca_file;               // PEM bundle for https; "" = the system CAs
  bool insecure_skip_verify = false;
  uint64_t request_timeout_ms = 5000;
  uint64_t connect_timeout_ms = 2000;
  uint32_t retries = 2;                          // per request, after the first try
  uint64_t retry_backoff_ms = 500;               // doubled each retry
  uint64_t refresh_interval_ns = 5'000'000'000;  // containers and node state re-read

  // Capacity: vcores = round(budget_cores * vcores_per_core) - reserve_vcores,
  // clamped to [min_vcores, the NodeManager's configured vcores].
  double vcores_per_core = 1.0;
  VcoreRounding rounding = VcoreRounding::Down;
  int64_t reserve_vcores = 0;
  int64_t min_vcores = 1;
  // Memory: 0 = advertise the NodeManager's configured memory; > 0 = this many MB
  // (capped at the configured memory); memory_follows_cpu scales the memory with
  // the vcores instead.
  int64_t memory_mb = 0;
  bool memory_follows_cpu = false;
  // Never advertise more memory than the memory lever's offline budget
  // (MemoryConfig; nothing when the lever is off).
  bool memory_follows_budget = true;
  int64_t deadband_vcores = 1;                 // smaller changes are not posted
  uint64_t grow_stable_ns = 30'000'000'000;    // budget above the advertised value this long
  uint64_t grow_interval_ns = 60'000'000'000;  // at most one grow per interval
  // Only with reclaimer "rm": the overCommitTimeout posted, after which the
  // RM kills containers of the over-committed node itself.
  int64_t over_commit_timeout_ms = 180'000;
  // Other resource types (GPUs...) on the node: the RM's update-resource
  // REST call sets them to 0 (Hadoop up to 3.5.0 at least), so such a node is
  // not resized unless this says the RM keeps them (docs/yarn.md).
  bool resize_with_other_resources = false;

  // Reclaim of running containers beyond the new capacity. Exactly one side
  // reclaims (docs/yarn.md): "khagent" posts overCommitTimeout -1 (the RM
  // never kills for the update) and kills its own ranked victims after
  // reclaim_grace; "rm" posts over_commit_timeout and leaves the killing to
  // the RM (Hadoop 3.3 and later; older RMs then reclaim nothing).
  Reclaimer reclaimer = Reclaimer::Khagent;
  bool reclaim = true;
  uint64_t reclaim_grace_ns = 180'000'000'000;  // wait this long before killing locally
  std::map<std::string, int> queue_priority;    // queue -> priority; higher is kept longer; default 0
  bool emergency = false;                       // skip the grace for the worst offender when...
  double emergency_p99_factor = 4.0;            // ...an online pod's p99 is over factor * target
  // The memory lever's last resort: while the node's memory is critical
  // (less than half the memory reserve free above the eviction threshold),
  // the highest-ranked container that holds memory is killed at once, at
  // most one every 2 s, before the kernel or the kubelet takes an online pod.
  bool memory_emergency = true;
};

// The overCommitTimeout to post: -1 when khagent reclaims, else the RM's grace.
inline int64_t yarn_posted_over_commit_timeout(const YarnConfig& y) {
  return y.reclaimer == Reclaimer::Rm ? y.over_commit_timeout_ms : -1;
}

// Block IO (docs/controller.md, "IO"): measured and explained; no IO
// lever is written yet.
struct IoConfig {
  bool enabled = true;
  // An online pod whose tasks stalled on IO ("some" in io.pressure) more
  // than this share of a tick is stalled: the offline cgroup that moved
  // the most bytes on its devices is named.
  double stall_limit = 0.1;
  // The IO limit (io.max; cgroup v2 only: v1 blk-throttle is flat) on the
  // offline cgroup named, for the device the stalled pod used: first at
  // limit_step of what that cgroup moved in the tick (bytes and IOs per
  // second, read and write, each it used), then limit_step of the last
  // limit while the pod still stalls, never under min_bps and min_iops.
  bool limit = true;
  double limit_step = 0.5;
  uint64_t min_bps = 1ULL << 20;
  uint64_t min_iops = 16;
  // Each step is judged verdict_after it: it helped when the pod's stall
  // fell to io.stall_limit or by a quarter; otherwise the limit is lifted
  // and that cgroup is not limited on that device for hold_off.
  uint64_t verdict_after_ns = 2'000'000'000ULL;
  uint64_t hold_off_ns = 60'000'000'000ULL;
  // Once every online pod on the device stalled under half of
  // io.stall_limit for calm_after, the limit is raised by 1/limit_step,
  // step by step, and lifted once it is above what the cgroup moved before
  // the first step.
  uint64_t calm_after_ns = 10'000'000'000ULL;
};

// How the offline budget is split between the YARN NodeManager and
// Kubernetes batch pods (docs/capacity.md).
enum class CapacitySplitRule { Fixed, Usage };
const char* capacity_split_name(CapacitySplitRule r);

// Offline capacity published to Kubernetes (docs/capacity.md): the share
// of the offline budget that batch pods may request, as the node's
// kubernetes.io/batch-cpu (milli-cores) and kubernetes.io/batch-memory
// (bytes) extended resources, patched into nodes/NAME/status.
struct CapacityConfig {
  bool enabled = false;
  // The API server, e.g. https://10.96.0.1:443; "" = the in-cluster address
  // (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT).
  std::string api_server;
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::string node_name;  // "" = the node's name (--node-name, NODE_NAME, the hostname)
  // fixed: batch pods get batch_share of the budget; usage: the budget is
  // split in proportion to what each side uses, each keeping min_share.
  // Without YARN, batch pods get the whole budget.
  CapacitySplitRule split = CapacitySplitRule::Fixed;
  double batch_share = 0.5;
  double min_share = 0.2;
  // While no online pod's wait is over its target, batch never gets less
  // than this (within the budget): a published 0 makes batch pods pending
  // and evictable although online is fine.
  double floor_cores = 0.5;
  uint64_t floor_memory_bytes = uint64_t{512} << 20;
  // A value moves only when it differs from the published one by more than
  // this share of it (hysteresis); a lower value is published at once, a
  // higher one after grow_stable above, at most once per grow_interval.
  double deadband = 0.2;
  uint64_t grow_stable_ns = 30'000'000'000;
  uint64_t grow_interval_ns = 60'000'000'000;
  // The node is re-read this often; a value zeroed or removed (the kubelet
  // does so when the node registers again) is published again.
  uint64_t reassert_interval_ns = 30'000'000'000;
  // An offer older than this (the control loop stopped deciding) is stale:
  // the last published value stays, and the log and status say so.
  uint64_t stale_after_ns = 10'000'000'000;
  uint64_t request_timeout_ms = 5000;
};

struct Config {
  uint64_t tick_ns = 200'000'000;
  bool dry_run = false;
  std::string state_file = "/var/lib/khagent/state.json";
  std::string kubelet_pods_url;  // e.g. https://127.0.0.1:10250/pods; "" = not used
  std::string kubelet_token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string kubelet_ca_file;                // "" = the system CAs
  bool kubelet_insecure_skip_verify = false;  // the kubelet's self-signed serving cert
  ClassConfig classes;
  OnlineConfig online;
  BudgetConfig budget;
  CpusetConfig cpuset;
  OfflineConfig offline;
  FastPathConfig fast_path;
  LadderConfig ladder;
  MemoryConfig memory;
  YarnConfig yarn;
  CapacityConfig capacity;
  IoConfig io;
};

// The built-in defaults (what runs without a file).
Config default_config();

// Who this node is, for per-node overrides.
struct NodeIdentity {
  std::string name;
  std::map<std::string, std::string> labels;
};

// Loads YAML text (`source` names it in errors) over the defaults, applying
// the per-node overrides that match `node`. Unknown keys, wrong types and
// impossible values are errors naming the file, the key and the problem.
Result<Config> load_config_text(const std::string& text, const std::string& source, const NodeIdentity& node);
Result<Config> load_config_file(const std::string& path, const NodeIdentity& node);
// What load_config_file does with the text it read: bounds the size (1 MiB),
// the YAML aliases, the entries of `nodes` and the work of merging the ones
// that apply, before any node tree is built, then load_config_text. For
// text from outside (a file, a ConfigMap).
Result<Config> load_config_bounded(const std::string& text, const std::string& source, const NodeIdentity& node);

// Checks cross-field constraints (floor <= ceiling inputs, factors in range, ...).
Result<void> validate_config(const Config& c);

// The effective configuration as YAML (logged at start, `config check`).
std::string config_to_yaml(const Config& c);

}  // namespace khagent
