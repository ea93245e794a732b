#include "khagent/collect/yarn_rest.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "khagent/util/curl_util.h"
#include "khagent/util/hadoop_error.h"

namespace khagent {

namespace {

using json = nlohmann::json;

// Problems in a document are thrown as this and returned with `err`: EPROTO
// (not JSON, or something missing or of the wrong type), ERANGE (a number out
// of range), E2BIG (over kYarnJsonLimits).
struct ShapeError {
  std::string what;
  int err = EPROTO;
};

json parse(const std::string& text, const char* what) {
  auto doc = parse_json_bounded(text, kYarnJsonLimits);
  if (!doc) {
    if (doc.error().err == E2BIG) throw ShapeError{doc.error().message, E2BIG};  // guarded() names `what`
    throw ShapeError{std::string(what) + ": not JSON (starts \"" + body_excerpt(text, 80) + "\")"};
  }
  if (!doc->is_object()) throw ShapeError{std::string(what) + ": not a JSON object"};
  return std::move(doc).value();
}

const json& member(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) throw ShapeError{where + ": no \"" + key + "\""};
  return *it;
}

std::string str(const json& obj, const char* key, const std::string& where, bool required = false) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required) throw ShapeError{where + ": no \"" + key + "\""};
    return "";
  }
  if (!it->is_string()) throw ShapeError{where + ": \"" + key + "\" is not a string"};
  return it->get<std::string>();
}

// obj[key] as an integer in [lo, hi] (absent or null: 0, unless required).
int64_t num(const json& obj, const char* key, const std::string& where, int64_t lo, int64_t hi, bool required = false) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required) throw ShapeError{where + ": no \"" + key + "\""};
    return 0;
  }
  if (!it->is_number()) throw ShapeError{where + ": \"" + key + "\" is not a number"};
  auto v = json_int_in_range(*it, lo, hi);
  if (!v) {
    throw ShapeError{where + ": \"" + key + "\" " + it->dump() + " is out of range [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "]",
                     ERANGE};
  }
  return *v;
}

int64_t vcores(const json& obj, const char* key, const std::string& where, bool required = false) {
  return num(obj, key, where, 0, kYarnMaxVcores, required);
}
int64_t memory(const json& obj, const char* key, const std::string& where, bool required = false) {
  return num(obj, key, where, 0, kYarnMaxMemoryMb, required);
}

YarnResource resource(const json& r, const std::string& where) {
  if (!r.is_object()) throw ShapeError{where + " is not an object"};
  return {vcores(r, "vCores", where, true), memory(r, "memory", where, true)};
}

constexpr int64_t kMaxContainers = 10'000'000;
// Other resource types (GPUs, FPGAs, custom countables): far above any node.
constexpr int64_t kMaxOtherResource = 1'000'000'000'000;

