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

#include "khagent/signals/workload.h"
#include "khagent/util/result.h"

namespace khagent {

// Pod uid -> metadata, the shape Classifier::set_pods takes.
using PodMetaMap = std::unordered_map<std::string, PodMeta>;

// Parses a Kubernetes PodList ({"kind":"PodList","items":[...]}), keyed by
// metadata.uid. Absent name/namespace/labels/annotations/priorityClassName
// are left empty, and fields of the wrong type are treated as absent. Items
// without a uid are skipped; "items" missing or null is an empty list.
// Malformed JSON, a document that is not an object, or "items" that is not an
// array give EINVAL.
Result<PodMetaMap> parse_pod_list(const std::string& json);

// Field-by-field equality (workload.h has no operator== for PodMeta).
bool pods_equal(const PodMeta& a, const PodMeta& b);
// Same uids with equal metadata.
bool pods_equal(const PodMetaMap& a, const PodMetaMap& b);

struct KubeletPodsOptions {
  std::string url;  // e.g. https://127.0.0.1:10250/pods
  // Bearer token, re-read on every fetch (projected tokens rotate). No
  // Authorization header is sent when the file is absent or unreadable.
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file;                // PEM bundle; empty = the system CAs
  bool insecure_skip_verify = false;  // no peer/host verification (self-signed kubelet certs)
  long timeout_ms = 2000;             // whole request
  long connect_timeout_ms = 1000;     // TCP + TLS handshake (capped by timeout_ms)
  size_t max_body_bytes = size_t{64} << 20;  // larger responses are an error
};

class KubeletPodsClient {
 public:
  explicit KubeletPodsClient(KubeletPodsOptions opts);

  // One GET of the pod list, parsed. Errors carry the URL and what failed:
  // curl's message (errno from the socket where known), the HTTP status with
  // the start of the body, an oversize body (EFBIG) or the parse error.
  // When `abort` is given and becomes true, the transfer is abandoned
  // (checked by curl about once a second or faster) with ECANCELED.
  Result<PodMetaMap> fetch(const std::atomic<bool>* abort = nullptr);

  const KubeletPodsOptions& options() const { return opts_; }

 private:
  KubeletPodsOptions opts_;
};

// Fetches the pod list in the background: immediately, then every `refresh`
// after the previous fetch ended. Failures keep the last good list; they are
// logged at most once a minute while they persist, and the recovery once.
class KubeletPodsWatcher {
 public:
  explicit KubeletPodsWatcher(KubeletPodsOptions opts,
                              std::chrono::milliseconds refresh = std::chrono::seconds(10));
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
