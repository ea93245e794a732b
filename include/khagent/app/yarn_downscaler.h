// The YARN capacity downscaler: keeps the NodeManager's advertised resources
// equal to what khagent leaves offline work, and reclaims running containers
// when the node shrinks. It runs on its own thread: the control loop only
// offers the latest budget (never blocks), so an unreachable or slow
// ResourceManager never delays cgroup actions.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "khagent/actuate/cgroup_kill.h"
#include "khagent/actuate/yarn_resize.h"
#include "khagent/collect/yarn_rest.h"
#include "khagent/config/config.h"
#include "khagent/policy/yarn.h"
#include "khagent/util/http_client.h"

namespace khagent {

// What the control loop hands over each tick.
struct YarnOffer {
  uint64_t now_ns = 0;      // monotonic
  double budget_cores = 0;  // the offline CPU budget just decided
  bool emergency = false;   // an online pod's p99 is over emergency_p99_factor * target
  struct Container {
    std::string path;              // cgroup path relative to the cgroup2 mount
    uint64_t caused_total_ns = 0;  // online wait it caused since khagent started
  };
  std::map<std::string, Container> containers;  // container_<id> -> what BPF saw
};

// The largest resources the NodeManager was ever seen to have, kept across
// restarts in <state_file>.yarn: an update through the RM reaches the
// NodeManager on its next heartbeat and changes what /ws/v1/node/info
// reports, so after a shrink the NodeManager's own figures are the shrunk
// ones.
struct YarnMaxRecord {
  std::string node_id;
  YarnResource max;
  std::map<std::string, int64_t> others;  // other resource types (GPUs...), from the RM
};

// Parses the record ({"node_id":"h:8041","vcores":8,"memory_mb":16384,
// "others":{"yarn.io/gpu":4}}), checking it as if the NodeManager had just
// said it. Errors: the text is not a small JSON object (64 KiB, 4 levels,
// 4096 values; E2BIG or EINVAL),
// a field is missing or not an integer (EINVAL), the node id is not
// printable or a number is out of range (ERANGE).
Result<YarnMaxRecord> parse_yarn_max_record(const std::string& text);

class YarnDownscaler {
 public:
  // `cgroup_mount` is where container cgroups are killed. `hostnames` are
  // matched against the RM's node list when yarn.node_id is not set.
  // `max_file` keeps the most the NodeManager was ever seen with across
  // restarts ("" = not kept): after a shrink through the RM, the
  // NodeManager itself reports the shrunk size.
  YarnDownscaler(YarnConfig cfg, bool dry_run, std::string cgroup_mount,
                 std::vector<std::string> hostnames, std::string max_file = "");
  ~YarnDownscaler();
  YarnDownscaler(const YarnDownscaler&) = delete;
  YarnDownscaler& operator=(const YarnDownscaler&) = delete;

  // Starts the worker thread.
  void start();
  // Keeps only the latest offer and wakes the worker; never blocks on I/O.
  void offer(YarnOffer o);
  // Stops the worker (an in-flight request is aborted). With `restore`, the
  // node's configured resources are posted back first (not in dry-run), so
  // YARN is not left believing the node is small. Idempotent.
  void stop(bool restore);
  YarnStatus status() const;

  // How a container's cgroup is killed (default kill_cgroup). For tests
  // whose containers have no cgroup; call before start().
  using KillFn = std::function<Result<CgroupKillResult>(const std::string& mount, const std::string& rel)>;
  void set_killer(KillFn kill) { kill_ = std::move(kill); }

  // One round of work, synchronously, on the calling thread (tests, and the
  // worker itself): find the node, refresh the inventory when due, post a
  // capacity change, reclaim.
  void round(const YarnOffer& o);

 private:
  void run();
  bool ensure_node();
  bool refresh(uint64_t now_ns, bool force);
  void capacity(const YarnOffer& o);
  // `fresh`: the inventory was just re-read for this decision.
  void reclaim(const YarnOffer& o, bool fresh = false);
  // Why the node must be left alone now ("" = it may be resized): a state in
  // which the RM cannot take an update or overrides it.
  std::string hold_reason() const;
  // Records `what` as the last error and logs it, at most once a minute per
  // `cause` (a fixed name of the step, with the errno `err`), so a failure
  // that repeats every refresh, or two that alternate, do not flood the log.
  void note_error(const std::string& cause, int err, const std::string& what);
  void sync_stats();

  const YarnConfig cfg_;
  const bool dry_run_;
  const std::string mount_;
  const std::vector<std::string> hostnames_;
  const std::string max_file_;
  std::string max_node_;  // the node max_ belongs to
  YarnResource max_;
  std::map<std::string, int64_t> max_others_;  // other resource types, the most seen
  bool posted_ = false;   // a POST was sent (or tried) since start
  std::set<std::string> killed_;                 // killed, still listed by the NM

  std::unique_ptr<HttpClient> rm_;
  std::unique_ptr<HttpClient> nm_;
  std::unique_ptr<YarnRest> rest_;

  // Worker state (only the worker, or round() callers, touch these).
  YarnCapacityState cap_state_;
  ReclaimState reclaim_state_;
  uint64_t last_refresh_ns_ = 0;
  uint64_t post_retry_ns_ = 0;
  uint64_t read_retry_ns_ = 0;                   // no RM/NM reads before this (after a failure)
  std::string post_error_;                       // the last POST's error until one succeeds                   // no POST before this (after a failure)
  std::optional<YarnResource> dry_advertised_;   // dry run: what the RM would have now
  bool have_inventory_ = false;
  std::vector<NmContainer> nm_containers_;
  std::map<std::string, YarnApp> apps_;          // by application id
  // application id -> its latest attempt and AM container. When the RM hides
  // the container (no view access) or cannot be asked, the AM is the first
  // container of that attempt (first_container_of_attempt).
  std::map<std::string, YarnAmAttempt> am_of_app_;
  std::set<std::string> am_guessed_;             // ...taken from the containers seen (RM not asked)
  std::string node_state_;                       // the node's state in the RM at the last refresh
  std::map<std::string, int64_t> others_now_;    // its other resource types at the last refresh
  struct PendingPost {
    YarnResource resource;
    uint64_t at_ns = 0;
  };
  // The last update the RM answered 200 to: it applies it asynchronously, so
  // a read soon after can still show the old total (see hold in refresh()).
  std::optional<PendingPost> pending_post_;
  KillFn kill_;
  std::map<std::string, uint64_t> caused_at_refresh_;  // container -> caused_total at last refresh
  std::map<std::string, uint64_t> interference_;       // container -> caused in the last window
  std::map<std::string, uint64_t> kill_tried_ns_;      // container -> last kill attempt
  struct ErrorLog {
    uint64_t last_ns = 0;     // when this cause was last logged
    uint64_t suppressed = 0;  // times it came again since, not logged
  };
  std::map<std::string, ErrorLog> error_log_;  // cause/errno -> its rate limit

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<YarnOffer> pending_;
  YarnStatus status_;
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace khagent
