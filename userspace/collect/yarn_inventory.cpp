#include "khagent/collect/yarn_inventory.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

namespace khagent {

HttpClientOptions yarn_client_options(const YarnConfig& c, std::vector<std::string> urls) {
  HttpClientOptions o;
  o.base_urls = std::move(urls);
  o.auth = c.auth;
  o.user = c.user;
  o.ca_file = c.ca_file;
  o.insecure_skip_verify = c.insecure_skip_verify;
  o.timeout_ms = static_cast<long>(c.request_timeout_ms);
  o.connect_timeout_ms = static_cast<long>(c.connect_timeout_ms);
  o.retries = c.retries;
  o.retry_backoff_ms = static_cast<long>(c.retry_backoff_ms);
  return o;
}

uint64_t cgroup_birth_ms(const std::string& dir) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000 + static_cast<uint64_t>(st.st_mtim.tv_nsec) / 1'000'000;
}

YarnNodeReader::YarnNodeReader(YarnConfig cfg, std::vector<std::string> hostnames, YarnErrorFn error,
                               const std::atomic<bool>* abort)
    : cfg_(std::move(cfg)), hostnames_(std::move(hostnames)), error_(std::move(error)), abort_(abort) {
  rm_ = std::make_unique<HttpClient>(yarn_client_options(cfg_, cfg_.rm_urls));
  if (!cfg_.nm_url.empty()) open_nm(cfg_.nm_url);
}

void YarnNodeReader::open_nm(const std::string& url) {
  nm_ = std::make_unique<HttpClient>(yarn_client_options(cfg_, {url}));
  rest_ = std::make_unique<YarnRest>(*rm_, *nm_);
}

std::optional<YarnNodeReport> YarnNodeReader::locate(const std::string& id) {
  YarnNodeReport node;
  if (id.empty()) {
    auto nodes = YarnRest(*rm_, *rm_).nodes(abort_);
    if (!nodes) {
      error_("node list", nodes.error().err, "node list from the RM: " + nodes.error().str());
      return std::nullopt;
    }
    auto m = match_node(nodes.value(), hostnames_);
    if (!m) {
      error_("match node", m.error().err, m.error().message);
      return std::nullopt;
    }
    node = m.value();
    if (!node.invalid.empty()) {
      error_("node numbers", ERANGE, "node list from the RM: " + node.invalid + "; skipped");
      return std::nullopt;
    }
    spdlog::info("yarn: this node is NodeManager {} (host {}, web {}) by its host name", node.id, node.host,
                 node.http_address);
  } else {
    auto n = YarnRest(*rm_, *rm_).node(id, abort_);
    if (!n) {
      error_("node", n.error().err, "node " + id + " from the RM: " + n.error().str());
      return std::nullopt;
    }
    node = n.value();
  }
  if (!nm_) {
    if (node.http_address.empty()) {
      error_("nm address", 0,
             "the RM gives no web address for NodeManager " + node.id + " (state " + node.state + "); set yarn.nm_url");
      return std::nullopt;
    }
    // The address goes into a URL as it is: only a plain host:port, so an
    // RM (or whoever answers in its name) cannot point the requests at
    // another path, user or host ("h:1/../x?", "a@b:1").
    if (!yarn_http_address_ok(node.http_address)) {
      error_("nm address", EINVAL,
             "the RM gives NodeManager " + node.id + " the web address " +
                 nlohmann::json(node.http_address).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) +
                 ", which is not a plain host:port; set yarn.nm_url");
      return std::nullopt;
    }
    // The NodeManager's web UI uses the same scheme as the RM's.
    std::string scheme = rm_->current().rfind("https://", 0) == 0 ? "https://" : "http://";
    open_nm(scheme + node.http_address);
    spdlog::info("yarn: NodeManager web address {}", nm_->current());
  }
  return node;
}

std::optional<YarnNodeReader::NodeNow> YarnNodeReader::read_node(const std::string& id, bool* gone) {
  *gone = false;
  auto configured = rest_->nm_configured(abort_);
  if (!configured) {
    error_("nm info", configured.error().err, "NodeManager resources: " + configured.error().str());
    return std::nullopt;
  }
  auto node = rest_->node(id, abort_);
  bool left = !node && node.error().err == ENOENT;
  left = left || (node && yarn_node_gone(node.value().state));
  if (left && cfg_.node_id.empty()) {
    // The NodeManager restarted (a new port) or left: find it again.
    spdlog::warn("yarn: NodeManager {} is {} in the RM; looking for this host's NodeManager again", id,
                 node ? node.value().state : "unknown");
    rest_.reset();
    nm_.reset();
    *gone = true;
    return std::nullopt;
  }
  if (!node) {
    error_("node", node.error().err, "node " + id + " from the RM: " + node.error().str());
    return std::nullopt;
  }
  if (node.value().state != node_state_) {
    spdlog::info("yarn: node {} is {} in the RM", id, node.value().state.empty() ? "?" : node.value().state);
  }
  node_state_ = node.value().state;
  auto containers = rest_->containers(abort_);
  if (!containers) {
    error_("nm containers", containers.error().err, "NodeManager containers: " + containers.error().str());
    return std::nullopt;
  }
  return NodeNow{configured.value(), std::move(node).value(), std::move(containers).value()};
}

