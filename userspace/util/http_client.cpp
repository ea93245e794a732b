#include "khagent/util/http_client.h"

#include <curl/curl.h>

#include "khagent/util/curl_util.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

namespace khagent {

namespace {

struct CurlFreeDeleter {
  void operator()(char* p) const { curl_free(p); }
};

bool aborted(const std::atomic<bool>* abort) { return abort != nullptr && abort->load(); }

// Sleeps `ms`, waking every <= 50 ms to look at `abort`. False if aborted.
bool sleep_unless_aborted(long ms, const std::atomic<bool>* abort) {
  using clock = std::chrono::steady_clock;
  const auto until = clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    if (aborted(abort)) return false;
    auto now = clock::now();
    if (now >= until) return true;
    std::this_thread::sleep_for(std::min<clock::duration>(until - now, std::chrono::milliseconds(50)));
  }
}

bool has_crlf(std::string_view s) { return s.find_first_of("\r\n") != std::string_view::npos; }

// Whether `url` is `base` or lies under it: "http://a:80" matches
// "http://a:80/x" and "HTTP://A:80?q" but not "http://a:8088/x". Scheme and
// host compare without regard to case.
bool url_under_base(std::string_view url, std::string_view base) {
  if (base.empty() || url.size() < base.size()) return false;
  for (size_t i = 0; i < base.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(url[i])) != std::tolower(static_cast<unsigned char>(base[i]))) {
      return false;
    }
  }
  return url.size() == base.size() || url[base.size()] == '/' || url[base.size()] == '?' || url[base.size()] == '#';
}

// What one attempt at one base URL came to.
struct Attempt {
  enum Kind { Answer, Failover, Fatal } kind = Failover;
  int err = 0;            // Failover/Fatal: errno-like code
  std::string message;    // Failover/Fatal: what went wrong at this base URL
  std::string location;   // a redirect's target, "" otherwise
  HttpResponse response;  // Answer
};

struct Prepared {
  const std::string* method = nullptr;
  std::string path_query;  // path with the auth query parameter
  curl_slist* headers = nullptr;
  const std::string* body = nullptr;
};

// Keeps the first failure of a run of setopt calls (out of memory, option not built in).
struct FirstError {
  CURLcode rc = CURLE_OK;
  void operator()(CURLcode r) {
    if (rc == CURLE_OK) rc = r;
  }
};

// The request proper: the URL, the protocols allowed, the method and body, the headers, no redirects followed.
void set_request(CURL* c, const std::string& url, const Prepared& p, char* errbuf, FirstError& set) {
  set(curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf));
  set(curl_easy_setopt(c, CURLOPT_URL, url.c_str()));
#if LIBCURL_VERSION_NUM >= 0x075500  // 7.85.0
  set(curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https"));
#else
  set(curl_easy_setopt(c, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS)));
#endif
  if (*p.method == "GET") {
    set(curl_easy_setopt(c, CURLOPT_HTTPGET, 1L));
  } else {
    // POST with the body from memory; PUT and PATCH are the same transfer under another verb.
    set(curl_easy_setopt(c, CURLOPT_POST, 1L));
    set(curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(p.body->size())));
    set(curl_easy_setopt(c, CURLOPT_POSTFIELDS, p.body->data()));
    if (*p.method != "POST") set(curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, p.method->c_str()));
  }
  set(curl_easy_setopt(c, CURLOPT_HTTPHEADER, p.headers));
  set(curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, ""));  // whatever curl can decode
  // Never follow redirects: a standby ResourceManager redirects to the active
  // one, and which base URL is next is ours to decide (see send()).
  set(curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L));
}

