// Publishes the batch share of the offline budget to this node's status in
// Kubernetes (docs/capacity.md). It runs on its own thread: the control
// loop hands over the latest value and its explanation (never blocks), so
// a slow or unreachable API server never delays a cgroup write. It wires
// policy/capacity (what to publish, decided in the loop) to
// actuate/kube_node_status (the GET and the PATCH): it patches what the
// loop wants until the node shows it, re-reads the node every
// reassert_interval and patches again when the value was zeroed or removed
// (the kubelet does so when the node registers again), and says when the
// loop stopped deciding (stale).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "khagent/actuate/kube_node_status.h"
#include "khagent/config/config.h"
#include "khagent/model/capacity_status.h"

namespace khagent {

class BatchPublisher {
 public:
  // `node`: the Node object's name. The API server's address, token file
  // and CA come from `cfg` (the in-cluster ones by default).
  BatchPublisher(CapacityConfig cfg, std::string node, bool dry_run);
  ~BatchPublisher();
  BatchPublisher(const BatchPublisher&) = delete;
  BatchPublisher& operator=(const BatchPublisher&) = delete;

  // The API server's base URL from the configuration or the in-cluster
  // environment; "" when neither gives one.
  static std::string api_server(const CapacityConfig& cfg);

  void start();
  // The value the node is to show and its explanation, decided at
  // `now_ns`; wakes the worker when it differs from the last. Never blocks
  // on I/O.
  void want(const BatchQuantity& q, const std::string& explanation, uint64_t now_ns);
  // Stops the worker (an in-flight request is aborted). The published
  // values stay: the node's batch pods keep running on them. Idempotent.
  void stop();
  CapacityStatus status() const;

  // One round, synchronously (tests, and the worker): patch when the node
  // is not known to show the wanted value, re-read it when due.
  void round(uint64_t now_ns);

 private:
  void run();
  bool patch(HttpClient& api, const BatchQuantity& q, const std::string& explanation, bool reassert, uint64_t now_ns);
  void note_error(const std::string& what);

  const CapacityConfig cfg_;
  const std::string node_;
  const bool dry_run_;
  std::optional<HttpClient> api_;  // none: no API server address
  // Worker state.
  std::optional<NodeBatchView> view_;  // the node as last read or patched
  uint64_t last_read_ns_ = 0;
  uint64_t retry_ns_ = 0;  // no request before this (after a failure)
  uint64_t backoff_ns_ = 0;
  uint64_t last_error_log_ns_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<BatchQuantity> wanted_;
  std::string explanation_;
  uint64_t wanted_at_ns_ = 0;
  bool kick_ = false;  // a new value: the worker goes at once
  CapacityStatus status_;
  std::atomic<bool> stopping_{false};
  bool started_ = false;
  std::thread thread_;
};

}  // namespace khagent
