// A small HTTP client over libcurl for the agent's REST peers (the YARN
// ResourceManager and NodeManager, the kubelet): several base URLs for HA, simple or
// SPNEGO authentication, TLS with a CA bundle, timeouts, retries with
// backoff, and an abort flag so a stopping agent never waits on a slow peer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "khagent/util/result.h"

namespace khagent {

enum class HttpAuth { None, Simple, Kerberos };

// `s` made safe as one segment of a URL path: every byte but the unreserved
// ones (A-Z a-z 0-9 - . _ ~) and ':' is percent-encoded (so '/', '?', '#',
// '%', spaces and control bytes are), and a segment "." or ".." is encoded
// whole ("%2E%2E"), so that neither curl nor the server resolves it as a
// dot-segment. "vm:1/../x?y" gives "vm:1%2F..%2Fx%3Fy".
std::string url_path_segment(std::string_view s);

struct HttpClientOptions {
  // Base URLs (scheme://host:port, no path; trailing '/' is dropped), tried
  // in order for HA. The one that last answered is tried first next time.
  std::vector<std::string> base_urls;
  HttpAuth auth = HttpAuth::None;
  std::string user;  // Simple: sent as the user.name query parameter
  std::string ca_file;
  bool insecure_skip_verify = false;
  // A TLS client certificate and its key (PEM files); "" = none.
  std::string client_cert_file;
  std::string client_key_file;
  long timeout_ms = 5000;
  long connect_timeout_ms = 2000;
  unsigned retries = 2;         // further rounds over all base URLs after the first
                                // (timeout_ms applies to each attempt)
  long retry_backoff_ms = 500;  // before the second round; doubled for each further round
  size_t max_body_bytes = size_t{16} << 20;
  // Every HTTP status is an answer, 3xx and 5xx included, with no failover
  // or retry on a status: for a single peer (the kubelet) whose errors the
  // caller reports as they are.
  bool statuses_are_answers = false;
};

struct HttpResponse {
  long status = 0;
  std::string body;
  std::string base_url;  // the base URL that answered
  // Location header of a redirect, "" otherwise. Redirects are failovers,
  // never returned, so send() leaves this empty; it names the target in errors.
  std::string location;
};

struct HttpRequest {
  std::string method = "GET";  // GET | POST | PUT | PATCH
  std::string path;            // "/ws/v1/cluster/nodes" (query allowed)
  std::string body;            // for POST/PUT/PATCH
  std::string content_type = "application/json";
  std::vector<std::string> headers;  // extra "Name: value" lines
};

// Counters of what the client did; read by the metrics exporter.
struct HttpClientStats {
  std::atomic<uint64_t> requests{0};   // attempts sent (each retry and failover counts)
  std::atomic<uint64_t> failures{0};   // requests that ended without a usable answer
  std::atomic<uint64_t> failovers{0};  // moved to another base URL
};

class HttpClient {
 public:
  explicit HttpClient(HttpClientOptions opts);

  // Sends `req` to the current base URL. A connection error, a timeout, an
  // HTTP 5xx, or a redirect (HA standby) moves to the next base URL; after a
  // round over all of them it waits the backoff and tries again, up to
  // `retries` more rounds. A redirect whose Location lies under another
  // configured base URL moves to that one next. 2xx and 4xx answers are
  // returned as they are (the caller decides what a 401/403/404 means); the
  // error names the method, path, each URL and its last failure, with the
  // errno of the last attempt (ECONNREFUSED, ETIMEDOUT, EIO for 5xx, EPROTO
  // for redirects). A body over max_body_bytes (EFBIG) does not fail over.
  // `abort`, when set, cancels waits and transfers (ECANCELED).
  // Thread-compatible: one request at a time per client.
  Result<HttpResponse> send(const HttpRequest& req, const std::atomic<bool>* abort = nullptr);

  const HttpClientOptions& options() const { return opts_; }
  HttpClientStats& stats() { return stats_; }
  // The base URL requests go to first.
  const std::string& current() const;

 private:
  HttpClientOptions opts_;
  size_t current_ = 0;
  HttpClientStats stats_;
};

}  // namespace khagent