// The connection: timeouts without signals, TLS verification, Kerberos authentication.
void set_connection(CURL* c, const HttpClientOptions& opts, FirstError& set) {
  // Timeouts without SIGALRM: we run on a thread of a multi-threaded process.
  set(curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L));
  set(curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, opts.timeout_ms));
  long connect_ms = opts.connect_timeout_ms > 0 ? std::min(opts.connect_timeout_ms, opts.timeout_ms) : opts.timeout_ms;
  set(curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, connect_ms));
  if (opts.insecure_skip_verify) {
    set(curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L));
    set(curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L));
  } else {
    set(curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L));
    set(curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L));
    if (!opts.ca_file.empty()) set(curl_easy_setopt(c, CURLOPT_CAINFO, opts.ca_file.c_str()));
  }
  if (!opts.client_cert_file.empty()) {
    set(curl_easy_setopt(c, CURLOPT_SSLCERT, opts.client_cert_file.c_str()));
    set(curl_easy_setopt(c, CURLOPT_SSLKEY, opts.client_key_file.c_str()));
  }
  if (opts.auth == HttpAuth::Kerberos) {
    // SPNEGO with the ticket in the credential cache; the empty user and
    // password make curl use GSS-API's default credentials.
    set(curl_easy_setopt(c, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_NEGOTIATE)));
    set(curl_easy_setopt(c, CURLOPT_USERPWD, ":"));
  }
}

// The response's way in: into `sink`, capped, and aborted when `abort` is set.
void set_sink(CURL* c, CurlSink& sink, const std::atomic<bool>* abort, FirstError& set) {
  // Size cap: early when Content-Length announces too much, else while writing.
  set(curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(sink.cap)));
  set(curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, curl_sink_write));
  set(curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink));
  if (abort != nullptr) {
    set(curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, curl_abort_progress));
    set(curl_easy_setopt(c, CURLOPT_XFERINFODATA, const_cast<std::atomic<bool>*>(abort)));
    set(curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L));
  }
}

// A transfer that failed: too large and cancelled are fatal, anything else fails over.
Attempt transfer_failure(CURL* c, CURLcode rc, const CurlSink& sink, const char* errbuf,
                         const std::atomic<bool>* abort) {
  Attempt a;
  if (sink.overflow || rc == CURLE_FILESIZE_EXCEEDED) {
    // Another replica would send the same: no point in failing over.
    a.kind = Attempt::Fatal;
    a.err = EFBIG;
    a.message = "response larger than " + std::to_string(sink.cap) + " bytes";
    return a;
  }
  if (rc == CURLE_ABORTED_BY_CALLBACK || aborted(abort)) {
    a.kind = Attempt::Fatal;
    a.err = ECANCELED;
    a.message = "cancelled";
    return a;
  }
  long os_errno = 0;
  curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &os_errno);
  a.err = rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT
          : os_errno != 0                ? static_cast<int>(os_errno)
          : rc == CURLE_COULDNT_CONNECT  ? ECONNREFUSED
                                         : EIO;
  a.message = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc);
  while (!a.message.empty() && a.message.back() == '\n') a.message.pop_back();
  return a;
}

// A transfer that completed: 2xx and 4xx (or any, if so configured) answer, a redirect or 5xx fails over.
Attempt status_attempt(CURL* c, const HttpClientOptions& opts, const std::string& base, CurlSink& sink) {
  Attempt a;
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (opts.statuses_are_answers || (status >= 200 && status <= 299) || (status >= 400 && status <= 499)) {
    a.kind = Attempt::Answer;
    a.response.status = status;
    a.response.body = std::move(sink.body);
    a.response.base_url = base;
    return a;
  }
  if (status >= 300 && status <= 399) {
    // The redirect target, resolved against the request URL.
    char* loc = nullptr;
    if (curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc) == CURLE_OK && loc != nullptr) a.location = loc;
    a.err = EPROTO;
    a.message =
        a.location.empty() ? "HTTP " + std::to_string(status) + " without a Location" : "redirect to " + a.location;
    return a;
  }
  a.err = status >= 500 && status <= 599 ? EIO : EPROTO;
  a.message = "HTTP " + std::to_string(status);
  if (!sink.body.empty()) a.message += ": " + body_excerpt(sink.body);
  return a;
}

