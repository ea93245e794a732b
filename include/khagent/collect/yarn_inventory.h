// This node as YARN sees it, for the downscaler: which NodeManager it is,
// its resources, its containers, their applications' queues and AMs (read
// over collect/yarn_rest), and the containers reclaim may choose from.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "khagent/collect/yarn_rest.h"
#include "khagent/config/config.h"
#include "khagent/model/yarn_resource.h"
#include "khagent/util/http_client.h"

namespace khagent {

// The HTTP client options for the RM or NM at `urls` from the YARN
// configuration (auth, TLS, timeouts, retries).
HttpClientOptions yarn_client_options(const YarnConfig& c, std::vector<std::string> urls);

// Epoch ms of the cgroup's creation: cgroupfs keeps a directory's mtime at
// its creation (adding processes or children does not change it), and the
// NodeManager creates the cgroup when it launches the container. 0 if the
// directory cannot be read.
uint64_t cgroup_birth_ms(const std::string& dir);

// Reports a failed or partial read: `cause` is a fixed name of the step,
// `err` its errno, `what` the whole message.
using YarnErrorFn = std::function<void(const std::string& cause, int err, const std::string& what)>;

// What the NodeManager runs and the RM says of it, as of the last refresh.
struct YarnInventory {
  std::vector<NmContainer> containers;  // usable ones: numbers in range, within the node
  std::map<std::string, YarnApp> apps;  // by application id
  // application id -> its latest attempt and AM container. When the RM hides
  // the container (no view access) or cannot be asked, the AM is the first
  // container of that attempt (first_container_of_attempt).
  std::map<std::string, YarnAmAttempt> am_of_app;
  std::set<std::string> am_guessed;  // ...taken from the containers seen (RM not asked)
};

// The RM and this node's NodeManager: finds the node, reads its resources
// and containers, and keeps the inventory. Failed reads go to `error`;
// `abort` cuts requests short (stopping).
class YarnNodeReader {
 public:
  YarnNodeReader(YarnConfig cfg, std::vector<std::string> hostnames, YarnErrorFn error, const std::atomic<bool>* abort);

  HttpClient& rm() { return *rm_; }
  // The NodeManager's client; null until its address is known.
  HttpClient* nm() { return nm_.get(); }

  // This node in the RM: found by host name when `id` is "", else read
  // again by id. Opens the NodeManager's client on the way when there is
  // none (yarn.nm_url, else the address the RM gives, checked to be a plain
  // host:port). nullopt when it failed (reported).
  std::optional<YarnNodeReport> locate(const std::string& id);

  struct NodeNow {
    YarnResource configured;  // the NodeManager's own resources now
    YarnNodeReport node;      // the node in the RM
    std::vector<NmContainer> containers;
  };
  // Reads node `id`: the NodeManager's resources, the RM's entry, the
  // NodeManager's containers. nullopt when a read failed (reported) or,
  // with `*gone`, when the node left the RM without yarn.node_id set: the
  // NodeManager's client is then dropped, to be found again.
  std::optional<NodeNow> read_node(const std::string& id, bool* gone);

  // Takes `containers` (from read_node) into the inventory, leaving out
  // those with numbers out of range or larger than `node_max`, and reads the
  // running applications and the AMs of those with a container here. A
  // failed application read keeps the last known ones.
  void update(std::vector<NmContainer> containers, const YarnResource& node_max);

  const YarnInventory& inventory() const { return inv_; }
  // The node's state in the RM at the last read_node ("" before).
  const std::string& node_state() const { return node_state_; }

 private:
  void open_nm(const std::string& url);

  const YarnConfig cfg_;
  const std::vector<std::string> hostnames_;
  const YarnErrorFn error_;
  const std::atomic<bool>* abort_;
  std::unique_ptr<HttpClient> rm_;
  std::unique_ptr<HttpClient> nm_;
  std::unique_ptr<YarnRest> rest_;
  YarnInventory inv_;
  std::string node_state_;
};

}  // namespace khagent
