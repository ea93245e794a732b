#include "khagent/app/yarn_downscaler.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "khagent/policy/yarn_candidates.h"
#include "khagent/util/clock.h"

namespace khagent {

namespace {

constexpr uint64_t kErrorLogIntervalNs = 60'000'000'000;
constexpr uint64_t kKillRetryNs = 10'000'000'000;
constexpr uint64_t kReadRetryNs = 1'000'000'000;
constexpr size_t kMaxErrorCauses = 64;  // distinct causes remembered for the rate limit

}  // namespace

YarnDownscaler::YarnDownscaler(YarnConfig cfg, bool dry_run, std::string cgroup_mount,
                               std::vector<std::string> hostnames, std::string max_file)
    : cfg_(std::move(cfg)), dry_run_(dry_run), mount_(std::move(cgroup_mount)), max_file_(std::move(max_file)) {
  if (auto rec = load_yarn_max_record(max_file_)) {
    max_ = std::move(*rec);
    spdlog::info("yarn: NodeManager {} had at most {} (from {})", max_.node_id, yarn_resource_str(max_.max), max_file_);
  }
  reader_ = std::make_unique<YarnNodeReader>(
      cfg_, std::move(hostnames),
      [this](const std::string& cause, int err, const std::string& what) { note_error(cause, err, what); }, &stopping_);
  status_.enabled = true;
  status_.dry_run = dry_run_;
  status_.node_id = cfg_.node_id;
  status_.rm = reader_->rm().current();
}

YarnDownscaler::~YarnDownscaler() { stop(false); }

void YarnDownscaler::start() {
  std::lock_guard<std::mutex> lk(mu_);
  if (thread_.joinable() || stopped_) return;
  thread_ = std::thread([this] { run(); });
}

void YarnDownscaler::offer(YarnOffer o) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_ = std::move(o);
  }
  cv_.notify_one();
}

YarnStatus YarnDownscaler::status() const {
  std::lock_guard<std::mutex> lk(mu_);
  return status_;
}

void YarnDownscaler::stop(bool restore) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;  // under the lock: the worker cannot miss the wakeup
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  if (!restore) return;
  YarnStatus st = status();
  if (st.node_id.empty() || !st.configured_known) {
    spdlog::info("yarn: nothing to restore (node or its configured resources unknown)");
    return;
  }
  // The RM's answer to a POST can be its total from before the update, and
  // a cancelled POST may still have been applied: once anything was posted,
  // restore, unless a read after the last POST showed the full size.
  if (!posted_ && st.advertised_known && st.advertised == st.configured) return;
  if (!yarn_resource_sane(st.configured)) {  // not reached: only numbers in range are kept
    spdlog::error("yarn: not restoring {} to {}: out of range", st.node_id, yarn_resource_str(st.configured));
    return;
  }
  if (std::string why = hold_reason(); !why.empty()) {
    spdlog::warn("yarn: not restoring {} to {}: {}", st.node_id, yarn_resource_str(st.configured), why);
    return;
  }
  if (std::string gpus = yarn_nonzero_others(max_.others); !gpus.empty() && !cfg_.resize_with_other_resources) {
    spdlog::warn("yarn: not restoring {} to {}: the update would set {} to 0 (yarn.resize_with_other_resources)",
                 st.node_id, yarn_resource_str(st.configured), gpus);
    return;
  }
  if (dry_run_) {
    spdlog::info("yarn: dry-run: would restore {} to {}", st.node_id, yarn_resource_str(st.configured));
    return;
  }
  // One bounded try, so stopping fits a pod's grace period; the whole
  // vector: memory, vCores and every other type at the most it was seen with.
  restore_node_resource(yarn_client_options(cfg_, cfg_.rm_urls), st.node_id, st.configured, max_.others,
                        yarn_posted_over_commit_timeout(cfg_));
}

