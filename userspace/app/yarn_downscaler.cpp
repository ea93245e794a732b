#include "khagent/app/yarn_downscaler.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <chrono>
#include <string>
#include <utility>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "khagent/actuate/cgroup_kill.h"
#include "khagent/actuate/yarn_resize.h"
#include "khagent/util/json_bounded.h"

namespace khagent {

namespace {

constexpr uint64_t kErrorLogIntervalNs = 60'000'000'000;
constexpr uint64_t kKillRetryNs = 10'000'000'000;
constexpr uint64_t kReadRetryNs = 1'000'000'000;

std::string res_str(const YarnResource& r) {
  return std::to_string(r.vcores) + " vcores/" + std::to_string(r.memory_mb) + " MB";
}

// "yarn.io/gpu=4, ..." for the types with a value above 0; "" if none.
std::string nonzero_others(const std::map<std::string, int64_t>& others) {
  std::string out;
  for (const auto& [name, value] : others) {
    if (value > 0) out += (out.empty() ? "" : ", ") + name + "=" + std::to_string(value);
  }
  return out;
}

HttpClientOptions client_options(const YarnConfig& c, std::vector<std::string> urls) {
  HttpClientOptions o;
  o.base_urls = std::move(urls);
  o.auth = c.auth == "kerberos" ? HttpAuth::Kerberos : c.auth == "simple" ? HttpAuth::Simple : HttpAuth::None;
  o.user = c.user;
  o.ca_file = c.ca_file;
  o.insecure_skip_verify = c.insecure_skip_verify;
  o.timeout_ms = static_cast<long>(c.request_timeout_ms);
  o.connect_timeout_ms = static_cast<long>(c.connect_timeout_ms);
  o.retries = c.retries;
  o.retry_backoff_ms = static_cast<long>(c.retry_backoff_ms);
  return o;
}

// Epoch ms of the cgroup's creation: cgroupfs keeps a directory's mtime at
// its creation (adding processes or children does not change it), and the
// NodeManager creates the cgroup when it launches the container.
uint64_t cgroup_birth_ms(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000 +
         static_cast<uint64_t>(st.st_mtim.tv_nsec) / 1'000'000;
}

constexpr int64_t kMaxOtherResource = 1'000'000'000'000;

// A NodeManager id as the RM writes it (host:port): printable, no spaces.
bool plausible_node_id(const std::string& id) {
  if (id.empty() || id.size() > 1024) return false;
  return std::all_of(id.begin(), id.end(), [](char ch) {
    auto c = static_cast<unsigned char>(ch);
    return c > 0x20 && c < 0x7f;
  });
}

constexpr size_t kMaxRecordBytes = 64 * 1024;  // a record is ~80 bytes

// Reads the record back (see parse_yarn_max_record); a missing or bad file
// is no record.
std::optional<YarnMaxRecord> load_max(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text(kMaxRecordBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  auto rec = parse_yarn_max_record(text);
  if (!rec) {
    spdlog::warn("yarn: ignoring {}: {}", path, rec.error().message);
    return std::nullopt;
  }
  return std::move(rec).value();
}

void save_max(const std::string& path, const YarnMaxRecord& r) {
  if (path.empty()) return;
  if (!yarn_resource_sane(r.max) || !plausible_node_id(r.node_id)) {  // the readers refuse these already
    spdlog::error("yarn: not saving {} with {} vcores/{} MB to {}: out of range", r.node_id, r.max.vcores,
                  r.max.memory_mb, path);
    return;
  }
  nlohmann::json j = {{"node_id", r.node_id}, {"vcores", r.max.vcores}, {"memory_mb", r.max.memory_mb}};
  if (!r.others.empty()) j["others"] = r.others;
  std::string tmp = path + ".tmp";
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump() << "\n";
    out.flush();
    if (!out) {
      spdlog::warn("yarn: cannot write {}", tmp);
      return;
    }
  }
  int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) spdlog::warn("yarn: cannot rename {} to {}", tmp, path);
}

constexpr size_t kMaxErrorCauses = 64;  // distinct causes remembered for the rate limit

uint64_t mono_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

// Checked as if the NodeManager had just said it: a bad value saved by an
// older version (or a hand edit) must not become the size the node is
// restored to.
Result<YarnMaxRecord> parse_yarn_max_record(const std::string& text) {
  auto parsed = parse_json_bounded(text, JsonLimits{kMaxRecordBytes, 4, 4096});
  if (!parsed) return parsed.error();
  const nlohmann::json& j = parsed.value();
  auto field = [&j](const char* k) -> const nlohmann::json* {
    auto it = j.is_object() ? j.find(k) : j.end();
    return it == j.end() ? nullptr : &*it;
  };
  const auto* id = field("node_id");
  const auto* vc = field("vcores");
  const auto* mb = field("memory_mb");
  if (id == nullptr || !id->is_string() || vc == nullptr || !vc->is_number_integer() || mb == nullptr ||
      !mb->is_number_integer()) {
    return make_error(EINVAL, "not a resource record");
  }
  auto v = json_int_in_range(*vc, 0, kYarnMaxVcores);
  auto m = json_int_in_range(*mb, 0, kYarnMaxMemoryMb);
  if (!plausible_node_id(id->get<std::string>()) || !v || !m) {
    return make_error(ERANGE, fmt::format("node {} with {} vcores/{} MB is out of range (at most {} vcores/{} MB)",
                                          id->dump(), vc->dump(), mb->dump(), kYarnMaxVcores, kYarnMaxMemoryMb));
  }
  YarnMaxRecord rec{id->get<std::string>(), {*v, *m}, {}};
  if (const auto* others = field("others"); others != nullptr && others->is_object()) {
    for (const auto& [name, value] : others->items()) {
      auto n = json_int_in_range(value, 0, kMaxOtherResource);
      if (!n || name.empty() || name.size() > 256)
        return make_error(ERANGE, fmt::format("resource type {} is out of range", nlohmann::json(name).dump()));
      rec.others[name] = *n;
    }
  }
  return rec;
}

YarnDownscaler::YarnDownscaler(YarnConfig cfg, bool dry_run, std::string cgroup_mount,
                               std::vector<std::string> hostnames, std::string max_file)
    : cfg_(std::move(cfg)),
      dry_run_(dry_run),
      mount_(std::move(cgroup_mount)),
      hostnames_(std::move(hostnames)),
      max_file_(std::move(max_file)) {
  if (auto rec = load_max(max_file_)) {
    max_node_ = rec->node_id;
    max_ = rec->max;
    max_others_ = rec->others;
    spdlog::info("yarn: NodeManager {} had at most {} (from {})", max_node_, res_str(max_), max_file_);
  }
  rm_ = std::make_unique<HttpClient>(client_options(cfg_, cfg_.rm_urls));
  if (!cfg_.nm_url.empty()) {
    nm_ = std::make_unique<HttpClient>(client_options(cfg_, {cfg_.nm_url}));
    rest_ = std::make_unique<YarnRest>(*rm_, *nm_);
  }
  status_.enabled = true;
  status_.dry_run = dry_run_;
  status_.node_id = cfg_.node_id;
  status_.rm = rm_->current();
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
    spdlog::error("yarn: not restoring {} to {}: out of range", st.node_id, res_str(st.configured));
    return;
  }
  if (std::string why = hold_reason(); !why.empty()) {
    spdlog::warn("yarn: not restoring {} to {}: {}", st.node_id, res_str(st.configured), why);
    return;
  }
  if (std::string gpus = nonzero_others(max_others_); !gpus.empty() && !cfg_.resize_with_other_resources) {
    spdlog::warn("yarn: not restoring {} to {}: the update would set {} to 0 (yarn.resize_with_other_resources)",
                 st.node_id, res_str(st.configured), gpus);
    return;
  }
  if (dry_run_) {
    spdlog::info("yarn: dry-run: would restore {} to {}", st.node_id, res_str(st.configured));
    return;
  }
  // One bounded try (no retry rounds), so stopping fits a pod's grace period.
  HttpClientOptions ro = client_options(cfg_, cfg_.rm_urls);
  ro.retries = 0;
  ro.timeout_ms = std::min<long>(ro.timeout_ms, 5000);
  ro.connect_timeout_ms = std::min(ro.connect_timeout_ms, ro.timeout_ms);
  HttpClient restore_client(ro);
  std::atomic<bool> no_abort{false};
  // The whole vector: memory, vCores and every other type at the most it was
  // seen with (an RM that reads resourceInformations gets them all back).
  auto r = post_node_resource(restore_client, st.node_id, st.configured, max_others_,
                              yarn_posted_over_commit_timeout(cfg_), &no_abort);
  if (r) {
    spdlog::info("yarn: restored {} to its configured {}{} (the RM answered with {}, its total before or "
                 "after the update)",
                 st.node_id, res_str(st.configured),
                 max_others_.empty() ? "" : " and " + std::to_string(max_others_.size()) + " other resource types",
                 res_str(r.value()));
  } else {
    spdlog::error("yarn: could not restore {} to {}: {}", st.node_id, res_str(st.configured),
                  r.error().str());
  }
}

