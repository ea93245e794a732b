// The YARN capacity downscaler: keeps the NodeManager's advertised resources
// equal to what khagent leaves offline work, and reclaims running containers
// when the node shrinks. It runs on its own thread: the control loop only
// offers the latest budget (never blocks), so an unreachable or slow
// ResourceManager never delays cgroup actions. It wires the YARN stages:
// collect/yarn_inventory (the RM's and NM's REST reads), policy/yarn
// (capacity, reclaim order), actuate/yarn_resize, yarn_kill and
// yarn_max_record (the POST, the kills, the saved maximum).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "khagent/actuate/yarn_kill.h"
#include "khagent/actuate/yarn_max_record.h"
#include "khagent/actuate/yarn_resize.h"
#include "khagent/collect/yarn_inventory.h"
#include "khagent/collect/yarn_rest.h"
#include "khagent/config/config.h"
#include "khagent/model/yarn_status.h"
#include "khagent/policy/yarn.h"

namespace khagent {

class YarnDownscaler {
 public:
  // `cgroup_mount` is where container cgroups are killed. `hostnames` are
  // matched against the RM's node list when yarn.node_id is not set.
  // `max_file` keeps the most the NodeManager was ever seen with across
  // restarts ("" = not kept): after a shrink through the RM, the
  // NodeManager itself reports the shrunk size.
  YarnDownscaler(YarnConfig cfg, bool dry_run, std::string cgroup_mount, std::vector<std::string> hostnames,
                 std::string max_file = "");
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
  using KillFn = CgroupKillFn;
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
  // The last guards before the RM: other resource types the RM would zero,
  // a size outside the node's own. Refused: logged, and false.
  bool resize_allowed(const YarnStatus& st, const YarnCapacityDecision& d);
  // Posts `d` to the RM (or logs it, dry run); on failure the policy's state
  // goes back to `before`.
  void post(const YarnOffer& o, const YarnStatus& st, const YarnCapacityDecision& d, const YarnCapacityState& before);
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
  const std::string max_file_;
  YarnMaxRecord max_;             // the most the NodeManager was seen with
  bool posted_ = false;           // a POST was sent (or tried) since start
  std::set<std::string> killed_;  // killed, still listed by the NM
  std::unique_ptr<YarnNodeReader> reader_;

  // Worker state (only the worker, or round() callers, touch these).
  YarnCapacityState cap_state_;
  ReclaimState reclaim_state_;
  uint64_t last_refresh_ns_ = 0;
  uint64_t post_retry_ns_ = 0;                  // no POST before this (after a failure)
  uint64_t read_retry_ns_ = 0;                  // no RM/NM reads before this (after a failure)
  std::string post_error_;                      // the last POST's error until one succeeds
  std::optional<YarnResource> dry_advertised_;  // dry run: what the RM would have now
  bool have_inventory_ = false;
  // The last update the RM answered 200 to (see yarn_settle_post in refresh()).
  std::optional<YarnPendingPost> pending_post_;
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