std::string YarnDownscaler::hold_reason() const {
  // The RM sets a decommissioning node's total to what its containers hold at
  // every heartbeat (it drains the node): an update would be overwritten at
  // once, and re-posted at every refresh.
  const std::string& node_state = reader_->node_state();
  if (node_state == "DECOMMISSIONING") return "the node is DECOMMISSIONING (the RM sets its total itself)";
  // A node that left is still listed, but the RM answers an update with 500.
  if (yarn_node_gone(node_state)) return "the node is " + node_state + " in the RM";
  return "";
}

void YarnDownscaler::run() {
  spdlog::info("yarn: downscaler started (RMs: {}{})", reader_->rm().current(),
               cfg_.rm_urls.size() > 1 ? " and " + std::to_string(cfg_.rm_urls.size() - 1) + " more" : "");
  std::optional<YarnOffer> last;
  while (!stopping_) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      // Wake on a new offer, or at least once a second to keep the inventory
      // fresh and grace periods running while offers are not coming.
      cv_.wait_for(lk, std::chrono::seconds(1), [this] { return stopping_ || pending_.has_value(); });
      if (stopping_) break;
      if (pending_) {
        last = std::move(pending_);
        pending_.reset();
      }
    }
    if (!last) continue;
    YarnOffer o = *last;
    o.now_ns = std::max(o.now_ns, mono_ns());  // an old offer still lets time pass
    round(o);
  }
}

void YarnDownscaler::note_error(const std::string& cause, int err, const std::string& what) {
  if (stopping_) return;  // requests cut short by stop() are not errors
  {
    std::lock_guard<std::mutex> lk(mu_);
    status_.last_error = what;
  }
  // Details (curl's timings, ports, sizes) vary from one time to the next;
  // the step and the errno do not.
  const std::string key = cause + "/" + std::to_string(err);
  const uint64_t now = mono_ns();
  auto it = error_log_.find(key);
  if (it == error_log_.end()) {
    if (error_log_.size() >= kMaxErrorCauses) error_log_.clear();
    it = error_log_.emplace(key, ErrorLog{}).first;
  } else if (now - it->second.last_ns < kErrorLogIntervalNs) {
    it->second.suppressed++;
    return;
  }
  if (it->second.suppressed > 0) {
    spdlog::warn("yarn: {} ({} more like it in the last {:.0f}s)", what, it->second.suppressed,
                 static_cast<double>(now - it->second.last_ns) / 1e9);
  } else {
    spdlog::warn("yarn: {}", what);
  }
  it->second.last_ns = now;
  it->second.suppressed = 0;
}

void YarnDownscaler::sync_stats() {
  std::lock_guard<std::mutex> lk(mu_);
  HttpClient& rm = reader_->rm();
  status_.rm = rm.current();
  status_.rm_requests = rm.stats().requests;
  status_.rm_failures = rm.stats().failures;
  status_.rm_failovers = rm.stats().failovers;
  if (HttpClient* nm = reader_->nm()) {
    status_.nm_requests = nm->stats().requests;
    status_.nm_failures = nm->stats().failures;
  }
}

bool YarnDownscaler::ensure_node() {
  std::string id;
  {
    std::lock_guard<std::mutex> lk(mu_);
    id = status_.node_id;
  }
  if (!id.empty() && reader_->nm() != nullptr) return true;
  auto node = reader_->locate(id);
  if (!node) return false;
  std::lock_guard<std::mutex> lk(mu_);
  status_.node_id = node->id;
  status_.advertised = node->total;
  status_.advertised_known = true;
  return true;
}