std::string YarnDownscaler::hold_reason() const {
  // The RM sets a decommissioning node's total to what its containers hold at
  // every heartbeat (it drains the node): an update would be overwritten at
  // once, and re-posted at every refresh.
  if (node_state_ == "DECOMMISSIONING") return "the node is DECOMMISSIONING (the RM sets its total itself)";
  // A node that left is still listed, but the RM answers an update with 500.
  if (yarn_node_gone(node_state_)) return "the node is " + node_state_ + " in the RM";
  return "";
}

void YarnDownscaler::run() {
  spdlog::info("yarn: downscaler started (RMs: {}{})", rm_->current(),
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
  status_.rm = rm_->current();
  status_.rm_requests = rm_->stats().requests;
  status_.rm_failures = rm_->stats().failures;
  status_.rm_failovers = rm_->stats().failovers;
  if (nm_) {
    status_.nm_requests = nm_->stats().requests;
    status_.nm_failures = nm_->stats().failures;
  }
}

bool YarnDownscaler::ensure_node() {
  std::string id;
  {
    std::lock_guard<std::mutex> lk(mu_);
    id = status_.node_id;
  }
  if (!id.empty() && nm_) return true;
  YarnNodeReport node;
  if (id.empty()) {
    auto nodes = YarnRest(*rm_, *rm_).nodes(&stopping_);
    if (!nodes) {
      note_error("node list", nodes.error().err, "node list from the RM: " + nodes.error().str());
      return false;
    }
    auto m = match_node(nodes.value(), hostnames_);
    if (!m) {
      note_error("match node", m.error().err, m.error().message);
      return false;
    }
    node = m.value();
    if (!node.invalid.empty()) {
      note_error("node numbers", ERANGE, "node list from the RM: " + node.invalid + "; skipped");
      return false;
    }
    spdlog::info("yarn: this node is NodeManager {} (host {}, web {}) by its host name", node.id,
                 node.host, node.http_address);
  } else {
    auto n = YarnRest(*rm_, *rm_).node(id, &stopping_);
    if (!n) {
      note_error("node", n.error().err, "node " + id + " from the RM: " + n.error().str());
      return false;
    }
    node = n.value();
  }
  if (!nm_) {
    if (node.http_address.empty()) {
      note_error("nm address", 0,
                 "the RM gives no web address for NodeManager " + node.id + " (state " + node.state +
                     "); set yarn.nm_url");
      return false;
    }
    // The address goes into a URL as it is: only a plain host:port, so an
    // RM (or whoever answers in its name) cannot point the requests at
    // another path, user or host ("h:1/../x?", "a@b:1").
    if (!yarn_http_address_ok(node.http_address)) {
      note_error("nm address", EINVAL,
                 "the RM gives NodeManager " + node.id + " the web address " +
                     nlohmann::json(node.http_address).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) +
                     ", which is not a plain host:port; set yarn.nm_url");
      return false;
    }
    // The NodeManager's web UI uses the same scheme as the RM's.
    std::string scheme = rm_->current().rfind("https://", 0) == 0 ? "https://" : "http://";
    nm_ = std::make_unique<HttpClient>(client_options(cfg_, {scheme + node.http_address}));
    rest_ = std::make_unique<YarnRest>(*rm_, *nm_);
    spdlog::info("yarn: NodeManager web address {}", nm_->current());
  }
  std::lock_guard<std::mutex> lk(mu_);
  status_.node_id = node.id;
  status_.advertised = node.total;
  status_.advertised_known = true;
  return true;
}

