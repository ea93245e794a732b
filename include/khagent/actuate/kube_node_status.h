// The node's batch resources in Kubernetes: read from GET /api/v1/nodes/NAME
// and written with a JSON patch on /api/v1/nodes/NAME/status (both
// kubernetes.io/batch-cpu in milli-cores and kubernetes.io/batch-memory in
// bytes, under capacity and allocatable, and the explanation as the
// annotation khagent.io/batch-explanation).
#pragma once

#include <atomic>
#include <string>
#include <string_view>

#include "khagent/policy/capacity.h"
#include "khagent/util/http_client.h"
#include "khagent/util/result.h"

namespace khagent {

inline constexpr const char* kBatchCpu = "kubernetes.io/batch-cpu";
inline constexpr const char* kBatchMemory = "kubernetes.io/batch-memory";
inline constexpr const char* kBatchExplanation = "khagent.io/batch-explanation";

// What the node object holds of ours, and which of the maps exist (a JSON
// patch cannot add a key to a map that is not there).
struct NodeBatchView {
  // -1 where a resource is missing, not a whole number, or differs between
  // capacity and allocatable.
  BatchQuantity shown{-1, -1};
  std::string explanation;
  bool has_capacity = false;
  bool has_allocatable = false;
  bool has_annotations = false;
};

// A Kubernetes quantity that is a whole number ("1500", "1k", "6Gi",
// "2000m", "1.5k"), as the API server writes back what we sent in its
// canonical form; -1 for anything else ("1500m", "0.5", "1e3", "-1").
int64_t whole_quantity(std::string_view s);

// Parses a Node object (the GET's body). EINVAL when it is not one.
Result<NodeBatchView> parse_node_batch(const std::string& json);

// The JSON patch (RFC 6902) that sets `q` (a memory < 0 is left as it is)
// and the explanation: "add" replaces a key that exists and adds one that
// does not; a missing map is added whole.
std::string batch_patch(const NodeBatchView& node, const BatchQuantity& q, const std::string& explanation);

// The requests, with `token` as the bearer token. HTTP errors: 401 and 403
// EACCES (with the server's message: a denied admission names its policy),
// 404 ENOENT, 409/422 EINVAL, others EIO.
Result<NodeBatchView> get_node_batch(HttpClient& api, const std::string& node, const std::string& token,
                                     const std::atomic<bool>* abort = nullptr);
Result<NodeBatchView> patch_node_batch(HttpClient& api, const std::string& node, const std::string& token,
                                       const std::string& patch, const std::atomic<bool>* abort = nullptr);

}  // namespace khagent