// One attempt at one base URL: set up the transfer, run it, and class what came back.
Attempt perform(CURL* c, const HttpClientOptions& opts, const std::string& base, const Prepared& p,
                const std::atomic<bool>* abort) {
  curl_easy_reset(c);
  CurlSink sink;
  sink.cap = opts.max_body_bytes;
  char errbuf[CURL_ERROR_SIZE] = {};
  const std::string url = base + p.path_query;

  // Each setopt can fail (out of memory, option not built in): keep the first.
  FirstError set;
  set_request(c, url, p, errbuf, set);
  set_connection(c, opts, set);
  set_sink(c, sink, abort, set);
  if (set.rc != CURLE_OK) {
    Attempt a;
    a.kind = Attempt::Fatal;
    a.err = set.rc == CURLE_NOT_BUILT_IN || set.rc == CURLE_UNKNOWN_OPTION ? ENOTSUP : EINVAL;
    a.message = std::string("setting up the request: ") + curl_easy_strerror(set.rc);
    return a;
  }

  const CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) return transfer_failure(c, rc, sink, errbuf, abort);
  return status_attempt(c, opts, base, sink);
}

// What is wrong with the request or the options before anything is sent (EINVAL); none: nothing.
std::optional<std::string> invalid_request(const HttpClientOptions& opts, const HttpRequest& req) {
  if (opts.base_urls.empty()) return "no base URL configured";
  if (req.method != "GET" && req.method != "POST" && req.method != "PUT" && req.method != "PATCH")
    return "unsupported method";
  if (opts.timeout_ms <= 0) return "timeout must be positive";
  if (has_crlf(req.path) || has_crlf(req.content_type)) return "line break in the path or content type";
  for (const auto& h : req.headers) {
    if (has_crlf(h)) return "line break in a header";
  }
  if (opts.auth == HttpAuth::Simple && opts.user.empty()) return "simple authentication needs a user";
  return std::nullopt;
}

// The request's headers: JSON accepted, the body's type, no 100-continue, then the caller's; false: out of memory.
bool build_headers(const HttpRequest& req, CurlSlist& headers) {
  auto add_header = [&headers](const std::string& line) {
    curl_slist* l = curl_slist_append(headers.get(), line.c_str());
    if (l == nullptr) return false;
    (void)headers.release();  // NOLINT(bugprone-unused-return-value): now owned by the list head `l`
    headers.reset(l);
    return true;
  };
  bool ok = add_header("Accept: application/json");
  if (req.method != "GET") {
    if (!req.content_type.empty()) ok = ok && add_header("Content-Type: " + req.content_type);
    ok = ok && add_header("Expect:");  // no 100-continue round trip for large bodies
  }
  for (const auto& line : req.headers) ok = ok && add_header(line);
  return ok;
}

// The base URL to try after a failure at idx: the one a redirect names, if configured and not yet tried in this
// round; else the next untried one after idx; n if none.
size_t next_base(const std::vector<std::string>& base_urls, const std::vector<bool>& tried, size_t idx,
                 const std::string& location) {
  const size_t n = base_urls.size();
  size_t next = n;
  if (!location.empty()) {
    for (size_t j = 0; j < n; ++j) {
      if (!tried[j] && url_under_base(location, base_urls[j])) {
        next = j;
        break;
      }
    }
  }
  for (size_t j = 1; next == n && j < n; ++j) {
    if (!tried[(idx + j) % n]) next = (idx + j) % n;
  }
  return next;
}

// The error after every round failed: the rounds, the base URLs, and the last failure at each.
std::string exhausted_message(const HttpClientOptions& opts, const std::vector<std::string>& last_failure) {
  const size_t n = opts.base_urls.size();
  std::string msg = "no usable answer after " + std::to_string(opts.retries + 1) +
                    (opts.retries == 0 ? " round" : " rounds") + " over " + std::to_string(n) +
                    (n == 1 ? " base URL" : " base URLs");
  for (size_t i = 0; i < n; ++i) {
    msg += "; " + opts.base_urls[i] + ": " + last_failure[i];
  }
  return msg;
}

}  // namespace

