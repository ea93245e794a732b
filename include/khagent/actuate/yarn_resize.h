// Resizing this node in YARN: the ResourceManager's Cluster Node Update
// Resource API, POST /ws/v1/cluster/nodes/{nodeid}/resource.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "khagent/policy/yarn.h"
#include "khagent/util/http_client.h"
#include "khagent/util/result.h"

namespace khagent {

// The request body, the node's whole resource vector:
//   {"resource":{"memory":M,"vCores":V,
//                "resourceInformations":{"resourceInformation":[
//                  {"name":"memory-mb","value":M,"units":"Mi"},{"name":"vcores","value":V},
//                  {"name":"yarn.io/gpu","value":4}, ...]}},
//    "overCommitTimeout":T}
// `others` are the node's other resource types at the values to keep
// (empty: no resourceInformations, as an RM without resource types wants).
// The fields sit at the top level. A missing overCommitTimeout would mean 0
// (the RM kills over-committed containers at once), so it is always sent;
// -1 means the RM never reclaims for this update.
//
// Checked on Hadoop 3.5.0 (tests/yarn): the RM builds the node's new total
// from memory and vCores alone and ignores resourceInformations, so every
// other type becomes 0 whatever is sent. The vector is sent for an RM that
// reads it; the downscaler does not resize a node with other resources
// unless told the RM keeps them (yarn.resize_with_other_resources).
std::string node_resource_body(const YarnResource& r, const std::map<std::string, int64_t>& others,
                               int64_t over_commit_timeout_ms);

// The response: {"resourceInfo":{"memory":M,"vCores":V,...}}: the node's
// total as the RM had it when it answered. The RM queues the update and
// answers at once, so this is usually the total from *before* the update
// (on Hadoop 3.5.0 it was either, depending on its dispatcher): never take
// it for the new total. The NodeManager itself takes the new total with its
// next heartbeat.
Result<YarnResource> parse_resource_info(const std::string& json);

// Sends the update and returns what the RM answered (see above). HTTP
// errors are classified by hadoop_http_error (util/hadoop_error.h): 401/403
// EACCES; 404 ENOENT for an unknown node, EOPNOTSUPP when the RM has no such
// endpoint (Hadoop 2.x); 400 EINVAL; others EIO (a LOST or SHUTDOWN node
// answers 500: the RM still lists it but cannot update it).
Result<YarnResource> post_node_resource(HttpClient& rm, const std::string& node_id, const YarnResource& r,
                                        const std::map<std::string, int64_t>& others, int64_t over_commit_timeout_ms,
                                        const std::atomic<bool>* abort = nullptr);

// Posts the node's `configured` resources and `others` back (the whole
// vector: an RM that reads resourceInformations gets every type back) in
// one bounded try, no retry rounds and at most 5 s, so that stopping fits a
// pod's grace period. `rm` are the options of the RM client (HA, auth, TLS);
// the outcome is logged. Returns whether the RM took it.
bool restore_node_resource(HttpClientOptions rm, const std::string& node_id, const YarnResource& configured,
                           const std::map<std::string, int64_t>& others, int64_t over_commit_timeout_ms);

// The downscaler's state and counters: a snapshot for logs, metrics and
// `khagent status` (filled by app/yarn_downscaler).
struct YarnStatus {
  bool enabled = false;
  bool dry_run = false;
  std::string node_id;  // "" until found
  std::string rm;       // the RM base URL in use
  bool configured_known = false;
  YarnResource configured;  // the NodeManager's own resources
  bool advertised_known = false;
  YarnResource advertised;  // what the RM has for the node
  YarnResource target;      // what the budget asks for
  std::string last_action;  // yarn_action_name of the last capacity step
  size_t containers = 0;    // active on the node
  size_t victims = 0;       // over capacity, waiting for their grace
  uint64_t updates_ok = 0, updates_failed = 0, updates_dry_run = 0;
  uint64_t kills_ok = 0, kills_failed = 0, kills_dry_run = 0;
  uint64_t rm_requests = 0, rm_failures = 0, rm_failovers = 0;
  uint64_t nm_requests = 0, nm_failures = 0;
  std::string last_error;  // "" once the last round went through
};

}  // namespace khagent
