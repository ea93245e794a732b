// What YARN says about this node, read over the ResourceManager and
// NodeManager REST APIs (Hadoop 3.x): the node list and this node's
// resources, the NodeManager's containers, and for their applications the
// queue and the ApplicationMaster's container. Parsers are separate from the
// fetches so they can be tested on the documented JSON shapes.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "khagent/model/yarn_resource.h"
#include "khagent/util/http_client.h"
#include "khagent/util/json_bounded.h"
#include "khagent/util/result.h"

namespace khagent {

// What one RM or NM answer may take to parse (see util/json_bounded.h). The
// bytes are the HTTP client's cap (16 MiB decoded, HttpClientOptions); real
// YARN documents carry 20-25 bytes a value, so 16 MiB holds ~800k values:
// 1M leaves room for them, while a hostile body of "0," (8M values in 16 MiB)
// or of nested brackets (a 14 MB one took 540 MB unbounded) stops early. The
// documents nest at most ~6 deep. Worst case within these: ~100 MB.
inline constexpr JsonLimits kYarnJsonLimits{size_t{16} << 20, 64, 1'000'000};

// Every number read is range-checked: resources within [0, kYarnMaxVcores] and
// [0, kYarnMaxMemoryMb] (policy/yarn.h), counts, priorities and times within
// their own bounds; fractions are truncated toward zero. Where one entry of a
// list is out of range, the entry is kept with `invalid` saying why (its
// numbers zeroed) so the caller can log and skip it; in a single document
// (a node, the NM's info, an answer) it is an ERANGE error.

// One entry of GET /ws/v1/cluster/nodes (or /nodes/{id}).
struct YarnNodeReport {
  std::string id;            // host:port, the NodeManager id
  std::string host;          // nodeHostName
  std::string http_address;  // nodeHTTPAddress, host:port ("" for inactive nodes)
  std::string state;         // RUNNING, UNHEALTHY, LOST, ...
  YarnResource total;        // totalResource: what the RM believes the node has
  // Every other resource type of totalResource (resourceInformations), by
  // name (e.g. "yarn.io/gpu" -> 4), zeros included; empty when the RM lists
  // none (RMs before resource types, or a node list without them).
  std::map<std::string, int64_t> other_resources;
  YarnResource used;       // usedMemoryMB / usedVirtualCores
  int64_t containers = 0;  // numContainers
  std::string invalid;     // "" or why its numbers are unusable (list entries only)
};

// One entry of the NodeManager's GET /ws/v1/node/containers.
struct NmContainer {
  std::string id;
  std::string state;  // NM container state: RUNNING, LOCALIZING, DONE, ...
  std::string user;
  YarnResource resource;       // totalVCoresNeeded / totalMemoryNeededMB
  std::string execution_type;  // GUARANTEED | OPPORTUNISTIC | ""
  std::string invalid;         // "" or why its numbers are unusable
};

// A running application: its queue and priority, and the AM container of
// its current attempt ("" when the RM does not show it).
struct YarnApp {
  std::string id;
  std::string queue;
  int priority = 0;
  uint64_t started_ms = 0;
  std::string am_container;
  std::string invalid;  // "" or why its numbers are unusable
};

// Lists may be {"node":[...]}, null, "" or {} (empty) depending on the
// Hadoop version. Errors (EPROTO) say what was missing or of the wrong type;
// E2BIG for a document over kYarnJsonLimits, ERANGE for a number out of range.
// HTTP errors of the fetches are classified by hadoop_http_error
// (util/hadoop_error.h): a 404 is ENOENT only when the RM says the node or
// application is not found; a 404 page from the web server (no such REST
// endpoint, e.g. an older Hadoop or a wrong URL) is EOPNOTSUPP.
Result<std::vector<YarnNodeReport>> parse_yarn_nodes(const std::string& json);
Result<YarnNodeReport> parse_yarn_node(const std::string& json);  // {"node":{...}}
Result<std::vector<NmContainer>> parse_nm_containers(const std::string& json);
// NodeManager GET /ws/v1/node/info: its configured resources
// (totalVCoresAllocatedContainers, totalPmemAllocatedContainersMB), which an
// RM-side resource update does not change.
Result<YarnResource> parse_nm_node_info(const std::string& json);
Result<std::vector<YarnApp>> parse_yarn_apps(const std::string& json);
// The latest attempt of an application: its number and its AM container.
// The RM writes the container id as "" to a caller without view access to
// the application (checked on Hadoop 3.5.0 with ACLs on).
struct YarnAmAttempt {
  int attempt = 0;        // 0 = no attempt listed
  std::string container;  // "" = hidden or not allocated yet
};
// GET /ws/v1/cluster/apps/{app}/appattempts: the attempt with the highest id.
Result<YarnAmAttempt> parse_am_attempt(const std::string& json);
// Just its container id ("" if hidden).
Result<std::string> parse_am_container(const std::string& json);
// Whether a NodeManager container state still holds its resources.
bool nm_container_active(const std::string& state);

// application_<ts>_<seq> from container_[e<epoch>_]<ts>_<seq>_<attempt>_<n>; "" if malformed.
std::string app_of_container(const std::string& container_id);
// The attempt number of a container id; 0 if malformed.
int attempt_of_container(const std::string& container_id);
// Whether the container is the first one of attempt `attempt` of its
// application (sequence number 1, any epoch prefix): the container the RM
// launches the ApplicationMaster in. The fallback when the RM hides the
// attempt's containerId.
bool first_container_of_attempt(const std::string& container_id, int attempt);
// A node state of a NodeManager that left: LOST, SHUTDOWN, DECOMMISSIONED, REBOOTED.
bool yarn_node_gone(const std::string& state);

// Whether an RM-supplied nodeHTTPAddress is a plain host:port that khagent
// may put after "http://" to reach the NodeManager: a host name or IPv4
// address ([A-Za-z0-9._-]) or a bracketed IPv6 address, and a port 1..65535.
// Nothing else: no '/', '?', '#', '@', '%', whitespace or control
// characters, which would move the request to another path, host or user.
bool yarn_http_address_ok(const std::string& address);

// Picks this node from the RM's list (nodes LOST, SHUTDOWN, DECOMMISSIONED
// or REBOOTED are skipped): an entry whose nodeHostName is one of
// `hostnames` (compared case-insensitively; a short name also matches the
// first label of an FQDN). ENOENT when none, EEXIST when several (several
// NodeManagers on one host need yarn.node_id).
Result<YarnNodeReport> match_node(const std::vector<YarnNodeReport>& nodes, const std::vector<std::string>& hostnames);

// The REST reads, over clients that handle HA, auth, retries and timeouts.
class YarnRest {
 public:
  YarnRest(HttpClient& rm, HttpClient& nm) : rm_(rm), nm_(nm) {}

  Result<std::vector<YarnNodeReport>> nodes(const std::atomic<bool>* abort = nullptr);
  Result<YarnNodeReport> node(const std::string& id, const std::atomic<bool>* abort = nullptr);
  Result<std::vector<YarnApp>> running_apps(const std::atomic<bool>* abort = nullptr);
  Result<YarnAmAttempt> am_attempt(const std::string& app_id, const std::atomic<bool>* abort = nullptr);
  Result<std::vector<NmContainer>> containers(const std::atomic<bool>* abort = nullptr);
  Result<YarnResource> nm_configured(const std::atomic<bool>* abort = nullptr);
  // Node and application ids go into the path percent-encoded
  // (url_path_segment): a node id "h:1/../../x?y=" cannot leave
  // /ws/v1/cluster/nodes/.

 private:
  Result<std::string> get(HttpClient& c, const std::string& path, const std::atomic<bool>* abort);
  template <typename T>
  Result<T> fetch(HttpClient& c, const std::string& path, Result<T> (*parse)(const std::string&),
                  const std::atomic<bool>* abort);
  HttpClient& rm_;
  HttpClient& nm_;
};

}  // namespace khagent
