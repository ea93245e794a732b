#include "khagent/collect/kubelet_pods.h"
#include "khagent/util/curl_util.h"
#include "khagent/util/file.h"
#include "khagent/util/http_client.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

namespace khagent {

namespace {

using nlohmann::json;

// obj[key] if it is a string, else "".
std::string string_field(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// obj[key] as a string map; non-string values are skipped.
std::map<std::string, std::string> string_map_field(const json& obj, const char* key) {
  std::map<std::string, std::string> out;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_object()) return out;
  for (const auto& [k, v] : it->items()) {
    if (v.is_string()) out.emplace(k, v.get<std::string>());
  }
  return out;
}

// obj[key] if it is an object, else nullptr.
const json* object_field(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_object() ? &*it : nullptr;
}

// Whether `url` starts with `scheme` ("http://"), ignoring case as curl does.
bool has_scheme(const std::string& url, std::string_view scheme) {
  if (url.size() < scheme.size()) return false;
  for (size_t i = 0; i < scheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(url[i])) != scheme[i]) return false;
  }
  return true;
}

enum class TokenRead { Absent, Ok, Invalid };

// A service account token is about 1 KB; a file far larger is not one.
constexpr size_t kMaxTokenBytes = size_t{64} * 1024;

// The bearer token, surrounding whitespace trimmed. Absent if the file cannot
// be opened or read (no token mounted: anonymous access) or is a directory.
// Invalid, with the reason in `why`, if it is not a regular file (a FIFO or
// a device would block or never end), is larger than kMaxTokenBytes, or has
// bytes that cannot go into a header (CR/LF would inject headers).
// The path may be a symlink: projected tokens are reached through one.
TokenRead read_token(const std::string& path, std::string& token, std::string& why) {
  if (path.empty()) return TokenRead::Absent;
  auto read = read_regular_file(path, kMaxTokenBytes);
  if (!read) {
    switch (read.error().err) {
      case EINVAL: why = "it is not a regular file"; return TokenRead::Invalid;
      case EFBIG: why = "it is larger than " + std::to_string(kMaxTokenBytes >> 10) + " KiB"; return TokenRead::Invalid;
      default: return TokenRead::Absent;  // cannot be opened or read, or a directory
    }
  }
  const std::string& text = *read;
  const char* ws = " \t\r\n";
  auto b = text.find_first_not_of(ws);
  if (b == std::string::npos) return TokenRead::Absent;
  token = text.substr(b, text.find_last_not_of(ws) - b + 1);
  bool printable = std::all_of(token.begin(), token.end(), [](unsigned char c) { return c > 0x20 && c < 0x7f; });
  if (!printable) {
    why = "it holds characters not allowed in a bearer token";
    return TokenRead::Invalid;
  }
  return TokenRead::Ok;
}

// Where the path of `url` starts (after scheme://authority), or its end.
size_t path_start(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url.size();
  const size_t p = url.find_first_of("/?#", scheme + 3);
  return p == std::string::npos ? url.size() : p;
}

// The path and query of `url` ("/" when it has none).
std::string url_rest(const std::string& url) {
  std::string rest = url.substr(path_start(url));
  if (auto hash = rest.find('#'); hash != std::string::npos) rest.resize(hash);
  return rest.empty() || rest[0] != '/' ? "/" + rest : rest;
}

// One base URL, one try: the watcher fetches again at its next refresh.
HttpClientOptions http_options(const KubeletPodsOptions& o) {
  HttpClientOptions h;
  h.base_urls = {o.url.substr(0, path_start(o.url))};
  h.ca_file = o.ca_file;
  h.insecure_skip_verify = o.insecure_skip_verify;
  h.timeout_ms = o.timeout_ms;
  h.connect_timeout_ms = o.connect_timeout_ms;
  h.retries = 0;
  h.max_body_bytes = o.max_body_bytes;
  h.statuses_are_answers = true;
  return h;
}

