// YARN capacity and container reclaim: pure functions of the offline CPU
// budget, the NodeManager's containers, configuration and previous state.
// No files, no sockets, no clocks (the caller passes `now_ns`).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "khagent/config/config.h"
#include "khagent/model/yarn_resource.h"
#include "khagent/policy/controller.h"
#include "khagent/signals/workload.h"

namespace khagent {

// ---- what the control loop hands over ----------------------------------------

// Why one resource's offline budget is what it is: the ceiling is capacity
// - online - reserve, and the budget is the ceiling less the margin the
// controller holds back (after a breach, or while it grows back). Cores
// for CPU, bytes for memory.
struct BudgetTerms {
  double capacity = 0;  // the node's
  double online = 0;    // what online uses (memory: online and system)
  double reserve = 0;   // kept free (memory: with the kubelet's eviction threshold)
  double margin = 0;    // the ceiling less the budget
  double budget = 0;    // the offline budget
};

// The YARN downscaler's input, offered each tick (and by the fast path with
// a new budget).
struct YarnOffer {
  uint64_t now_ns = 0;                          // monotonic
  double budget_cores = 0;                      // the offline CPU budget just decided
  std::optional<uint64_t> memory_budget_bytes;  // the offline memory budget, if the memory lever has one
  bool emergency = false;                       // an online pod's p99 is over emergency_p99_factor * target
  std::optional<std::string> memory_emergency;  // the node's memory is critical: why
  struct Container {
    std::string path;              // cgroup path relative to the cgroup2 mount
    uint64_t caused_total_ns = 0;  // online wait it caused since khagent started
  };
  std::map<std::string, Container> containers;  // container_<id> -> what BPF saw
  // For the capacity published to Kubernetes (policy/capacity.h).
  std::optional<BudgetTerms> cpu_terms;
  std::optional<BudgetTerms> memory_terms;
  bool online_breach = false;  // an online pod's wait is over its target
};

// What one controller adds to the offer: each field it sets replaces the
// offer's (none: left as it is).
struct OfferPart {
  std::optional<double> budget_cores;
  std::optional<bool> emergency;
  bool memory = false;  // the memory fields below are set (the budget may be none)
  std::optional<uint64_t> memory_budget_bytes;
  std::optional<std::string> memory_emergency;
  std::optional<std::map<std::string, YarnOffer::Container>> containers;
  std::optional<BudgetTerms> cpu_terms;
  std::optional<BudgetTerms> memory_terms;  // set with `memory`
  std::optional<bool> online_breach;
};
void merge_offer(YarnOffer& offer, const OfferPart& part);

// The offer after a tick's decision: its budget, whether a breach (not a
// pod's own quota) is far enough over target to reclaim at once, and each
// YARN container with the online wait it caused.
YarnOffer yarn_offer(const Decision& d, const NodeSignals& node, const Config& cfg, uint64_t now_ns);

// ---- the node's maximum -----------------------------------------------------

// The largest resources the NodeManager was ever seen to have, kept across
// restarts in <state_file>.yarn (actuate/yarn_max_record.h): an update
// through the RM reaches the NodeManager on its next heartbeat and changes
// what /ws/v1/node/info reports, so after a shrink the NodeManager's own
// figures are the shrunk ones.
struct YarnMaxRecord {
  std::string node_id;
  YarnResource max;
  std::map<std::string, int64_t> others;  // other resource types (GPUs...), from the RM
};

// Takes what NodeManager `node_id` reports now (`seen`, and `others` from
// the RM's total) into the record: for another node than the record's, the
// record starts again from these; for the same node, each dimension and
// each other type keeps the most seen. Returns whether the record is to be
// saved (another node, or anything grew).
bool yarn_max_observe(YarnMaxRecord& rec, const std::string& node_id, const YarnResource& seen,
                      const std::map<std::string, int64_t>& others);

// ---- after a POST -------------------------------------------------------------

// The last update the RM answered 200 to. The RM applies it asynchronously,
// so a read soon after can still show the old total.
struct YarnPendingPost {
  YarnResource resource;
  uint64_t at_ns = 0;  // monotonic, when it was posted
};

enum class YarnPostSeen {
  None,     // nothing pending
  Applied,  // the RM shows the posted total: no longer pending
  NotYet,   // not shown yet, within two refresh intervals: the posted total stands
  Dropped,  // not shown for two refresh intervals (another writer, or the RM dropped it): the RM's stands
};

// What a read of the RM's total `rm_total` at `now_ns` says of `pending`,
// which is reset when Applied or Dropped.
YarnPostSeen yarn_settle_post(std::optional<YarnPendingPost>& pending, const YarnResource& rm_total, uint64_t now_ns,
                              uint64_t refresh_interval_ns);

// ---- interference per container ---------------------------------------------

// The online wait each container caused over the last refresh window, from
// BPF's running totals (`caused_total`: container -> ns since khagent
// started). `at_refresh` keeps each container's total at the start of the
// window; a container not seen before starts its window now (0). When
// `window_moved` (a refresh happened this round), every container's window
// is re-taken and restarts; otherwise only new containers are added.
void yarn_interference_window(const std::map<std::string, uint64_t>& caused_total, bool window_moved,
                              std::map<std::string, uint64_t>& at_refresh, std::map<std::string, uint64_t>& window);

// ---- capacity ---------------------------------------------------------------

struct YarnCapacityInput {
  uint64_t now_ns = 0;                      // monotonic
  double budget_cores = 0;                  // the controller's offline CPU budget
  std::optional<int64_t> memory_budget_mb;  // the offline memory budget
  YarnResource configured;                  // the NodeManager's own configured resources (the maximum)
  bool known = false;                       // `advertised` is known (read from the RM or posted by us)
  YarnResource advertised;                  // what the RM currently believes the node has
};

struct YarnCapacityState {
  bool grow_pending = false;
  uint64_t grow_since_ns = 0;   // the target has been above the advertised value since
  int64_t grow_min_vcores = 0;  // lowest target seen since then (what a grow may post)
  uint64_t last_grow_ns = 0;    // 0 = never
};

enum class YarnCapacityAction { Hold, Shrink, Grow, WaitStable, WaitInterval, Deadband, Unknown };
const char* yarn_action_name(YarnCapacityAction a);

struct YarnCapacityDecision {
  YarnResource target;    // what the budget asks for now (after rounding and clamps)
  bool post = false;      // post `resource` to the RM
  YarnResource resource;  // the resource to post when `post`
  YarnCapacityAction action = YarnCapacityAction::Hold;
  std::string reason;  // one line for the log
};

// The budget in vcores/MB: round(budget * vcores_per_core) with the configured
// rounding, minus reserve_vcores, clamped to [min_vcores, configured.vcores];
// memory per YarnConfig (configured, fixed, or scaled with the vcores),
// and with memory_follows_budget never above `memory_budget_mb` (the memory
// lever's offline budget, when there is one).
YarnResource yarn_target(double budget_cores, const YarnResource& configured, const YarnConfig& cfg,
                         std::optional<int64_t> memory_budget_mb = std::nullopt);

// One step: shrink at once (when the target is below the advertised vcores by
// at least the deadband, or the memory must drop); grow only after the target
// stayed above the advertised value for grow_stable_ns, by the lowest target
// seen meanwhile, and at most once per grow_interval_ns. Unknown advertised
// resources: post the target (the first contact). Configured or advertised
// resources that are not yarn_resource_sane: no post (action Unknown).
YarnCapacityDecision yarn_capacity_step(const YarnCapacityInput& in, const YarnConfig& cfg, YarnCapacityState& state);

// ---- reclaim ----------------------------------------------------------------

// A container running on this node, as the reclaim ranking sees it.
struct YarnContainerInfo {
  std::string id;                // container_...
  std::string app_id;            // application_...
  std::string queue;             // "" = unknown
  int queue_priority = 0;        // from YarnConfig::queue_priority (higher: kept longer)
  bool is_am = false;            // the application's ApplicationMaster
  YarnResource resource;         // what it was allocated
  uint64_t start_ms = 0;         // epoch ms when it started; 0 = unknown (ranks as oldest)
  uint64_t interference_ns = 0;  // run-queue wait it caused online pods (recent window)
};

// The priority of an application's queue in `priorities` (yarn.queue_priority;
// 0 when nothing matches). The RM names a queue by its leaf ("low") on some
// schedulers and versions and by its full path ("root.low", the
// CapacityScheduler of Hadoop 3.5.0) on others, and a key may be written
// either way:
//   1. a key equal to the queue;
//   2. the longest key that is a dotted suffix of the queue's path
//      ("low" or "a.low" for "root.a.low");
//   3. a queue given by its leaf name alone: the keys whose last component is
//      that leaf ("root.a.low" for "low"); when several disagree, the lowest
//      priority (reclaimed first: the name does not say which was meant).
int queue_priority_for(const std::string& queue, const std::map<std::string, int>& priorities);

// Reclaim order: lower queue priority first; non-AM before AM; more
// interference first; younger (later start) first; then the container id
// (descending, so a later container of the same application goes first).
// Returns indices into `containers`.
std::vector<size_t> rank_for_reclaim(const std::vector<YarnContainerInfo>& containers);

struct ReclaimInput {
  uint64_t now_ns = 0;
  YarnResource capacity;                        // the advertised (posted) capacity
  std::vector<YarnContainerInfo> containers;    // running on this node
  bool emergency = false;                       // an online pod is far over its target
  std::optional<std::string> memory_emergency;  // the node's memory is critical: why
};

struct ReclaimState {
  std::map<std::string, uint64_t> marked_ns;  // container -> when it was first over capacity
  uint64_t memory_kill_ns = 0;                // the last kill for a memory emergency (set by the caller)
};

struct ReclaimDecision {
  YarnResource used;                 // sum over the containers
  std::vector<std::string> victims;  // in rank order: what must go for used <= capacity
  std::vector<std::string> kill;     // victims whose grace is over (or emergency): kill now
  std::string memory_urgent;         // of `kill`, the one killed for a memory emergency ("" none)
  std::string reason;                // one line for the log; "" when nothing is over
};

// Victims are taken in rank order until the rest fits the capacity in both
// vcores and memory (sums saturate; callers pass sane resources). A victim is marked when first chosen; it is killed
// once it has stayed a victim for reclaim_grace_ns (YARN's own preemption or the job may end it first). Marks of
// containers that are no longer victims are dropped. With cfg.emergency and in.emergency, the highest-ranked victim
// that caused interference is killed without waiting. With
// cfg.memory_emergency and in.memory_emergency, the highest-ranked victim
// that holds memory (or, when the containers fit the capacity, the
// highest-ranked container that does) is killed at once, at most one every
// 2 s after the last (state.memory_kill_ns).
ReclaimDecision reclaim_step(const ReclaimInput& in, const YarnConfig& cfg, ReclaimState& state);

}  // namespace khagent