bool YarnDownscaler::refresh(uint64_t now_ns, bool force) {
  if (!force && have_inventory_ && now_ns - last_refresh_ns_ < cfg_.refresh_interval_ns) return true;
  std::string id = status().node_id;

  bool gone = false;
  auto now = reader_->read_node(id, &gone);
  if (!now) {
    if (gone) {  // find it again
      {
        std::lock_guard<std::mutex> lk(mu_);
        status_.node_id.clear();
      }
      have_inventory_ = false;
    }
    return false;
  }
  // The maximum: the most the NodeManager was ever seen with (see YarnMaxRecord).
  // The readers took only numbers in range (collect/yarn_rest.h).
  // Other resource types come from the RM's total (the NodeManager's info
  // lists only their names).
  if (yarn_max_observe(max_, id, now->configured, now->node.other_resources)) {
    save_yarn_max_record(max_file_, max_);
  }
  reader_->update(std::move(now->containers), max_.max);
  const auto& containers = reader_->inventory().containers;
  for (auto k = killed_.begin(); k != killed_.end();) {  // forget kills the NM no longer lists
    bool listed = std::any_of(containers.begin(), containers.end(),
                              [&](const NmContainer& c) { return c.id == *k && nm_container_active(c.state); });
    k = listed ? std::next(k) : killed_.erase(k);
  }
  last_refresh_ns_ = now_ns;
  have_inventory_ = true;
  std::lock_guard<std::mutex> lk(mu_);
  status_.configured = max_.max;
  status_.configured_known = true;
  // In a dry run the RM never got our update: keep showing what it would have.
  // The RM applies an update asynchronously: a read right after it may
  // still show the old total. Until it shows the posted one, or two refresh
  // intervals pass (another writer, or the RM dropped it), the posted total
  // stands.
  YarnResource rm_total = now->node.total;
  // The post as it was before settling (NotYet and Dropped need one).
  const YarnResource posted = pending_post_ ? pending_post_->resource : YarnResource{};
  switch (yarn_settle_post(pending_post_, rm_total, now_ns, cfg_.refresh_interval_ns)) {
    case YarnPostSeen::NotYet:
      spdlog::debug("yarn: the RM still shows {} for {}, posted {}: not applied yet", yarn_resource_str(rm_total), id,
                    yarn_resource_str(posted));
      rm_total = posted;
      break;
    case YarnPostSeen::Dropped:
      spdlog::warn("yarn: the RM shows {} for {} since the update to {}: taking the RM's", yarn_resource_str(rm_total),
                   id, yarn_resource_str(posted));
      break;
    case YarnPostSeen::None:
    case YarnPostSeen::Applied: break;
  }
  status_.advertised = dry_advertised_ ? *dry_advertised_ : rm_total;
  status_.advertised_known = true;
  status_.containers = static_cast<size_t>(std::count_if(
      containers.begin(), containers.end(), [](const NmContainer& c) { return nm_container_active(c.state); }));
  return true;
}

void YarnDownscaler::capacity(const YarnOffer& o) {
  YarnStatus st = status();
  YarnCapacityInput in;
  in.now_ns = o.now_ns;
  in.budget_cores = o.budget_cores;
  if (o.memory_budget_bytes) in.memory_budget_mb = static_cast<int64_t>(*o.memory_budget_bytes >> 20);
  in.configured = st.configured;
  in.known = st.advertised_known;
  in.advertised = st.advertised;
  // After a failed POST, the next try waits a refresh interval (a missing
  // RM permission must not turn into a POST per tick).
  if (o.now_ns < post_retry_ns_) return;
  const YarnCapacityState before = cap_state_;
  YarnCapacityDecision d = yarn_capacity_step(in, cfg_, cap_state_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    status_.target = d.target;
    status_.last_action = yarn_action_name(d.action);
  }
  if (!d.post) return;
  if (resize_allowed(st, d)) post(o, st, d, before);
}