// Whether a container or init container of `spec` requests or is limited in
// a batch resource.
bool requests_batch(const json& spec) {
  for (const char* list : {"containers", "initContainers"}) {
    auto cs = spec.find(list);
    if (cs == spec.end() || !cs->is_array()) continue;
    for (const auto& c : *cs) {
      const json* res = c.is_object() ? object_field(c, "resources") : nullptr;
      if (res == nullptr) continue;
      for (const char* kind : {"requests", "limits"}) {
        const json* m = object_field(*res, kind);
        if (m != nullptr && (m->contains("kubernetes.io/batch-cpu") || m->contains("kubernetes.io/batch-memory")))
          return true;
      }
    }
  }
  return false;
}

}  // namespace

Result<PodMetaMap> parse_pod_list(const std::string& text, const JsonLimits& limits) {
  auto parsed = parse_json_bounded(text, limits);
  if (!parsed) return make_error(parsed.error().err, "pod list: " + parsed.error().message);
  const json& doc = parsed.value();
  if (!doc.is_object()) {
    return make_error(EINVAL, std::string("pod list: expected a JSON object, got ") + doc.type_name());
  }
  PodMetaMap pods;
  auto items = doc.find("items");
  // A Go nil slice is serialized as null: no pods.
  if (items == doc.end() || items->is_null()) return pods;
  if (!items->is_array()) {
    return make_error(EINVAL, std::string("pod list: \"items\" is not an array but ") + items->type_name());
  }
  for (const auto& item : *items) {
    if (!item.is_object()) continue;
    const json* md = object_field(item, "metadata");
    if (md == nullptr) continue;
    std::string uid = string_field(*md, "uid");
    if (uid.empty()) continue;
    PodMeta meta;
    meta.name = string_field(*md, "name");
    meta.ns = string_field(*md, "namespace");
    meta.labels = string_map_field(*md, "labels");
    meta.annotations = string_map_field(*md, "annotations");
    if (const json* spec = object_field(item, "spec")) {
      meta.priority_class = string_field(*spec, "priorityClassName");
      meta.batch_resources = requests_batch(*spec);
    }
    pods.insert_or_assign(std::move(uid), std::move(meta));
  }
  return pods;
}

bool pods_equal(const PodMeta& a, const PodMeta& b) {
  return a.name == b.name && a.ns == b.ns && a.priority_class == b.priority_class && a.labels == b.labels &&
         a.annotations == b.annotations && a.batch_resources == b.batch_resources;
}

bool pods_equal(const PodMetaMap& a, const PodMetaMap& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [uid, meta] : a) {
    auto it = b.find(uid);
    if (it == b.end() || !pods_equal(meta, it->second)) return false;
  }
  return true;
}

KubeletPodsClient::KubeletPodsClient(KubeletPodsOptions opts)
    : opts_(std::move(opts)), http_(http_options(opts_)), path_(url_rest(opts_.url)) {
  if (opts_.insecure_skip_verify && has_scheme(opts_.url, "https://")) {
    spdlog::warn("kubelet pod list {}: TLS certificate verification is disabled", opts_.url);
  }
  std::string token, why;
  if (has_scheme(opts_.url, "http://") && read_token(opts_.token_file, token, why) != TokenRead::Absent) {
    warned_clear_token_ = true;
    spdlog::warn(
        "kubelet pod list {}: plain http: the bearer token from {} is sent in clear text "
        "(use https://, or kubelet_token_file: \"\" for the read-only port)",
        opts_.url, opts_.token_file);
  }
}

