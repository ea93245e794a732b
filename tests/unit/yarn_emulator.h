// An in-process YARN emulator for unit tests: one or two ResourceManagers
// (for HA, a standby that redirects to the active one) and one NodeManager,
// each an httplib server on 127.0.0.1 (ephemeral port), speaking the Hadoop
// 3.x REST shapes khagent reads and writes:
//
//   RM GET  /ws/v1/cluster/info
//   RM GET  /ws/v1/cluster/nodes, /ws/v1/cluster/nodes/{id}
//   RM POST /ws/v1/cluster/nodes/{id}/resource   (applied to the node's totalResource)
//   RM GET  /ws/v1/cluster/apps[?states=...], /ws/v1/cluster/apps/{id},
//           /ws/v1/cluster/apps/{id}/appattempts
//   NM GET  /ws/v1/node/info, /ws/v1/node/containers, /ws/v1/node/containers/{id}
//
// Every request is recorded (server, method, path, query, body, content type)
// for assertions, and each server has failure switches: refuse (the server is
// stopped, its port refuses connections; it comes back on the same port),
// delay_ms, force_status, post_status, malformed_json, truncated_json, require_user.
//
// Where a real Hadoop 3.5.0 RM and NM (tests/yarn, MiniYARNCluster) were
// seen to behave in a way that matters, the emulator does the same:
//   - the update-resource POST builds the node's new total from memory and
//     vCores alone: every other resource type (EmuNode::others) becomes 0,
//     whatever resourceInformations the body carries;
//   - its answer is the node's total from before the update;
//   - the NodeManager's own totals (/ws/v1/node/info) follow one read later
//     (the real one takes them with its next heartbeat);
//   - a node that left (LOST, SHUTDOWN, DECOMMISSIONED, REBOOTED) answers the
//     POST with 500; a DECOMMISSIONING one has its total set to what its
//     containers use whenever it is read (the RM does that every heartbeat);
//   - an attempt's containerId is "" for a caller without view access
//     (set_view_access(false));
//   - simple auth without user.name (require_user) is a 401 from the
//     authentication filter, Jetty's error page (JSON {"servlet","message",
//     "url","status"} for a client accepting JSON, else HTML); a path no REST
//     resource serves is a 404 HTML page; an unknown node is a 404
//     RemoteException.
#pragma once

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "khagent/policy/yarn.h"

namespace yarntest {

using khagent::YarnResource;

enum class Srv { RM0 = 0, RM1 = 1, NM = 2 };

inline const char* srv_name(Srv s) {
  switch (s) {
    case Srv::RM0: return "rm0";
    case Srv::RM1: return "rm1";
    case Srv::NM: return "nm";
  }
  return "?";
}

// Failure switches of one server (refuse is separate: see set_refuse()).
struct Faults {
  int delay_ms = 0;             // sleep this long in the handler before answering
  int force_status = 0;         // != 0: answer every request with this status and a RemoteException
  int post_status = 0;          // != 0: the same for POST/PUT only (e.g. 403: reads allowed, updates not)
  bool malformed_json = false;  // answer bodies that are not JSON
  bool truncated_json = false;  // answer bodies cut in the middle
  bool require_user = false;    // 401 without a user.name query parameter (simple auth)
  bool hadoop2 = false;         // no update-resource endpoint: Jersey 1's 404 for its path
};

struct RecordedRequest {
  Srv server = Srv::RM0;
  std::string method;
  std::string path;   // decoded, without the query
  std::string query;  // raw, without '?'
  std::string body;
  std::string content_type;
  std::multimap<std::string, std::string> params;
  int status = 0;  // what the emulator answered