bool YarnDownscaler::refresh(uint64_t now_ns, bool force) {
  if (!force && have_inventory_ && now_ns - last_refresh_ns_ < cfg_.refresh_interval_ns) return true;
  std::string id = status().node_id;

  auto configured = rest_->nm_configured(&stopping_);
  if (!configured) {
    note_error("nm info", configured.error().err, "NodeManager resources: " + configured.error().str());
    return false;
  }
  auto node = rest_->node(id, &stopping_);
  bool gone = !node && node.error().err == ENOENT;
  gone = gone || (node && yarn_node_gone(node.value().state));
  if (gone && cfg_.node_id.empty()) {
    // The NodeManager restarted (a new port) or left: find it again.
    spdlog::warn("yarn: NodeManager {} is {} in the RM; looking for this host's NodeManager again", id,
                 node ? node.value().state : "unknown");
    {
      std::lock_guard<std::mutex> lk(mu_);
      status_.node_id.clear();
    }
    rest_.reset();
    nm_.reset();
    have_inventory_ = false;
    return false;
  }
  if (!node) {
    note_error("node", node.error().err, "node " + id + " from the RM: " + node.error().str());
    return false;
  }
  if (node.value().state != node_state_) {
    spdlog::info("yarn: node {} is {} in the RM", id, node.value().state.empty() ? "?" : node.value().state);
  }
  node_state_ = node.value().state;
  others_now_ = node.value().other_resources;
  auto containers = rest_->containers(&stopping_);
  if (!containers) {
    note_error("nm containers", containers.error().err, "NodeManager containers: " + containers.error().str());
    return false;
  }
  // The maximum: the most the NodeManager was ever seen with (see YarnMaxRecord).
  // The readers took only numbers in range (collect/yarn_rest.h).
  // Other resource types come from the RM's total (the NodeManager's info
  // lists only their names).
  YarnResource seen_now = configured.value();
  if (max_node_ != id) {
    max_node_ = id;
    max_ = seen_now;
    max_others_ = others_now_;
    save_max(max_file_, {max_node_, max_, max_others_});
  } else {
    bool grew = seen_now.vcores > max_.vcores || seen_now.memory_mb > max_.memory_mb;
    max_ = {std::max(max_.vcores, seen_now.vcores), std::max(max_.memory_mb, seen_now.memory_mb)};
    for (const auto& [name, value] : others_now_) {
      auto it = max_others_.find(name);
      if (it == max_others_.end() || value > it->second) {
        max_others_[name] = value;
        grew = true;
      }
    }
    if (grew) save_max(max_file_, {max_node_, max_, max_others_});
  }
  // A container with numbers out of range, or larger than the node itself,
  // is left out (neither counted nor killed): what it says cannot be used.
  {
    std::vector<NmContainer> usable;
    usable.reserve(containers.value().size());
    size_t skipped = 0;
    std::string first;
    for (auto& c : containers.value()) {
      std::string why = c.invalid;
      if (why.empty() && !yarn_resource_within(c.resource, max_)) {
        why = "container " + c.id + ": " + res_str(c.resource) + " is more than the node's " + res_str(max_);
      }
      if (!why.empty()) {
        if (skipped++ == 0) first = why;
        continue;
      }
      usable.push_back(std::move(c));
    }
    if (skipped > 0) {
      note_error("container numbers", ERANGE,
                 "NodeManager containers: " + std::to_string(skipped) +
                     " skipped for resources out of range, first: " + first);
    }
    containers.value() = std::move(usable);
  }
  // Queues only order the reclaim: without them (a slow or huge answer),
  // the last known ones are used and everything else goes on.
  std::map<std::string, YarnApp> by_id = apps_;
  auto apps = rest_->running_apps(&stopping_);
  if (apps) {
    by_id.clear();
    size_t invalid = 0;
    std::string first;
    for (auto& a : apps.value()) {
      if (!a.invalid.empty()) {  // its queue is then unknown
        if (invalid++ == 0) first = a.invalid;
        continue;
      }
      by_id[a.id] = std::move(a);
    }
    if (invalid > 0) {
      note_error("app numbers", ERANGE,
                 "running applications from the RM: " + std::to_string(invalid) +
                     " skipped for numbers out of range, first: " + first);
    }
  } else {
    note_error("apps", apps.error().err, "running applications from the RM: " + apps.error().str());
  }
  // The AM of each application with a container here: the latest attempt
  // and its container, looked up once per application and again when a
  // container of a later attempt shows up (a new attempt has a new AM).
  // Without view access the RM shows the attempt but not its container, and
  // when it cannot be asked the attempt is the latest one seen here: the AM
  // is then that attempt's first container (see reclaim()).
  std::map<std::string, YarnAmAttempt> am;
  std::set<std::string> guessed;  // the RM could not be asked: ask again next time
  std::map<std::string, int> attempt;
  for (const auto& c : containers.value()) {
    std::string app = app_of_container(c.id);
    if (!app.empty()) attempt[app] = std::max(attempt[app], attempt_of_container(c.id));
  }
  for (const auto& [app, latest] : attempt) {
    auto it = am_of_app_.find(app);
    if (it != am_of_app_.end() && it->second.attempt >= latest && am_guessed_.count(app) == 0) {
      am[app] = it->second;
      continue;
    }
    auto a = rest_->am_attempt(app, &stopping_);
    if (a && a.value().attempt >= latest) {
      am[app] = a.value();
      if (a.value().container.empty()) {
        spdlog::debug("yarn: the RM hides the AM container of {} (no view access?): taking the first "
                      "container of attempt {}",
                      app, a.value().attempt);
      }
    } else {
      if (!a) spdlog::debug("yarn: AM container of {}: {}", app, a.error().str());
      am[app] = YarnAmAttempt{latest, ""};
      guessed.insert(app);
    }
  }
  nm_containers_ = std::move(containers.value());
  apps_ = std::move(by_id);
  am_of_app_ = std::move(am);
  am_guessed_ = std::move(guessed);
  for (auto k = killed_.begin(); k != killed_.end();) {  // forget kills the NM no longer lists
    bool listed = std::any_of(nm_containers_.begin(), nm_containers_.end(),
                              [&](const NmContainer& c) { return c.id == *k && nm_container_active(c.state); });
    k = listed ? std::next(k) : killed_.erase(k);
  }
  last_refresh_ns_ = now_ns;
  have_inventory_ = true;
  std::lock_guard<std::mutex> lk(mu_);
  status_.configured = max_;
  status_.configured_known = true;
  // In a dry run the RM never got our update: keep showing what it would have.
  YarnResource rm_total = node.value().total;
  if (pending_post_) {
    // The RM applies an update asynchronously: a read right after it may
    // still show the old total. Until it shows the posted one, or two
    // refresh intervals pass (another writer, or the RM dropped it), the
    // posted total stands.
    if (rm_total == pending_post_->resource) {
      pending_post_.reset();
    } else if (now_ns - pending_post_->at_ns < 2 * cfg_.refresh_interval_ns) {
      spdlog::debug("yarn: the RM still shows {} for {}, posted {}: not applied yet", res_str(rm_total), id,
                    res_str(pending_post_->resource));
      rm_total = pending_post_->resource;
    } else {
      spdlog::warn("yarn: the RM shows {} for {} since the update to {}: taking the RM's", res_str(rm_total),
                   id, res_str(pending_post_->resource));
      pending_post_.reset();
    }
  }
  status_.advertised = dry_advertised_ ? *dry_advertised_ : rm_total;
  status_.advertised_known = true;
  status_.containers = static_cast<size_t>(std::count_if(
      nm_containers_.begin(), nm_containers_.end(), [](const NmContainer& c) { return nm_container_active(c.state); }));
  return true;
}