Result<PodMetaMap> KubeletPodsClient::fetch(const std::atomic<bool>* abort) {
  const std::string what = "kubelet pod list " + opts_.url;
  if (opts_.url.empty()) return make_error(EINVAL, "kubelet pod list: no URL configured");
  const bool plain_http = has_scheme(opts_.url, "http://");
  if (!plain_http && !has_scheme(opts_.url, "https://")) {
    return make_error(EINVAL, what + ": only http:// and https:// URLs are allowed");
  }
  if (opts_.timeout_ms <= 0) return make_error(EINVAL, what + ": timeout must be positive");

  HttpRequest req;
  req.path = path_;
  std::string token, why;
  switch (read_token(opts_.token_file, token, why)) {
    case TokenRead::Absent: break;
    case TokenRead::Ok:
      if (plain_http && !warned_clear_token_.exchange(true)) {
        spdlog::warn("{}: plain http: the bearer token from {} is sent in clear text", what, opts_.token_file);
      }
      req.headers.push_back("Authorization: Bearer " + token);
      break;
    case TokenRead::Invalid: return make_error(EINVAL, what + ": token file " + opts_.token_file + ": " + why);
  }
  auto r = http_.send(req, abort);
  if (!r) return make_error(r.error().err, what + ": " + r.error().message);
  if (r->status < 200 || r->status > 299) {
    std::string msg = what + ": HTTP " + std::to_string(r->status);
    if (!r->body.empty()) msg += ": " + body_excerpt(r->body);
    // Rejected credentials get an errno of their own; other statuses speak for themselves.
    return make_error(r->status == 401 || r->status == 403 ? EACCES : 0, std::move(msg));
  }
  JsonLimits limits{opts_.max_body_bytes, opts_.max_json_depth, opts_.max_json_values};
  auto pods = parse_pod_list(r->body, limits);
  if (!pods) return make_error(pods.error().err, what + ": " + pods.error().message);
  return pods;
}

KubeletPodsWatcher::KubeletPodsWatcher(KubeletPodsOptions opts, std::chrono::milliseconds refresh)
    : client_(std::move(opts)), refresh_(refresh) {
  thread_ = std::thread([this] { run(); });
}

KubeletPodsWatcher::~KubeletPodsWatcher() { stop(); }

void KubeletPodsWatcher::stop() {
  {
    // Under the lock, so the thread cannot miss it between its check and wait.
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<PodMetaMap> KubeletPodsWatcher::take_if_new() {
  std::lock_guard lk(mu_);
  if (!fresh_) return std::nullopt;
  fresh_ = false;
  return latest_;  // a copy: latest_ stays the reference for the next comparison
}

std::string KubeletPodsWatcher::last_error() const {
  std::lock_guard lk(mu_);
  return last_error_;
}

void KubeletPodsWatcher::run() {
  using Clock = std::chrono::steady_clock;
  constexpr auto kWarnEvery = std::chrono::minutes(1);
  bool failing = false;
  Clock::time_point last_warn{};
  unsigned unlogged = 0;  // failures since the last warning

  for (;;) {
    auto r = client_.fetch(&stopping_);
    if (stopping_) break;
    if (r) {
      if (failing) spdlog::info("kubelet pod list OK again ({} pods)", r->size());
      failing = false;
      unlogged = 0;
      std::lock_guard lk(mu_);
      last_error_.clear();
      if (!have_latest_ || !pods_equal(latest_, *r)) {
        latest_ = std::move(r).value();
        have_latest_ = true;
        fresh_ = true;
      }
    } else {
      std::string msg = r.error().str();
      auto now = Clock::now();
      if (!failing || now - last_warn >= kWarnEvery) {
        if (unlogged > 0) {
          spdlog::warn("{} ({} more failures since the last report)", msg, unlogged);
        } else {
          spdlog::warn("{}", msg);
        }
        last_warn = now;
        unlogged = 0;
      } else {
        ++unlogged;
      }
      failing = true;
      std::lock_guard lk(mu_);
      last_error_ = std::move(msg);
    }
    std::unique_lock lk(mu_);
    if (cv_.wait_for(lk, refresh_, [this] { return stopping_.load(); })) break;
  }
}

}  // namespace khagent