  bool has_param(const std::string& k) const { return params.count(k) > 0; }
  std::string param(const std::string& k) const {
    auto it = params.find(k);
    return it == params.end() ? "" : it->second;
  }
};

struct EmuNode {
  std::string id;            // host:port
  std::string host;          // nodeHostName
  std::string http_address;  // nodeHTTPAddress; "" = the emulated NodeManager's address
  std::string state = "RUNNING";
  std::string rack = "/default-rack";
  YarnResource total{8, 16384};
  std::map<std::string, int64_t> others;  // other resource types in totalResource, e.g. yarn.io/gpu
  YarnResource used{0, 0};
  int64_t num_containers = 0;
  // What the resource updates did.
  int updates = 0;
  int64_t last_over_commit_timeout = 0;
  std::string last_post_body;
  YarnResource before_update;  // what reads show while lag_reads > 0
  int lag_reads = 0;
};

struct EmuApp {
  std::string id;  // application_<ts>_<seq>
  std::string queue = "root.default";
  int priority = 0;
  uint64_t started_ms = 1700000000000;
  std::string state = "RUNNING";
  std::string user = "alice";
  std::string am_container;  // "" = the attempt shows no container
  std::string am_node;       // host:port of the AM container
};

struct EmuContainer {
  std::string id;
  std::string state = "RUNNING";
  int64_t vcores = 1;
  int64_t memory_mb = 1024;
  std::string user = "alice";
  std::string execution_type = "GUARANTEED";
};

// How an empty list is written: {"nodes":null}, {"nodes":""}, {"nodes":{}} or
// {"nodes":{"node":[]}}.
enum class EmptyForm { Null, EmptyString, EmptyObject, EmptyList };

class YarnEmulator {
 public:
  // `ha`: two ResourceManagers, RM0 standby and RM1 active (see set_active_rm()).
  explicit YarnEmulator(bool ha = false) : ha_(ha) {
    active_rm_ = ha ? 1 : 0;
    start(Srv::RM0);
    if (ha_) start(Srv::RM1);
    start(Srv::NM);
  }
  ~YarnEmulator() {
    for (Srv s : {Srv::RM0, Srv::RM1, Srv::NM}) stop(s);
  }
  YarnEmulator(const YarnEmulator&) = delete;
  YarnEmulator& operator=(const YarnEmulator&) = delete;

  // ---- addresses ------------------------------------------------------------

  int port(Srv s) const { return slot(s).port; }
  std::string url(Srv s) const { return "http://127.0.0.1:" + std::to_string(port(s)); }
  std::string rm_url(int i = 0) const { return url(i == 0 ? Srv::RM0 : Srv::RM1); }
  // Both RMs with HA (standby first), else the one.
  std::vector<std::string> rm_urls() const {
    std::vector<std::string> out{rm_url(0)};
    if (ha_) out.push_back(rm_url(1));
    return out;
  }
  std::string nm_url() const { return url(Srv::NM); }
  std::string nm_address() const { return "127.0.0.1:" + std::to_string(port(Srv::NM)); }

  // ---- state ----------------------------------------------------------------

  // Adds or replaces a node (by id).
  void add_node(EmuNode n) {
    std::lock_guard lk(mu_);
    if (n.http_address.empty() && n.state == "RUNNING") n.http_address = nm_address();
    for (auto& e : nodes_) {
      if (e.id == n.id) {
        e = std::move(n);
        return;
      }
    }
    nodes_.push_back(std::move(n));
  }
  // The usual setup: one node `id` on `host` served by the emulated NM with
  // `total` on both sides (RM totalResource and NM configured resources).
  void add_this_node(const std::string& id, const std::string& host, YarnResource total) {
    EmuNode n;
    n.id = id;
    n.host = host;
    n.total = total;
    add_node(n);
    set_nm_info(id, host, total);
  }
  std::optional<EmuNode> node(const std::string& id) const {
    std::lock_guard lk(mu_);
    for (const auto& n : nodes_) {
      if (n.id == id) return n;
    }
    return std::nullopt;
  }
  void set_node_state(const std::string& id, const std::string& state) {
    std::lock_guard lk(mu_);
    for (auto& n : nodes_) {
      if (n.id == id) n.state = state;
    }
  }
  void set_node_total(const std::string& id, YarnResource r) {
    std::lock_guard lk(mu_);
    for (auto& n : nodes_) {
      if (n.id == id) n.total = r;
    }
  }
  void clear_nodes() {
    std::lock_guard lk(mu_);
    nodes_.clear();
  }

