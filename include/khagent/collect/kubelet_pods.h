// Pod metadata from the kubelet's pod list (GET https://<node>:10250/pods, or
// the read-only port): priorityClassName, labels and annotations, which the
// classifier's rules may match on (see Classifier::set_pods).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "khagent/model/pod.h"
#include "khagent/util/http_client.h"
#include "khagent/util/json_bounded.h"
#include "khagent/util/result.h"

namespace khagent {

// Pod uid -> metadata, the shape Classifier::set_pods takes.
using PodMetaMap = std::unordered_map<std::string, PodMeta>;

// What a pod list may take to parse (see util/json_bounded.h), with headroom
// over a large node. Measured: a list of 500 pods of a typical service (two
// containers and an init container, 26 env vars each, probes, volumes,
// managedFields, a last-applied-configuration annotation) is 8.7 MB, 17 KB
// and ~730 JSON values a pod, nested 14 deep, and takes ~70 MB to hold;
// heavy pods reach ~30 KB and ~1500 values. 2M values is 5x the first and
// 2.7x 500 of the second; the worst a hostile list can build within these
// limits is ~100 bytes a value, ~200 MB, where an unbounded 60 MB body of
// nested brackets took 2.2 GB.
inline constexpr size_t kPodListMaxBytes = size_t{64} << 20;  // decoded body
inline constexpr size_t kPodListMaxDepth = 64;
inline constexpr size_t kPodListMaxValues = 2'000'000;
inline constexpr JsonLimits kPodListLimits{kPodListMaxBytes, kPodListMaxDepth, kPodListMaxValues};

// Parses a Kubernetes PodList ({"kind":"PodList","items":[...]}), keyed by
// metadata.uid. Absent name/namespace/labels/annotations/priorityClassName
// are left empty, and fields of the wrong type are treated as absent. Items
// without a uid are skipped; "items" missing or null is an empty list.
// Malformed JSON, a document that is not an object, or "items" that is not an
// array give EINVAL; a document over `limits` (nesting, number of values,
// bytes) gives E2BIG, found before it is built.
Result<PodMetaMap> parse_pod_list(const std::string& json, const JsonLimits& limits = kPodListLimits);

// Field-by-field equality (workload.h has no operator== for PodMeta).
bool pods_equal(const PodMeta& a, const PodMeta& b);
// Same uids with equal metadata.
bool pods_equal(const PodMetaMap& a, const PodMetaMap& b);

struct KubeletPodsOptions {
  std::string url;  // e.g. https://127.0.0.1:10250/pods
  // Bearer token, re-read on every fetch (projected tokens rotate). No
  // Authorization header is sent when the file is absent or unreadable; a
  // file that is not a regular one (after symlinks) or is over 64 KiB fails
  // the fetch.
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file;                         // PEM bundle; empty = the system CAs
  bool insecure_skip_verify = false;           // no peer/host verification (self-signed kubelet certs)
  long timeout_ms = 2000;                      // whole request
  long connect_timeout_ms = 1000;              // TCP + TLS handshake (capped by timeout_ms)
  size_t max_body_bytes = kPodListMaxBytes;    // larger responses (decoded) are an error
  size_t max_json_depth = kPodListMaxDepth;    // deeper nesting is an error
  size_t max_json_values = kPodListMaxValues;  // more JSON values are an error
};

class KubeletPodsClient {
 public:
  // Warns (spdlog) when TLS verification is off, and when the URL is plain
  // http:// while a bearer token is configured: the token would travel in
  // clear text.
  explicit KubeletPodsClient(KubeletPodsOptions opts);

  // One GET of the pod list, parsed. Errors carry the URL and what failed:
  // curl's message (errno from the socket where known), the HTTP status with
  // the start of the body, an oversize body (EFBIG), a URL that is not
  // http:// or https:// (EINVAL) or the parse error (EINVAL, E2BIG).
  // When `abort` is given and becomes true, the transfer is abandoned
  // (checked by curl about once a second or faster) with ECANCELED.
  Result<PodMetaMap> fetch(const std::atomic<bool>* abort = nullptr);

  const KubeletPodsOptions& options() const { return opts_; }

 private:
  KubeletPodsOptions opts_;
  HttpClient http_;   // one base URL (the scheme and authority of opts_.url)
  std::string path_;  // the rest of opts_.url
  std::atomic<bool> warned_clear_token_{false};
};

// Fetches the pod list in the background: immediately, then every `refresh`
// after the previous fetch ended. Failures keep the last good list; they are
// logged at most once a minute while they persist, and the recovery once.
class KubeletPodsWatcher {
 public:
  explicit KubeletPodsWatcher(KubeletPodsOptions opts, std::chrono::milliseconds refresh = std::chrono::seconds(10));
  ~KubeletPodsWatcher();
  KubeletPodsWatcher(const KubeletPodsWatcher&) = delete;
  KubeletPodsWatcher& operator=(const KubeletPodsWatcher&) = delete;

  // The latest list, once after each successful fetch that differs from the
  // previous good one (the first good fetch always counts); else nullopt.
  std::optional<PodMetaMap> take_if_new();
  // Message of the most recent fetch's error; "" once a fetch succeeds.
  std::string last_error() const;
  // Ends the background thread (an in-flight fetch is aborted). Idempotent.
  void stop();

 private:
  void run();

  KubeletPodsClient client_;
  const std::chrono::milliseconds refresh_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stopping_{false};  // also read by curl's progress callback
  bool have_latest_ = false;           // guarded by mu_, like the rest below
  bool fresh_ = false;                 // latest_ changed since take_if_new
  PodMetaMap latest_;
  std::string last_error_;
  std::thread thread_;  // last: started once everything above is set up
};

}  // namespace khagent