bool YarnDownscaler::resize_allowed(const YarnStatus& st, const YarnCapacityDecision& d) {
  // The RM's update-resource call zeroes every other resource type (up to
  // Hadoop 3.5.0 at least, whatever resourceInformations says): a GPU node
  // would lose its GPUs, and no later update through this API gives them
  // back. Such a node is left alone unless the RM is known to keep them.
  std::string others = yarn_nonzero_others(max_.others);
  if (!others.empty() && !cfg_.resize_with_other_resources) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      status_.last_action = "refused";
    }
    note_error("other resources", EOPNOTSUPP,
               "not resizing " + st.node_id + " to " + yarn_resource_str(d.resource) + ": it has " + others +
                   ", which the RM's update-resource call would set to 0 (set "
                   "yarn.resize_with_other_resources only for an RM that keeps them)");
    return false;
  }
  // The last guard before the RM: nothing outside the node's own size.
  if (!yarn_resource_within(d.resource, st.configured)) {
    note_error("resize range", ERANGE,
               "not resizing " + st.node_id + " to " + yarn_resource_str(d.resource) + ": out of range (node has " +
                   yarn_resource_str(st.configured) + ")");
    return false;
  }
  return true;
}

void YarnDownscaler::post(const YarnOffer& o, const YarnStatus& st, const YarnCapacityDecision& d,
                          const YarnCapacityState& before) {
  if (dry_run_) {
    spdlog::info("yarn: dry-run: would POST {}/ws/v1/cluster/nodes/{}/resource {} ({})", reader_->rm().current(),
                 st.node_id, node_resource_body(d.resource, max_.others, yarn_posted_over_commit_timeout(cfg_)),
                 d.reason);
    std::lock_guard<std::mutex> lk(mu_);
    status_.updates_dry_run++;
    // Dry-run carries on as if the RM had taken it, so later steps show what would follow.
    dry_advertised_ = d.resource;
    status_.advertised = d.resource;
    status_.advertised_known = true;
    return;
  }
  posted_ = true;
  auto r = post_node_resource(reader_->rm(), st.node_id, d.resource, max_.others, yarn_posted_over_commit_timeout(cfg_),
                              &stopping_);
  if (r) {
    post_retry_ns_ = 0;
    post_error_.clear();
    // The RM queues the update and answers with the node's total as it was
    // then, usually from before the update: what was posted stands until a
    // read shows it (pending_post_, see refresh()).
    pending_post_ = YarnPendingPost{d.resource, o.now_ns};
    std::lock_guard<std::mutex> lk(mu_);
    status_.last_error.clear();  // this round's reads went through too
    status_.updates_ok++;
    status_.advertised = d.resource;
    status_.advertised_known = true;
    spdlog::info("yarn: {} {} -> {} ({}); the RM answered with {} (its total before or after the update)",
                 yarn_action_name(d.action), st.node_id, yarn_resource_str(d.resource), d.reason,
                 yarn_resource_str(r.value()));
    return;
  }
  // Not applied: the policy's memory goes back to before this step (a grow
  // that did not happen must not count against the grow interval), and the
  // node is read again before the next try.
  cap_state_ = before;
  post_retry_ns_ = o.now_ns + cfg_.refresh_interval_ns;
  last_refresh_ns_ = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    status_.updates_failed++;
  }
  post_error_ = "resizing " + st.node_id + " to " + yarn_resource_str(d.resource) + ": " + r.error().str();
  note_error("resize", r.error().err, post_error_);
}