namespace {

// The containers whose numbers can be used: in range and within the node; the others reported, not counted.
std::vector<NmContainer> usable_containers(std::vector<NmContainer> containers, const YarnResource& node_max,
                                           const YarnErrorFn& error) {
  std::vector<NmContainer> usable;
  usable.reserve(containers.size());
  size_t skipped = 0;
  std::string first;
  for (auto& c : containers) {
    std::string why = c.invalid;
    if (why.empty() && !yarn_resource_within(c.resource, node_max)) {
      why = "container " + c.id + ": " + yarn_resource_str(c.resource) + " is more than the node's " +
            yarn_resource_str(node_max);
    }
    if (!why.empty()) {
      if (skipped++ == 0) first = why;
      continue;
    }
    usable.push_back(std::move(c));
  }
  if (skipped > 0) {
    error(
        "container numbers", ERANGE,
        "NodeManager containers: " + std::to_string(skipped) + " skipped for resources out of range, first: " + first);
  }
  return usable;
}

// The running applications by id, from the RM; the last known ones (`known`) when it cannot be asked.
std::map<std::string, YarnApp> running_apps(YarnRest& rest, const std::atomic<bool>* abort, const YarnErrorFn& error,
                                            std::map<std::string, YarnApp> known) {
  std::map<std::string, YarnApp> by_id = std::move(known);
  auto apps = rest.running_apps(abort);
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
      error("app numbers", ERANGE,
            "running applications from the RM: " + std::to_string(invalid) +
                " skipped for numbers out of range, first: " + first);
    }
  } else {
    error("apps", apps.error().err, "running applications from the RM: " + apps.error().str());
  }
  return by_id;
}

// The latest attempt of each application with a container here, by application id.
std::map<std::string, int> latest_attempts(const std::vector<NmContainer>& containers) {
  std::map<std::string, int> attempt;
  for (const auto& c : containers) {
    std::string app = app_of_container(c.id);
    if (!app.empty()) attempt[app] = std::max(attempt[app], attempt_of_container(c.id));
  }
  return attempt;
}

// The AM of each application in `attempt`: the one known if still its latest attempt's, else asked of the RM,
// else guessed (into `guessed`) as the latest attempt's first container.
std::map<std::string, YarnAmAttempt> am_attempts(YarnRest& rest, const std::atomic<bool>* abort,
                                                 const YarnInventory& known, const std::map<std::string, int>& attempt,
                                                 std::set<std::string>& guessed) {
  std::map<std::string, YarnAmAttempt> am;
  for (const auto& [app, latest] : attempt) {
    auto it = known.am_of_app.find(app);
    if (it != known.am_of_app.end() && it->second.attempt >= latest && known.am_guessed.count(app) == 0) {
      am[app] = it->second;
      continue;
    }
    auto a = rest.am_attempt(app, abort);
    if (a && a.value().attempt >= latest) {
      am[app] = a.value();
      if (a.value().container.empty()) {
        spdlog::debug(
            "yarn: the RM hides the AM container of {} (no view access?): taking the first "
            "container of attempt {}",
            app, a.value().attempt);
      }
    } else {
      if (!a) spdlog::debug("yarn: AM container of {}: {}", app, a.error().str());
      am[app] = YarnAmAttempt{latest, ""};
      guessed.insert(app);
    }
  }
  return am;
}

}  // namespace

void YarnNodeReader::update(std::vector<NmContainer> containers, const YarnResource& node_max) {
  // A container with numbers out of range, or larger than the node itself,
  // is left out (neither counted nor killed): what it says cannot be used.
  containers = usable_containers(std::move(containers), node_max, error_);
  // Queues only order the reclaim: without them (a slow or huge answer),
  // the last known ones are used and everything else goes on.
  std::map<std::string, YarnApp> by_id = running_apps(*rest_, abort_, error_, inv_.apps);
  // The AM of each application with a container here: the latest attempt
  // and its container, looked up once per application and again when a
  // container of a later attempt shows up (a new attempt has a new AM).
  // Without view access the RM shows the attempt but not its container, and
  // when it cannot be asked the attempt is the latest one seen here: the AM
  // is then that attempt's first container (see yarn_reclaim_candidates).
  std::set<std::string> guessed;  // the RM could not be asked: ask again next time
  std::map<std::string, YarnAmAttempt> am = am_attempts(*rest_, abort_, inv_, latest_attempts(containers), guessed);
  inv_ = YarnInventory{std::move(containers), std::move(by_id), std::move(am), std::move(guessed)};
}

}  // namespace khagent
