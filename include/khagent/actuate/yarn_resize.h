// Resizing this node in YARN: the ResourceManager's Cluster Node Update
// Resource API, POST /ws/v1/cluster/nodes/{nodeid}/resource.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "khagent/policy/yarn.h"
#include "khagent/util/http_client.h"
#include "khagent/util/result.h"

namespace khagent {

// The request body: {"resource":{"memory":M,"vCores":V},"overCommitTimeout":T}
// (the RM reads the fields at the top level; a missing overCommitTimeout
// would mean 0, so it is always sent; -1 means the RM never preempts).
std::string node_resource_body(const YarnResource& r, int64_t over_commit_timeout_ms);

// The response: {"resourceInfo":{"memory":M,"vCores":V,...}}.
Result<YarnResource> parse_resource_info(const std::string& json);

// Sends the update and returns the resources the RM answered with. HTTP
// errors carry the status: 401/403 (EACCES: authentication or the RM's
// authorisation), 404 (ENOENT: unknown node), 400 (EINVAL), others EIO, with
// the RM's RemoteException message when it sent one.
Result<YarnResource> post_node_resource(HttpClient& rm, const std::string& node_id,
                                        const YarnResource& r, int64_t over_commit_timeout_ms,
                                        const std::atomic<bool>* abort = nullptr);

// The downscaler's state and counters: a snapshot for logs, metrics and
// `khagent status` (filled by app/yarn_downscaler).
struct YarnStatus {
  bool enabled = false;
  bool dry_run = false;
  std::string node_id;            // "" until found
  std::string rm;                 // the RM base URL in use
  bool configured_known = false;
  YarnResource configured;        // the NodeManager's own resources
  bool advertised_known = false;
  YarnResource advertised;        // what the RM has for the node
  YarnResource target;            // what the budget asks for
  std::string last_action;        // yarn_action_name of the last capacity step
  size_t containers = 0;          // active on the node
  size_t victims = 0;             // over capacity, waiting for their grace
  uint64_t updates_ok = 0, updates_failed = 0, updates_dry_run = 0;
  uint64_t kills_ok = 0, kills_failed = 0, kills_dry_run = 0;
  uint64_t rm_requests = 0, rm_failures = 0, rm_failovers = 0;
  uint64_t nm_requests = 0, nm_failures = 0;
  std::string last_error;         // "" once the last round went through
};

}  // namespace khagent
