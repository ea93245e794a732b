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

}  // namespace khagent
