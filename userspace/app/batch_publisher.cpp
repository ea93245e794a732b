#include "khagent/app/batch_publisher.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

#include <spdlog/spdlog.h>

#include "khagent/util/clock.h"
#include "khagent/util/file.h"
#include "khagent/util/strings.h"

namespace khagent {

namespace {

constexpr uint64_t kNsPerS = 1'000'000'000;
constexpr uint64_t kMaxBackoffNs = 30 * kNsPerS;

std::string quantity_str(const BatchQuantity& q) {
  std::string s = std::to_string(q.cpu_milli) + "m";
  if (q.memory_bytes >= 0) s += ", " + std::to_string(q.memory_bytes >> 20) + "Mi";
  return s;
}

// The token is read at each request: a projected service-account token is
// rotated by the kubelet.
Result<std::string> read_token(const std::string& path) {
  auto t = read_regular_file(path, size_t{64} << 10);
  if (!t) return make_error(t.error().err, "reading the service-account token " + path + ": " + t.error().message);
  std::string tok = trim_space(*t);
  if (tok.empty()) return make_error(EINVAL, "the service-account token " + path + " is empty");
  return tok;
}

}  // namespace

std::string BatchPublisher::api_server(const CapacityConfig& cfg) {
  if (!cfg.api_server.empty()) return cfg.api_server;
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0') return "";
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6
  return "https://" + h + ":" + (port != nullptr && *port != '\0' ? port : "443");
}

BatchPublisher::BatchPublisher(CapacityConfig cfg, std::string node, bool dry_run)
    : cfg_(std::move(cfg)), node_(std::move(node)), dry_run_(dry_run) {
  status_.node = node_;
  const std::string url = api_server(cfg_);
  if (url.empty()) return;
  HttpClientOptions o;
  o.base_urls = {url};
  o.ca_file = cfg_.ca_file;
  o.timeout_ms = static_cast<long>(cfg_.request_timeout_ms);
  o.connect_timeout_ms = std::min<long>(2000, o.timeout_ms);
  o.retries = 0;  // the worker retries with its own backoff
  api_.emplace(std::move(o));
}

BatchPublisher::~BatchPublisher() { stop(); }

void BatchPublisher::start() {
  if (!api_) {
    spdlog::error(
        "capacity: no API server address (capacity.api_server, or KUBERNETES_SERVICE_HOST in a pod): batch "
        "resources are not published");
    return;
  }
  spdlog::info("capacity: publishing {} and {} of node {} to {}{}", kBatchCpu, kBatchMemory, node_, api_->current(),
               dry_run_ ? " (dry run: logged only)" : "");
  started_ = true;
  thread_ = std::thread([this] { run(); });
}

void BatchPublisher::want(const BatchQuantity& q, const std::string& explanation, uint64_t now_ns) {
  bool wake = false;
  {
    std::lock_guard lk(mu_);
    wake = !wanted_ || *wanted_ != q;
    wanted_ = q;
    explanation_ = explanation;
    wanted_at_ns_ = now_ns;
    kick_ = kick_ || wake;
    status_.wanted = q;
    status_.explanation = explanation;
  }
  if (wake) cv_.notify_one();
}

void BatchPublisher::stop() {
  stopping_ = true;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CapacityStatus BatchPublisher::status() const {
  std::lock_guard lk(mu_);
  return status_;
}

void BatchPublisher::note_error(const std::string& what) {
  const uint64_t now = mono_ns();
  {
    std::lock_guard lk(mu_);
    status_.last_error = what;
  }
  if (last_error_log_ns_ == 0 || now - last_error_log_ns_ >= 60 * kNsPerS) {
    last_error_log_ns_ = now;
    spdlog::warn("capacity: {} (retrying; logged once a minute)", what);
  }
  backoff_ns_ = std::clamp<uint64_t>(backoff_ns_ * 2, kNsPerS, kMaxBackoffNs);
  retry_ns_ = now + backoff_ns_;
}

bool BatchPublisher::patch(HttpClient& api, const BatchQuantity& q, const std::string& explanation, bool reassert,
                           uint64_t now_ns) {
  const std::string old = view_ ? quantity_str(view_->shown) : "unknown";
  if (dry_run_) {
    spdlog::info("capacity: would publish {} on node {} (dry run): {}", quantity_str(q), node_, explanation);
    NodeBatchView v = view_.value_or(NodeBatchView{});
    v.shown = q;
    v.explanation = explanation;
    view_ = v;
    std::lock_guard lk(mu_);
    status_.on_node = q;
    return true;
  }
  auto token = read_token(cfg_.token_file);
  if (!token) {
    {
      std::lock_guard lk(mu_);
      status_.patches_failed++;
    }
    note_error(token.error().str());
    return false;
  }
  // The maps present decide the patch's paths: read the node first when
  // it was not read yet.
  if (!view_) {
    auto v = get_node_batch(api, node_, *token, &stopping_);
    if (!v) {
      {
        std::lock_guard lk(mu_);
        status_.reads_failed++;
      }
      note_error(v.error().str());
      return false;
    }
    view_ = *v;
  }
  auto r = patch_node_batch(api, node_, *token, batch_patch(*view_, q, explanation), &stopping_);
  if (!r) {
    view_.reset();  // read again before the next try: the node may have changed
    {
      std::lock_guard lk(mu_);
      status_.patches_failed++;
    }
    note_error(r.error().str());
    return false;
  }
  view_ = *r;
  backoff_ns_ = 0;
  retry_ns_ = 0;
  {
    std::lock_guard lk(mu_);
    status_.patches_ok++;
    if (reassert) status_.reasserts++;
    status_.on_node = r->shown;
    status_.last_error.clear();
    status_.last_patch_ns = now_ns;
  }
  spdlog::info("capacity: node {} {} {} (was {}): {}", node_, reassert ? "re-asserted" : "now has", quantity_str(q),
               old, explanation);
  return true;
}

void BatchPublisher::round(uint64_t now_ns) {
  if (!api_) return;
  HttpClient& api = *api_;
  std::optional<BatchQuantity> want;
  std::string why;
  bool stale = false;
  {
    std::lock_guard lk(mu_);
    want = wanted_;
    why = explanation_;
    stale = wanted_ && wanted_at_ns_ + cfg_.stale_after_ns < now_ns;
    if (stale != status_.stale) {
      status_.stale = stale;
      if (stale)
        spdlog::warn("capacity: no decision for {}s: node {} keeps {}", cfg_.stale_after_ns / kNsPerS, node_,
                     quantity_str(*wanted_));
      else spdlog::info("capacity: decisions again");
    }
  }
  if (!want || now_ns < retry_ns_) return;
  // Re-read when due: a value zeroed or removed is published again.
  bool reassert = false;
  if (!dry_run_ && view_ && now_ns - last_read_ns_ >= cfg_.reassert_interval_ns) {
    auto token = read_token(cfg_.token_file);
    if (!token) {
      note_error(token.error().str());
      return;
    }
    last_read_ns_ = now_ns;
    auto v = get_node_batch(api, node_, *token, &stopping_);
    if (!v) {
      {
        std::lock_guard lk(mu_);
        status_.reads_failed++;
      }
      note_error(v.error().str());
      return;
    }
    reassert = v->shown != view_->shown;
    if (reassert)
      spdlog::warn("capacity: node {} shows {} ({} and {} in capacity and allocatable), not {}: publishing again",
                   node_, quantity_str(v->shown), kBatchCpu, kBatchMemory, quantity_str(view_->shown));
    view_ = *v;
    std::lock_guard lk(mu_);
    status_.on_node = v->shown;
  }
  // Shown already (the explanation alone moving goes with the next change).
  if (view_ && !reassert && view_->shown.cpu_milli == want->cpu_milli &&
      (want->memory_bytes < 0 || view_->shown.memory_bytes == want->memory_bytes))
    return;
  if (patch(api, *want, why, reassert, now_ns) && last_read_ns_ == 0) last_read_ns_ = now_ns;
}

void BatchPublisher::run() {
  while (!stopping_) {
    round(mono_ns());
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, std::chrono::seconds(1), [this] { return stopping_.load() || kick_; });
    kick_ = false;
  }
}

}  // namespace khagent