std::string url_path_segment(std::string_view s) {
  static const char kHex[] = "0123456789ABCDEF";
  auto encode = [](std::string& out, unsigned char c) {
    out += '%';
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  };
  std::string out;
  out.reserve(s.size());
  if (s == "." || s == "..") {
    for (char c : s) encode(out, static_cast<unsigned char>(c));
    return out;
  }
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
                c == '_' || c == '~' || c == ':';
    if (keep) {
      out += ch;
    } else {
      encode(out, c);
    }
  }
  return out;
}

HttpClient::HttpClient(HttpClientOptions opts) : opts_(std::move(opts)) {
  // "http://rm:8088/" and "http://rm:8088" are the same base: paths start with '/'.
  for (auto& b : opts_.base_urls) {
    while (!b.empty() && b.back() == '/') b.pop_back();
  }
}

const std::string& HttpClient::current() const {
  static const std::string none;
  return current_ < opts_.base_urls.size() ? opts_.base_urls[current_] : none;
}

Result<HttpResponse> HttpClient::send(const HttpRequest& req, const std::atomic<bool>* abort) {
  const std::string what = req.method + " " + req.path;
  auto fail = [this, &what](int err, const std::string& msg) -> Result<HttpResponse> {
    stats_.failures.fetch_add(1, std::memory_order_relaxed);
    return make_error(err, msg.empty() ? what : what + ": " + msg);
  };

  const size_t n = opts_.base_urls.size();
  if (auto bad = invalid_request(opts_, req)) return fail(EINVAL, *bad);
  if (CURLcode g = curl_global(); g != CURLE_OK) {
    return fail(EIO, std::string("curl_global_init: ") + curl_easy_strerror(g));
  }
  CurlEasy h(curl_easy_init());
  if (!h) return fail(ENOMEM, "curl_easy_init failed");

  Prepared p;
  p.method = &req.method;
  p.body = &req.body;
  p.path_query = req.path.empty() || req.path[0] != '/' ? "/" + req.path : req.path;
  if (opts_.auth == HttpAuth::Simple) {
    std::unique_ptr<char, CurlFreeDeleter> esc(
        curl_easy_escape(h.get(), opts_.user.data(), static_cast<int>(opts_.user.size())));
    if (!esc) return fail(ENOMEM, "escaping the user name");
    p.path_query += p.path_query.find('?') == std::string::npos ? '?' : '&';
    p.path_query += "user.name=";
    p.path_query += esc.get();
  }

  CurlSlist headers;
  if (!build_headers(req, headers)) return fail(ENOMEM, "building the header list");
  p.headers = headers.get();

  // The last failure at each base URL, for the error message.
  std::vector<std::string> last_failure(n);
  int last_err = EIO;
  const size_t start = current_ < n ? current_ : 0;
  long backoff = std::max(opts_.retry_backoff_ms, 0L);

  for (unsigned round = 0; round <= opts_.retries; ++round) {
    if (round > 0) {
      if (!sleep_unless_aborted(backoff, abort)) return fail(ECANCELED, "cancelled");
      backoff = backoff > (1L << 30) ? backoff : backoff * 2;
    }
    std::vector<bool> tried(n, false);
    size_t idx = start;
    for (size_t k = 0; k < n; ++k) {
      if (aborted(abort)) return fail(ECANCELED, "cancelled");
      tried[idx] = true;
      stats_.requests.fetch_add(1, std::memory_order_relaxed);
      const std::string& base = opts_.base_urls[idx];
      Attempt a = perform(h.get(), opts_, base, p, abort);
      if (a.kind == Attempt::Answer) {
        current_ = idx;
        return std::move(a.response);
      }
      if (a.kind == Attempt::Fatal) return fail(a.err, base + ": " + a.message);
      last_err = a.err;
      last_failure[idx] = std::move(a.message);
      if (k + 1 == n) break;  // round over
      idx = next_base(opts_.base_urls, tried, idx, a.location);
      stats_.failovers.fetch_add(1, std::memory_order_relaxed);
    }
    // The next round starts at `start` again: a move if the round ended elsewhere.
    if (round < opts_.retries && idx != start) stats_.failovers.fetch_add(1, std::memory_order_relaxed);
  }
  return fail(last_err, exhausted_message(opts_, last_failure));
}

}  // namespace khagent