  void add_app(EmuApp a) {
    std::lock_guard lk(mu_);
    apps_.push_back(std::move(a));
  }
  void clear_apps() {
    std::lock_guard lk(mu_);
    apps_.clear();
  }

  void add_container(EmuContainer c) {
    std::lock_guard lk(mu_);
    containers_.push_back(std::move(c));
  }
  void set_container_state(const std::string& id, const std::string& state) {
    std::lock_guard lk(mu_);
    for (auto& c : containers_) {
      if (c.id == id) c.state = state;
    }
  }
  void clear_containers() {
    std::lock_guard lk(mu_);
    containers_.clear();
  }

  // What the NodeManager's /ws/v1/node/info says.
  void set_nm_info(const std::string& node_id, const std::string& host, YarnResource configured) {
    std::lock_guard lk(mu_);
    nm_node_id_ = node_id;
    nm_host_ = host;
    nm_configured_ = configured;
    nm_pending_.reset();
  }

  void set_empty_form(EmptyForm f) {
    std::lock_guard lk(mu_);
    empty_form_ = f;
  }
  // Lists of one element are written as the element itself (older RMs).
  void set_single_as_object(bool on) {
    std::lock_guard lk(mu_);
    single_as_object_ = on;
  }
  // false: the RM writes every attempt's containerId as "" (a caller
  // without view access to the applications).
  void set_view_access(bool on) {
    std::lock_guard lk(mu_);
    view_access_ = on;
  }
  // After a POST, this many reads of that node still show the total from
  // before it (the RM applies an update through its event dispatcher).
  void set_update_lag(int reads) {
    std::lock_guard lk(mu_);
    update_lag_ = reads;
  }
  // With HA: which RM is active (0 or 1); the other redirects to it.
  void set_active_rm(int i) {
    std::lock_guard lk(mu_);
    active_rm_ = i;
  }

  // ---- failures ---------------------------------------------------------------

  void set_faults(Srv s, Faults f) {
    std::lock_guard lk(mu_);
    faults_[idx(s)] = f;
  }
  Faults faults(Srv s) const {
    std::lock_guard lk(mu_);
    return faults_[idx(s)];
  }
  // Refuse: the server stops (connections are refused); false brings it back
  // on the same port.
  void set_refuse(Srv s, bool refuse) {
    if (refuse) {
      stop(s);
    } else if (!slot(s).running) {
      start(s, slot(s).port);
    }
  }

  // ---- recorded requests --------------------------------------------------------

  std::vector<RecordedRequest> requests() const {
    std::lock_guard lk(mu_);
    return requests_;
  }
  // Those to `s`, optionally only of `method` and with `path` (exact).
  std::vector<RecordedRequest> requests(Srv s, const std::string& method = "", const std::string& path = "") const {
    std::lock_guard lk(mu_);
    std::vector<RecordedRequest> out;
    for (const auto& r : requests_) {
      if (r.server != s) continue;
      if (!method.empty() && r.method != method) continue;
      if (!path.empty() && r.path != path) continue;
      out.push_back(r);
    }
    return out;
  }
  // Every POST that reached any RM.
  std::vector<RecordedRequest> rm_posts() const {
    std::lock_guard lk(mu_);
    std::vector<RecordedRequest> out;
    for (const auto& r : requests_) {
      if (r.server != Srv::NM && r.method == "POST") out.push_back(r);
    }
    return out;
  }
  void clear_requests() {
    std::lock_guard lk(mu_);
    requests_.clear();
  }
  // Requests that reached `s`'s handler, counted on arrival (a request is
  // recorded above only once it is answered, after any delay).
  int arrivals(Srv s) const { return slot(s).arrivals.load(); }

  // Stops (joins) or restarts one server; the destructor stops all.
  void stop(Srv s) {
    Slot& sl = slot(s);
    std::lock_guard lk(sl.life);
    if (!sl.running) return;
    sl.stopping = true;
    sl.svr->stop();
    if (sl.thread.joinable()) sl.thread.join();
    sl.svr.reset();
    sl.running = false;
  }

 private:
  using json = nlohmann::json;
  using Clock = std::chrono::steady_clock;