void YarnDownscaler::capacity(const YarnOffer& o) {
  YarnStatus st = status();
  YarnCapacityInput in;
  in.now_ns = o.now_ns;
  in.budget_cores = o.budget_cores;
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
  // The RM's update-resource call zeroes every other resource type (up to
  // Hadoop 3.5.0 at least, whatever resourceInformations says): a GPU node
  // would lose its GPUs, and no later update through this API gives them
  // back. Such a node is left alone unless the RM is known to keep them.
  if (std::string others = nonzero_others(max_others_); !others.empty() && !cfg_.resize_with_other_resources) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      status_.last_action = "refused";
    }
    note_error("other resources", EOPNOTSUPP,
               "not resizing " + st.node_id + " to " + res_str(d.resource) + ": it has " + others +
                   ", which the RM's update-resource call would set to 0 (set "
                   "yarn.resize_with_other_resources only for an RM that keeps them)");
    return;
  }
  // The last guard before the RM: nothing outside the node's own size.
  if (!yarn_resource_within(d.resource, st.configured)) {
    note_error("resize range", ERANGE,
               "not resizing " + st.node_id + " to " + res_str(d.resource) + ": out of range (node has " +
                   res_str(st.configured) + ")");
    return;
  }
  if (dry_run_) {
    spdlog::info("yarn: dry-run: would POST {}/ws/v1/cluster/nodes/{}/resource {} ({})", rm_->current(),
                 st.node_id, node_resource_body(d.resource, max_others_, yarn_posted_over_commit_timeout(cfg_)),
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
  auto r = post_node_resource(*rm_, st.node_id, d.resource, max_others_, yarn_posted_over_commit_timeout(cfg_),
                              &stopping_);
  if (r) {
    post_retry_ns_ = 0;
    post_error_.clear();
    // The RM queues the update and answers with the node's total as it was
    // then, usually from before the update: what was posted stands until a
    // read shows it (pending_post_, see refresh()).
    pending_post_ = PendingPost{d.resource, o.now_ns};
    std::lock_guard<std::mutex> lk(mu_);
    status_.last_error.clear();  // this round's reads went through too
    status_.updates_ok++;
    status_.advertised = d.resource;
    status_.advertised_known = true;
    spdlog::info("yarn: {} {} -> {} ({}); the RM answered with {} (its total before or after the update)",
                 yarn_action_name(d.action), st.node_id, res_str(d.resource), d.reason, res_str(r.value()));
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
  post_error_ = "resizing " + st.node_id + " to " + res_str(d.resource) + ": " + r.error().str();
  note_error("resize", r.error().err, post_error_);
}

void YarnDownscaler::reclaim(const YarnOffer& o, bool fresh) {
  YarnStatus st = status();
  // Interference over the last refresh window, from BPF's running totals
  // (the window already moved for this round when `fresh`).
  for (const auto& [id, c] : o.containers) {
    if (fresh) break;
    auto prev = caused_at_refresh_.find(id);
    if (prev == caused_at_refresh_.end() || last_refresh_ns_ == o.now_ns) {
      uint64_t base = prev == caused_at_refresh_.end() ? c.caused_total_ns : prev->second;
      interference_[id] = c.caused_total_ns >= base ? c.caused_total_ns - base : 0;
      caused_at_refresh_[id] = c.caused_total_ns;
    }
  }

  ReclaimInput in;
  in.now_ns = o.now_ns;
  in.capacity = st.advertised;
  in.emergency = o.emergency;
  for (const auto& c : nm_containers_) {
    if (!nm_container_active(c.state) || killed_.count(c.id)) continue;
    YarnContainerInfo info;
    info.id = c.id;
    info.app_id = app_of_container(c.id);
    if (auto a = apps_.find(info.app_id); a != apps_.end()) info.queue = a->second.queue;
    info.queue_priority = queue_priority_for(info.queue, cfg_.queue_priority);
    if (auto am = am_of_app_.find(info.app_id); am != am_of_app_.end()) {
      info.is_am = am->second.container.empty() ? first_container_of_attempt(c.id, am->second.attempt)
                                                : am->second.container == c.id;
    } else {
      // Not looked up (no attempt read yet): the first container of an attempt.
      info.is_am = first_container_of_attempt(c.id, attempt_of_container(c.id));
    }
    info.resource = c.resource;
    if (auto seen = o.containers.find(c.id); seen != o.containers.end()) {
      info.start_ms = cgroup_birth_ms(mount_ + seen->second.path);
    }
    if (auto i = interference_.find(c.id); i != interference_.end()) info.interference_ns = i->second;
    in.containers.push_back(std::move(info));
  }
  // With reclaimer "rm" the RM kills (it got overCommitTimeout): khagent
  // ranks and reports victims but kills none, not even in an emergency, so
  // that no container is killed by both.
  const bool rm_reclaims = cfg_.reclaimer == "rm";
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
    if (dry_run_) {
      spdlog::info("yarn: dry-run: would kill {} (cgroup {}): {}", id, seen->second.path, d.reason);
      std::lock_guard<std::mutex> lk(mu_);
      status_.kills_dry_run++;
      continue;
    }
    auto k = kill_ ? kill_(mount_, seen->second.path) : kill_cgroup(mount_, seen->second.path);
    std::lock_guard<std::mutex> lk(mu_);
    if (k) {
      status_.kills_ok++;
      spdlog::warn("yarn: killed {} (cgroup {}, {}): {}", id, seen->second.path,
                   k.value().used_cgroup_kill ? "cgroup.kill"
                                              : std::to_string(k.value().signalled) + " processes SIGKILLed",
                   d.reason);
      reclaim_state_.marked_ns.erase(id);
      kill_tried_ns_.erase(id);
      killed_.insert(id);  // until the NodeManager stops listing it
    } else {
      status_.kills_failed++;
      spdlog::error("yarn: killing {} (cgroup {}) failed: {}", id, seen->second.path, k.error().str());
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