// The resource types besides memory and vCores in a resource's
// resourceInformations (Hadoop 3.x), by name; the values range-checked.
std::map<std::string, int64_t> other_resources_of(const json& r, const std::string& where) {
  std::map<std::string, int64_t> out;
  auto infos = r.find("resourceInformations");
  if (infos == r.end() || !infos->is_object()) return out;
  auto list = infos->find("resourceInformation");
  if (list == infos->end() || list->is_null()) return out;
  std::vector<const json*> items;
  if (list->is_object()) {
    items.push_back(&*list);
  } else if (list->is_array()) {
    for (const auto& e : *list) items.push_back(&e);
  } else {
    throw ShapeError{where + ": \"resourceInformation\" is not a list"};
  }
  for (const json* e : items) {
    if (!e->is_object()) throw ShapeError{where + ": a resourceInformation is not an object"};
    std::string name = str(*e, "name", where + " resourceInformation", true);
    if (name == "memory-mb" || name == "vcores") continue;
    if (name.empty() || name.size() > 256 ||
        !std::all_of(name.begin(), name.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
      throw ShapeError{where + ": resource type name " + json(name).dump() + " is not usable"};
    }
    out[name] = num(*e, "value", where + " " + name, 0, kMaxOtherResource);
  }
  return out;
}
constexpr int64_t kMaxInt32 = 2'147'483'647;
constexpr int64_t kMaxEpochMs = int64_t{1} << 53;  // exact in a double; the year 287396

// {"<outer>":{"<inner>":[...]}} with the empty forms null, "" and {}; a
// single element may come as an object instead of a one-element list. The
// entries point into `doc`.
std::vector<const json*> list(const json& doc, const char* outer, const char* inner) {
  const json& o = member(doc, outer, "document");
  if (o.is_null() || (o.is_string() && o.get<std::string>().empty())) return {};
  if (!o.is_object()) throw ShapeError{std::string("\"") + outer + "\" is not an object"};
  auto it = o.find(inner);
  if (it == o.end() || it->is_null()) return {};
  if (it->is_object()) return {&*it};
  if (!it->is_array()) throw ShapeError{std::string("\"") + outer + "." + inner + "\" is not a list"};
  std::vector<const json*> out;
  out.reserve(it->size());
  for (const auto& e : *it) {
    if (!e.is_object()) throw ShapeError{std::string("an entry of \"") + outer + "." + inner + "\" is not an object"};
    out.push_back(&e);
  }
  return out;
}

// Fills `r` from `n`, the strings first, so that a number out of range
// (ERANGE, thrown) leaves the node's identity in `r`.
void node_of(const json& n, YarnNodeReport& r) {
  r.id = str(n, "id", "node", true);
  const std::string where = "node " + r.id;
  r.host = str(n, "nodeHostName", where);
  r.http_address = str(n, "nodeHTTPAddress", where);
  r.state = str(n, "state", where);
  r.used = {vcores(n, "usedVirtualCores", where), memory(n, "usedMemoryMB", where)};
  if (auto it = n.find("totalResource"); it != n.end() && !it->is_null()) {
    r.total = resource(*it, where + " totalResource");
    r.other_resources = other_resources_of(*it, where + " totalResource");
  } else {
    // Older RMs: used + available (available is negative on an over-committed node).
    YarnResource avail{num(n, "availableVirtualCores", where, -kYarnMaxVcores, kYarnMaxVcores),
                       num(n, "availMemoryMB", where, -kYarnMaxMemoryMb, kYarnMaxMemoryMb)};
    r.total = {r.used.vcores + avail.vcores, r.used.memory_mb + avail.memory_mb};
    if (!yarn_resource_sane(r.total)) {
      throw ShapeError{where + ": used + available resources " + std::to_string(r.total.vcores) + " vcores/" +
                           std::to_string(r.total.memory_mb) + " MB are out of range",
                       ERANGE};
    }
  }
  r.containers = num(n, "numContainers", where, 0, kMaxContainers);
}

YarnNodeReport node_of(const json& n) {
  YarnNodeReport r;
  node_of(n, r);
  return r;
}

template <typename F>
auto guarded(const char* what, F&& f) -> Result<decltype(f())> {
  try {
    return f();
  } catch (const ShapeError& e) {
    return make_error(e.err, std::string(what) + ": " + e.what);
  } catch (const json::exception& e) {
    return make_error(EPROTO, std::string(what) + ": " + e.what());
  }
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string first_label(const std::string& host) { return host.substr(0, host.find('.')); }

}  // namespace

Result<std::vector<YarnNodeReport>> parse_yarn_nodes(const std::string& text) {
  return guarded("RM node list", [&] {
    std::vector<YarnNodeReport> out;
    const json doc = parse(text, "RM node list");
    for (const json* n : list(doc, "nodes", "node")) {
      YarnNodeReport r;
      try {
        node_of(*n, r);
      } catch (const ShapeError& e) {
        if (e.err != ERANGE) throw;
        // Another node's nonsense must not hide this one: keep the entry, unusable.
        r.total = r.used = {};
        r.other_resources.clear();
        r.containers = 0;
        r.invalid = e.what;
      }
      out.push_back(std::move(r));
    }
    return out;
  });
}

Result<YarnNodeReport> parse_yarn_node(const std::string& text) {
  return guarded("RM node", [&] {
    json doc = parse(text, "RM node");
    const json& n = member(doc, "node", "document");
    if (!n.is_object()) throw ShapeError{"\"node\" is not an object"};
    return node_of(n);
  });
}

Result<std::vector<NmContainer>> parse_nm_containers(const std::string& text) {
  return guarded("NM containers", [&] {
    std::vector<NmContainer> out;
    const json doc = parse(text, "NM containers");
    for (const json* cp : list(doc, "containers", "container")) {
      const json& c = *cp;
      NmContainer n;
      n.id = str(c, "id", "container", true);
      const std::string where = "container " + n.id;
      n.state = str(c, "state", where, true);
      n.user = str(c, "user", where);
      n.execution_type = str(c, "executionType", where);
      try {
        n.resource = {vcores(c, "totalVCoresNeeded", where), memory(c, "totalMemoryNeededMB", where)};
      } catch (const ShapeError& e) {
        if (e.err != ERANGE) throw;
        n.resource = {};
        n.invalid = e.what;
      }
      out.push_back(std::move(n));
    }
    return out;
  });
}

Result<YarnResource> parse_nm_node_info(const std::string& text) {
  return guarded("NM node info", [&] {
    json doc = parse(text, "NM node info");
    const json& n = member(doc, "nodeInfo", "document");
    if (!n.is_object()) throw ShapeError{"\"nodeInfo\" is not an object"};
    return YarnResource{vcores(n, "totalVCoresAllocatedContainers", "nodeInfo", true),
                        memory(n, "totalPmemAllocatedContainersMB", "nodeInfo", true)};
  });
}

Result<std::vector<YarnApp>> parse_yarn_apps(const std::string& text) {
  return guarded("RM apps", [&] {
    std::vector<YarnApp> out;
    const json doc = parse(text, "RM apps");
    for (const json* ap : list(doc, "apps", "app")) {
      const json& a = *ap;
      YarnApp app;
      app.id = str(a, "id", "app", true);
      const std::string where = "app " + app.id;
      app.queue = str(a, "queue", where);
      try {
        app.priority = static_cast<int>(num(a, "priority", where, -kMaxInt32 - 1, kMaxInt32));
        // 0 and -1 (not started) are "unknown".
        int64_t started = num(a, "startedTime", where, -1, kMaxEpochMs);
        app.started_ms = started > 0 ? static_cast<uint64_t>(started) : 0;
      } catch (const ShapeError& e) {
        if (e.err != ERANGE) throw;
        app.priority = 0;
        app.started_ms = 0;
        app.invalid = e.what;
      }
      out.push_back(std::move(app));
    }
    return out;
  });
}

Result<YarnAmAttempt> parse_am_attempt(const std::string& text) {
  return guarded("RM app attempts", [&] {
    YarnAmAttempt best;
    int64_t best_id = -1;
    const json doc = parse(text, "RM app attempts");
    for (const json* ap : list(doc, "appAttempts", "appAttempt")) {
      const json& a = *ap;
      int64_t id = num(a, "id", "appAttempt", 0, kMaxInt32, true);
      if (id > best_id) {
        best_id = id;
        best.attempt = static_cast<int>(id);
        best.container = str(a, "containerId", "appAttempt " + std::to_string(id));
      }
    }
    return best;
  });
}

Result<std::string> parse_am_container(const std::string& text) {
  auto a = parse_am_attempt(text);
  if (!a) return a.error();
  return a.value().container;
}

bool nm_container_active(const std::string& state) {
  static const std::set<std::string> kDone = {"LOCALIZATION_FAILED",
                                              "EXITED_WITH_SUCCESS",
                                              "EXITED_WITH_FAILURE",
                                              "KILLING",
                                              "CONTAINER_CLEANEDUP_AFTER_KILL",
                                              "CONTAINER_RESOURCES_CLEANINGUP",
                                              "DONE"};
  return !state.empty() && kDone.count(state) == 0;
}

namespace {
// container_[e<epoch>_]<ts>_<app>_<attempt>_<seq> split into its four
// numeric fields; empty when malformed.
std::vector<std::string> container_fields(const std::string& id) {
  const std::string prefix = "container_";
  if (id.rfind(prefix, 0) != 0) return {};
  std::vector<std::string> parts;
  size_t start = prefix.size();
  for (;;) {
    size_t us = id.find('_', start);
    parts.push_back(id.substr(start, us == std::string::npos ? std::string::npos : us - start));
    if (us == std::string::npos) break;
    start = us + 1;
  }
  auto digits = [](const std::string& p) {
    return !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (parts.size() == 5 && parts[0].size() > 1 && parts[0][0] == 'e') {
    if (!digits(parts[0].substr(1))) return {};
    parts.erase(parts.begin());
  }
  if (parts.size() != 4) return {};
  for (const auto& p : parts) {
    if (!digits(p)) return {};
  }
  return parts;
}
}  // namespace

int attempt_of_container(const std::string& id) {
  auto f = container_fields(id);
  if (f.empty() || f[2].size() > 9) return 0;
  return std::stoi(f[2]);
}

bool first_container_of_attempt(const std::string& id, int attempt) {
  auto f = container_fields(id);
  if (f.empty() || attempt <= 0 || f[2].size() > 9 || f[3].size() > 18) return false;
  return std::stoi(f[2]) == attempt && std::stoll(f[3]) == 1;
}

std::string app_of_container(const std::string& id) {
  auto f = container_fields(id);
  return f.empty() ? "" : "application_" + f[0] + "_" + f[1];
}

bool yarn_node_gone(const std::string& state) {
  static const std::set<std::string> kGone = {"LOST", "SHUTDOWN", "DECOMMISSIONED", "REBOOTED"};
  return kGone.count(state) > 0;
}

bool yarn_http_address_ok(const std::string& a) {
  if (a.empty() || a.size() > 300) return false;  // a DNS name is at most 253
  size_t colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string host = a.substr(0, colon), port = a.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  int p = std::stoi(port);
  if (p < 1 || p > 65535) return false;
  if (host.front() == '[') {  // [IPv6]
    if (host.size() < 3 || host.back() != ']') return false;
    return std::all_of(host.begin() + 1, host.end() - 1,
                       [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.'; });
  }
  return std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
  });
}

Result<YarnNodeReport> match_node(const std::vector<YarnNodeReport>& nodes, const std::vector<std::string>& hostnames) {
  // Nodes that left (a restarted NodeManager with an ephemeral port leaves
  // its old id behind as LOST or SHUTDOWN) are not candidates.
  std::vector<const YarnNodeReport*> hits;
  for (const auto& n : nodes) {
    if (yarn_node_gone(n.state)) continue;
    std::string h = lower(n.host.empty() ? n.id.substr(0, n.id.rfind(':')) : n.host);
    for (const auto& want : hostnames) {
      std::string w = lower(want);
      if (w.empty()) continue;
      if (h == w || first_label(h) == w || h == first_label(w)) {
        hits.push_back(&n);
        break;
      }
    }
  }
  std::string names;
  for (const auto& h : hostnames) names += (names.empty() ? "" : ", ") + h;
  if (hits.empty()) {
    return make_error(ENOENT,
                      "no NodeManager in the RM's node list runs on this host (" + names + "); set yarn.node_id");
  }
  if (hits.size() > 1) {
    std::string ids;
    for (auto* h : hits) ids += (ids.empty() ? "" : ", ") + h->id;
    return make_error(EEXIST, "several NodeManagers match this host (" + ids + "); set yarn.node_id");
  }
  return *hits.front();
}

Result<std::string> YarnRest::get(HttpClient& c, const std::string& path, const std::atomic<bool>* abort) {
  HttpRequest req;
  req.path = path;
  auto t0 = std::chrono::steady_clock::now();
  auto r = c.send(req, abort);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!r) {
    spdlog::debug("yarn: GET {}: {} ({:.0f} ms)", path, r.error().str(), ms);
    return r.error();
  }
  const HttpResponse& resp = r.value();
  spdlog::debug("yarn: GET {}{}: HTTP {}, {} bytes ({:.0f} ms)", resp.base_url, path, resp.status, resp.body.size(),
                ms);
  if (resp.status < 200 || resp.status >= 300) {
    HadoopError e = hadoop_http_error(resp.status, resp.body);
    return make_error(e.err, "GET " + resp.base_url + path + ": " + e.message);
  }
  return resp.body;
}

template <typename T>
Result<T> YarnRest::fetch(HttpClient& c, const std::string& path, Result<T> (*parse)(const std::string&),
                          const std::atomic<bool>* abort) {
  auto body = get(c, path, abort);
  if (!body) return body.error();
  return parse(body.value());
}

Result<std::vector<YarnNodeReport>> YarnRest::nodes(const std::atomic<bool>* abort) {
  return fetch(rm_, "/ws/v1/cluster/nodes", parse_yarn_nodes, abort);
}

Result<YarnNodeReport> YarnRest::node(const std::string& id, const std::atomic<bool>* abort) {
  if (id.empty()) return make_error(EINVAL, "RM node: empty node id");
  return fetch(rm_, "/ws/v1/cluster/nodes/" + url_path_segment(id), parse_yarn_node, abort);
}

Result<std::vector<YarnApp>> YarnRest::running_apps(const std::atomic<bool>* abort) {
  // Without the resource requests of every application: they are most of
  // the answer's size on a busy cluster and are not needed here.
  return fetch(rm_, "/ws/v1/cluster/apps?states=RUNNING&deSelects=resourceRequests", parse_yarn_apps, abort);
}

Result<YarnAmAttempt> YarnRest::am_attempt(const std::string& app_id, const std::atomic<bool>* abort) {
  if (app_id.empty()) return make_error(EINVAL, "RM app attempts: empty application id");
  return fetch(rm_, "/ws/v1/cluster/apps/" + url_path_segment(app_id) + "/appattempts", parse_am_attempt, abort);
}

Result<std::vector<NmContainer>> YarnRest::containers(const std::atomic<bool>* abort) {
  return fetch(nm_, "/ws/v1/node/containers", parse_nm_containers, abort);
}

Result<YarnResource> YarnRest::nm_configured(const std::atomic<bool>* abort) {
  return fetch(nm_, "/ws/v1/node/info", parse_nm_node_info, abort);
}

}  // namespace khagent