  struct Slot {
    std::mutex life;
    std::unique_ptr<httplib::Server> svr;
    std::thread thread;
    int port = 0;
    std::atomic<bool> stopping{false};
    std::atomic<bool> done{false};
    std::atomic<bool> running{false};
    std::atomic<int> arrivals{0};
  };

  static size_t idx(Srv s) { return static_cast<size_t>(s); }
  Slot& slot(Srv s) { return slots_[idx(s)]; }
  const Slot& slot(Srv s) const { return slots_[idx(s)]; }

  // Starts `s` on `port` (0: an ephemeral one) and waits until it accepts.
  void start(Srv s, int want_port = 0) {
    Slot& sl = slot(s);
    std::lock_guard lk(sl.life);
    if (sl.running) return;
    auto svr = std::make_unique<httplib::Server>();
    svr->new_task_queue = [] { return new httplib::ThreadPool(8); };
    // SO_REUSEADDR so that a restarted server gets its port back from
    // TIME_WAIT; no SO_REUSEPORT (nobody else may share the port).
    svr->set_socket_options([](socket_t fd) {
      int yes = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    // One request per connection, short timeouts: stop() never waits long
    // on an idle connection.
    svr->set_keep_alive_max_count(1);
    svr->set_keep_alive_timeout(1);
    svr->set_read_timeout(2);
    svr->set_write_timeout(2);
    auto h = [this, s](const httplib::Request& q, httplib::Response& r) { handle(s, q, r); };
    svr->Get(".*", h);
    svr->Post(".*", h);
    svr->Put(".*", h);
    svr->Delete(".*", h);
    int port = 0;
    if (want_port == 0) {
      port = svr->bind_to_any_port("127.0.0.1");
    } else {
      // The port may linger a moment after the previous server closed it.
      for (int i = 0; i < 200 && port == 0; ++i) {
        if (svr->bind_to_port("127.0.0.1", want_port)) {
          port = want_port;
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
    }
    if (port <= 0) throw std::runtime_error(std::string("yarn emulator: cannot bind ") + srv_name(s));
    sl.port = port;
    sl.stopping = false;
    sl.done = false;
    sl.svr = std::move(svr);
    httplib::Server* raw = sl.svr.get();
    Slot* sp = &sl;
    sl.thread = std::thread([raw, sp] {
      raw->listen_after_bind();
      sp->done = true;
    });
    // httplib's stop() does nothing until the accept loop runs: wait for it.
    while (!sl.svr->is_running() && !sl.done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (sl.done) {
      sl.thread.join();
      sl.svr.reset();
      throw std::runtime_error(std::string("yarn emulator: ") + srv_name(s) + " stopped at once");
    }
    sl.running = true;
  }

  // Sleeps up to `ms`, less when the server is stopping.
  void nap(Srv s, int ms) const {
    const Slot& sl = slot(s);
    for (auto until = Clock::now() + std::chrono::milliseconds(ms); !sl.stopping && Clock::now() < until;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  static json remote_exception(const std::string& exception, const std::string& message) {
    return {{"RemoteException",
             {{"exception", exception},
              {"message", message},
              {"javaClassName", "org.apache.hadoop.yarn.webapp." + exception}}}};
  }

  static std::string reason_exception(int status) {
    switch (status) {
      case 400: return "BadRequestException";
      case 401: return "AuthenticationException";
      case 403: return "ForbiddenException";
      case 404: return "NotFoundException";
      default: return "WebApplicationException";
    }
  }

  // {"<outer>":{"<inner>":[...]}} with the configured empty and single forms.
  json list_doc(const char* outer, const char* inner, std::vector<json> items) const {
    if (items.empty()) {
      switch (empty_form_) {
        case EmptyForm::Null: return {{outer, nullptr}};
        case EmptyForm::EmptyString: return {{outer, ""}};
        case EmptyForm::EmptyObject: return {{outer, json::object()}};
        case EmptyForm::EmptyList: return {{outer, {{inner, json::array()}}}};
      }
    }
    if (items.size() == 1 && single_as_object_) return {{outer, {{inner, items.front()}}}};
    return {{outer, {{inner, std::move(items)}}}};
  }

  static json node_json(const EmuNode& n) {
    json j = {{"id", n.id},
              {"rack", n.rack},
              {"state", n.state},
              {"nodeHostName", n.host},
              {"nodeHTTPAddress", n.http_address},
              {"lastHealthUpdate", 1700000000000LL},
              {"version", "3.3.6"},
              {"healthReport", ""},
              {"numContainers", n.num_containers},
              {"usedMemoryMB", n.used.memory_mb},
              {"availMemoryMB", std::max<int64_t>(0, n.total.memory_mb - n.used.memory_mb)},
              {"usedVirtualCores", n.used.vcores},
              {"availableVirtualCores", std::max<int64_t>(0, n.total.vcores - n.used.vcores)},
              {"totalResource", resource_json(n.total, n.others)},
              {"usedResource", {{"memory", n.used.memory_mb}, {"vCores", n.used.vcores}}}};
    return j;
  }

  // {"memory","vCores"[,"resourceInformations"]} as the RM writes a Resource.
  static json resource_json(const YarnResource& r, const std::map<std::string, int64_t>& others) {
    json j = {{"memory", r.memory_mb}, {"vCores", r.vcores}};
    if (others.empty()) return j;
    json infos = json::array();
    auto info = [](const std::string& name, int64_t value, const char* units) {
      return json{{"maximumAllocation", INT64_MAX}, {"minimumAllocation", 0}, {"name", name},
                  {"resourceType", "COUNTABLE"},    {"units", units},         {"value", value}};
    };
    infos.push_back(info("memory-mb", r.memory_mb, "Mi"));
    infos.push_back(info("vcores", r.vcores, ""));
    for (const auto& [name, value] : others) infos.push_back(info(name, value, ""));
    j["resourceInformations"] = {{"resourceInformation", std::move(infos)}};
    return j;
  }

  static json app_json(const EmuApp& a) {
    return {{"id", a.id},
            {"user", a.user},
            {"name", "job " + a.id},
            {"queue", a.queue},
            {"state", a.state},
            {"finalStatus", "UNDEFINED"},
            {"priority", a.priority},
            {"startedTime", a.started_ms},
            {"applicationType", "MAPREDUCE"},
            {"amHostHttpAddress", ""}};
  }

  static std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t start = 0;
    for (;;) {
      size_t p = s.find(sep, start);
      out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
      if (p == std::string::npos) return out;
      start = p + 1;
    }
  }

  static std::string upper(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
  }

  struct Answer {
    int status = 200;
    json body;
    std::string location;
  };

  static Answer not_found(const std::string& msg) { return {404, remote_exception("NotFoundException", msg), ""}; }

  // The RM's routes; called with mu_ held.
  Answer rm_route(Srv s, const httplib::Request& q, const std::string& path) {
    const std::string base = "/ws/v1/cluster";
    if (path == base + "/info" || path == base) {
      bool active = static_cast<int>(idx(s)) == active_rm_;
      return {200,
              {{"clusterInfo",
                {{"id", 1700000000000LL},
                 {"state", "STARTED"},
                 {"haState", active ? "ACTIVE" : "STANDBY"},
                 {"resourceManagerVersion", "3.3.6"},
                 {"hadoopVersion", "3.3.6"}}}},
              ""};
    }
    if (path.rfind(base + "/", 0) != 0) return not_found("java.lang.Exception: no such path " + path);
    std::vector<std::string> parts = split(path.substr(base.size() + 1), '/');
    if (parts[0] == "nodes") {
      if (parts.size() == 1) {
        if (q.method != "GET") return method_not_allowed(q);
        std::vector<json> items;
        for (const auto& n : nodes_) items.push_back(node_json(n));
        return {200, list_doc("nodes", "node", std::move(items)), ""};
      }
      EmuNode* n = nullptr;
      for (auto& e : nodes_) {
        if (e.id == parts[1]) n = &e;
      }
      if (n == nullptr) return not_found("nodeId, " + parts[1] + ", is not found");
      // The RM sets a decommissioning node's total to what its containers
      // use at every heartbeat; reads stand in for heartbeats here.
      if (n->state == "DECOMMISSIONING") n->total = n->used;
      if (parts.size() == 2) {
        if (q.method != "GET") return method_not_allowed(q);
        if (n->lag_reads > 0) {
          n->lag_reads--;
          EmuNode old = *n;
          old.total = n->before_update;
          return {200, {{"node", node_json(old)}}, ""};
        }
        return {200, {{"node", node_json(*n)}}, ""};
      }
      if (parts.size() == 3 && parts[2] == "resource") {
        if (q.method != "POST" && q.method != "PUT") return method_not_allowed(q);
        return update_resource(q, *n);
      }
      return no_such_path(path);
    }
    if (parts[0] == "apps") {
      if (q.method != "GET") return method_not_allowed(q);
      if (parts.size() == 1) {
        std::vector<std::string> states;
        if (q.has_param("states")) {
          for (const auto& st : split(q.get_param_value("states"), ',')) states.push_back(upper(st));
        }
        std::vector<json> items;
        for (const auto& a : apps_) {
          if (!states.empty() && std::find(states.begin(), states.end(), a.state) == states.end()) continue;
          items.push_back(app_json(a));
        }
        return {200, list_doc("apps", "app", std::move(items)), ""};
      }
      const EmuApp* a = nullptr;
      for (const auto& e : apps_) {
        if (e.id == parts[1]) a = &e;
      }
      if (a == nullptr) {
        return not_found("java.lang.Exception: app with id: " + parts[1] + " not found");
      }
      if (parts.size() == 2) return {200, {{"app", app_json(*a)}}, ""};
      if (parts.size() == 3 && parts[2] == "appattempts") {
        json att = {{"id", 1},
                    {"startTime", a->started_ms},
                    {"finishedTime", 0},
                    {"nodeId", a->am_node},
                    {"nodeHttpAddress", a->am_node.empty() ? "" : nm_address()},
                    {"logsLink", "http://" + nm_address() + "/node/containerlogs/" + a->am_container + "/" + a->user},
                    {"appAttemptId", "appattempt" + a->id.substr(std::string("application").size()) + "_000001"},
                    {"appAttemptState", "RUNNING"}};
        att["containerId"] = view_access_ ? a->am_container : "";
        if (!view_access_) att["nodeId"] = att["nodeHttpAddress"] = att["logsLink"] = "";
        return {200, list_doc("appAttempts", "appAttempt", {att}), ""};
      }
      return no_such_path(path);
    }
    return no_such_path(path);
  }

  // Jetty's own page for a path no REST resource serves.
  static Answer no_such_path(const std::string& path) { return {404, html_error(404, "Not Found", path), ""}; }
  static std::string html_error(int status, const std::string& reason, const std::string& uri) {
    std::string code = std::to_string(status);
    return "<html>\n<head>\n<meta http-equiv=\"Content-Type\" content=\"text/html;charset=ISO-8859-1\"/>\n"
           "<title>Error " +
           code + " " + reason + "</title>\n</head>\n<body><h2>HTTP ERROR " + code + " " + reason +
           "</h2>\n<table>\n<tr><th>URI:</th><td>" + uri + "</td></tr>\n<tr><th>STATUS:</th><td>" + code +
           "</td></tr>\n</table>\n\n</body>\n</html>\n";
  }

  static Answer method_not_allowed(const httplib::Request& q) {
    return {405, remote_exception("WebApplicationException", "HTTP 405 Method " + q.method + " Not Allowed"), ""};
  }

  // POST /ws/v1/cluster/nodes/{id}/resource with
  // {"resource":{"memory":M,"vCores":V},"overCommitTimeout":T}.
  // Also what the real NodeManager does on its next heartbeat: it takes the
  // new resource, so its /ws/v1/node/info reports it from then on.
  Answer update_resource(const httplib::Request& q, EmuNode& n) {
    std::string ct = q.get_header_value("Content-Type");
    if (ct.rfind("application/json", 0) != 0) {
      return {415, remote_exception("WebApplicationException", "HTTP 415 Unsupported Media Type: " + ct), ""};
    }
    auto bad = [](const std::string& why) {
      return Answer{400, remote_exception("BadRequestException", "java.lang.Exception: " + why), ""};
    };
    json doc = json::parse(q.body, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) return bad("request body is not a JSON object");
    auto r = doc.find("resource");
    if (r == doc.end() || !r->is_object()) return bad("no resource");
    auto m = r->find("memory");
    auto v = r->find("vCores");
    if (m == r->end() || !m->is_number_integer() || v == r->end() || !v->is_number_integer()) {
      return bad("resource needs integer memory and vCores");
    }
    if (m->get<int64_t>() < 0 || v->get<int64_t>() < 0) return bad("negative resource");
    int64_t timeout = 0;
    if (auto t = doc.find("overCommitTimeout"); t != doc.end()) {
      if (!t->is_number_integer()) return bad("overCommitTimeout is not an integer");
      timeout = t->get<int64_t>();
    }
    static const std::vector<std::string> kGone = {"LOST", "SHUTDOWN", "DECOMMISSIONED", "REBOOTED"};
    if (std::find(kGone.begin(), kGone.end(), n.state) != kGone.end()) {
      return {500, remote_exception("YarnRuntimeException", "Failed to update the node resource " + n.id + "."), ""};
    }
    // The answer: the total read before the queued update is applied.
    json before = {{"resourceInfo", resource_json(n.total, n.others)}};
    n.before_update = n.total;
    n.lag_reads = update_lag_;
    // The new total from memory and vCores alone: other types become 0.
    n.total = {v->get<int64_t>(), m->get<int64_t>()};
    for (auto& [name, value] : n.others) value = 0;
    // The NodeManager takes it with its next heartbeat (one read later here).
    if (n.id == nm_node_id_) nm_pending_ = n.total;
    n.updates++;
    n.last_over_commit_timeout = timeout;
    n.last_post_body = q.body;
    return {200, before, ""};
  }

  // The NodeManager's routes; called with mu_ held.
  Answer nm_route(const httplib::Request& q, const std::string& path) {
    if (q.method != "GET") return method_not_allowed(q);
    if (path == "/ws/v1/node/info" || path == "/ws/v1/node") {
      if (nm_pending_ && nm_pending_reads_++ > 0) {
        nm_configured_ = *nm_pending_;
        nm_pending_.reset();
        nm_pending_reads_ = 0;
      }
      return {200,
              {{"nodeInfo",
                {{"id", nm_node_id_},
                 {"nodeHostName", nm_host_},
                 {"healthReport", ""},
                 {"totalVmemAllocatedContainersMB", nm_configured_.memory_mb * 21 / 10},
                 {"totalPmemAllocatedContainersMB", nm_configured_.memory_mb},
                 {"totalVCoresAllocatedContainers", nm_configured_.vcores},
                 {"vmemCheckEnabled", false},
                 {"pmemCheckEnabled", true},
                 {"lastNodeUpdateTime", 1700000000000LL},
                 {"nodeHealthy", true},
                 {"nodeManagerVersion", "3.3.6"},
                 {"hadoopVersion", "3.3.6"}}}},
              ""};
    }
    auto cjson = [this](const EmuContainer& c) {
      return json{{"id", c.id},
                  {"state", c.state},
                  {"exitCode", -1000},
                  {"diagnostics", ""},
                  {"user", c.user},
                  {"totalMemoryNeededMB", c.memory_mb},
                  {"totalVCoresNeeded", c.vcores},
                  {"containerLogsLink", "http://" + nm_address() + "/node/containerlogs/" + c.id + "/" + c.user},
                  {"nodeId", nm_node_id_},
                  {"executionType", c.execution_type}};
    };
    if (path == "/ws/v1/node/containers") {
      std::vector<json> items;
      for (const auto& c : containers_) items.push_back(cjson(c));
      return {200, list_doc("containers", "container", std::move(items)), ""};
    }
    const std::string prefix = "/ws/v1/node/containers/";
    if (path.rfind(prefix, 0) == 0) {
      for (const auto& c : containers_) {
        if (c.id == path.substr(prefix.size())) return {200, {{"container", cjson(c)}}, ""};
      }
      return not_found("java.lang.Exception: container " + path.substr(prefix.size()) + " not found");
    }
    return no_such_path(path);
  }

  void handle(Srv s, const httplib::Request& q, httplib::Response& res) {
    slot(s).arrivals++;
    RecordedRequest rec;
    rec.server = s;
    rec.method = q.method;
    rec.path = q.path;
    if (size_t p = q.target.find('?'); p != std::string::npos) rec.query = q.target.substr(p + 1);
    rec.body = q.body;
    rec.content_type = q.get_header_value("Content-Type");
    for (const auto& [k, v] : q.params) rec.params.emplace(k, v);

    Faults f;
    {
      std::lock_guard lk(mu_);
      f = faults_[idx(s)];
    }
    if (f.delay_ms > 0) nap(s, f.delay_ms);

    Answer a;
    {
      std::lock_guard lk(mu_);
      if (f.require_user && !q.has_param("user.name")) {
        // Jetty's error page: JSON for a client that accepts it, else HTML.
        if (q.get_header_value("Accept").find("json") != std::string::npos) {
          a = {401,
               json{{"servlet", "org.apache.hadoop.shaded.org.glassfish.jersey.servlet.ServletContainer-1"},
                    {"message", "Authentication required"},
                    {"url", q.path},
                    {"status", "401"}},
               ""};
        } else {
          a = {401, html_error(401, "Authentication required", q.path), ""};
        }
      } else if (f.force_status != 0 || (f.post_status != 0 && (q.method == "POST" || q.method == "PUT"))) {
        int st = f.force_status != 0 ? f.force_status : f.post_status;
        a = {st, remote_exception(reason_exception(st), "forced HTTP " + std::to_string(st) + " by the emulator"), ""};
      } else if (f.hadoop2 && q.path.size() > 9 && q.path.compare(q.path.size() - 9, 9, "/resource") == 0) {
        a = {404,
             {{"RemoteException",
               {{"exception", "NotFoundException"},
                {"message", "null for uri: http://127.0.0.1:" + std::to_string(slot(s).port) + q.target},
                {"javaClassName", "com.sun.jersey.api.NotFoundException"}}}},
             ""};
      } else if (s != Srv::NM && static_cast<int>(idx(s)) != active_rm_ && q.path != "/ws/v1/cluster/info") {
        // An HA standby: redirect to the active RM, same path and query.
        const Slot& act = slots_[static_cast<size_t>(active_rm_)];
        a.status = 307;
        a.location = "http://127.0.0.1:" + std::to_string(act.port) + q.target;
        a.body = "This is standby RM. The redirect url is: " + a.location;
      } else if (s == Srv::NM) {
        a = nm_route(q, q.path);
      } else {
        a = rm_route(s, q, q.path);
      }
      rec.status = a.status;
      requests_.push_back(rec);
    }

    std::string body = a.body.is_string() ? a.body.get<std::string>() : a.body.dump();
    if (f.malformed_json) body = "<html><body>this is not {json</body></html>";
    if (f.truncated_json) body = body.substr(0, body.size() / 2);
    res.status = a.status;
    if (!a.location.empty()) res.set_header("Location", a.location);
    res.set_content(body, a.status == 307                                      ? "text/plain"
                          : a.body.is_string() && body.rfind("<html>", 0) == 0 ? "text/html;charset=iso-8859-1"
                                                                               : "application/json");
  }

  const bool ha_;
  std::array<Slot, 3> slots_;

  mutable std::mutex mu_;
  int active_rm_ = 0;
  std::array<Faults, 3> faults_{};
  std::vector<EmuNode> nodes_;
  std::vector<EmuApp> apps_;
  std::vector<EmuContainer> containers_;
  std::string nm_node_id_ = "127.0.0.1:45454";
  std::string nm_host_ = "127.0.0.1";
  YarnResource nm_configured_{8, 16384};
  std::optional<YarnResource> nm_pending_;  // posted, not yet seen by the NodeManager
  int nm_pending_reads_ = 0;
  bool view_access_ = true;
  int update_lag_ = 0;
  EmptyForm empty_form_ = EmptyForm::Null;
  bool single_as_object_ = false;
  std::vector<RecordedRequest> requests_;
};

}  // namespace yarntest