void YarnDownscaler::reclaim(const YarnOffer& o, bool fresh) {
  YarnStatus st = status();
  // Interference over the last refresh window, from BPF's running totals
  // (the window already moved for this round when `fresh`).
  if (!fresh) {
    std::map<std::string, uint64_t> caused;
    for (const auto& [id, c] : o.containers) caused[id] = c.caused_total_ns;
    yarn_interference_window(caused, last_refresh_ns_ == o.now_ns, caused_at_refresh_, interference_);
  }

  ReclaimInput in;
  in.now_ns = o.now_ns;
  in.capacity = st.advertised;
  in.emergency = o.emergency;
  in.memory_emergency = o.memory_emergency;
  in.containers = yarn_reclaim_candidates(reader_->inventory(), killed_, cfg_.queue_priority, interference_,
                                          [&](const std::string& id) -> uint64_t {
                                            auto seen = o.containers.find(id);
                                            if (seen == o.containers.end()) return 0;
                                            return cgroup_birth_ms(mount_ + seen->second.path);
                                          });
  // With reclaimer "rm" the RM kills (it got overCommitTimeout): khagent
  // ranks and reports victims but kills none, not even in an emergency, so
  // that no container is killed by both.
  const bool rm_reclaims = cfg_.reclaimer == Reclaimer::Rm;
  YarnConfig rc = cfg_;
  if (rm_reclaims) {
    rc.reclaim = false;
    rc.emergency = false;
  }
  ReclaimDecision d = reclaim_step(in, rc, reclaim_state_);
  if (rm_reclaims && !d.reason.empty()) d.reason += "; the RM reclaims (yarn.reclaimer: rm)";
  // Kill only on a fresh inventory: containers may have ended (or been
  // preempted by the RM) since the last refresh, and fewer may need to go.
  if (!d.kill.empty() && !fresh && last_refresh_ns_ != o.now_ns) {
    if (refresh(o.now_ns, true)) {
      reclaim(o, true);
      return;
    }
    d.kill.clear();  // the reads failed: not now
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    status_.victims = d.victims.size();
  }
  if (!d.reason.empty()) spdlog::debug("yarn: reclaim: {}", d.reason);
  for (auto it = kill_tried_ns_.begin(); it != kill_tried_ns_.end();) {
    if (reclaim_state_.marked_ns.count(it->first)) ++it;
    else it = kill_tried_ns_.erase(it);
  }
  for (const auto& id : d.kill) {
    // A kill that failed is tried again, but not every tick.
    auto tried = kill_tried_ns_.find(id);
    if (tried != kill_tried_ns_.end() && o.now_ns - tried->second < kKillRetryNs) continue;
    kill_tried_ns_[id] = o.now_ns;
    auto seen = o.containers.find(id);
    if (seen == o.containers.end()) {
      spdlog::warn("yarn: {} is over capacity past its grace, but no cgroup of it was seen", id);
      std::lock_guard<std::mutex> lk(mu_);
      status_.kills_failed++;
      continue;
    }
    YarnKillOutcome k = kill_yarn_container(id, mount_, seen->second.path, dry_run_, d.reason, kill_);
    std::lock_guard<std::mutex> lk(mu_);
    switch (k) {
      case YarnKillOutcome::DryRun: status_.kills_dry_run++; break;
      case YarnKillOutcome::Killed:
        status_.kills_ok++;
        reclaim_state_.marked_ns.erase(id);
        kill_tried_ns_.erase(id);
        killed_.insert(id);  // until the NodeManager stops listing it
        if (id == d.memory_urgent) reclaim_state_.memory_kill_ns = o.now_ns;
        break;
      case YarnKillOutcome::Failed: status_.kills_failed++; break;
    }
  }
}

void YarnDownscaler::round(const YarnOffer& o) {
  // After a failed read, the next try waits a second: rounds come every
  // tick, and a failing RM must not get five requests a second.
  if (o.now_ns < read_retry_ns_) {
    sync_stats();
    return;
  }
  bool ok = ensure_node();
  if (ok) {
    bool due = !have_inventory_ || o.now_ns - last_refresh_ns_ >= cfg_.refresh_interval_ns;
    ok = refresh(o.now_ns, !have_inventory_);
    if (ok && due) {  // the reads went through; a failing POST still counts
      std::lock_guard<std::mutex> lk(mu_);
      status_.last_error = post_error_;
    }
  }
  if (!ok) read_retry_ns_ = o.now_ns + kReadRetryNs;
  if (ok) {
    if (std::string why = hold_reason(); !why.empty()) {
      note_error("node state", EAGAIN, "not resizing or reclaiming on " + status().node_id + ": " + why);
      std::lock_guard<std::mutex> lk(mu_);
      status_.last_action = "hold_node_state";
    } else {
      capacity(o);
      reclaim(o);
    }
  }
  sync_stats();
}

}  // namespace khagent
