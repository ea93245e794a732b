#include "khagent/actuate/kube_node_status.h"

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "khagent/util/json_bounded.h"

namespace khagent {

namespace {

using json = nlohmann::json;

// A JSON pointer token (RFC 6901): '~' as "~0", '/' as "~1".
std::string pointer_token(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

// A quantity we publish: a whole number, nothing else ("1500", not "1.5"
// or "1500m"); -1 for anything else.
int64_t whole(const json& map, const char* key) {
  if (!map.is_object()) return -1;
  auto it = map.find(key);
  if (it == map.end() || !it->is_string()) return -1;
  const auto& s = it->get_ref<const std::string&>();
  int64_t v = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || v < 0) return -1;
  return v;
}

int64_t both(const json& status, const char* key) {
  const json empty = json::object();
  const int64_t cap = whole(status.value("capacity", empty), key);
  const int64_t alloc = whole(status.value("allocatable", empty), key);
  return cap == alloc ? cap : -1;
}

Error http_error(long status, const std::string& what, const std::string& body) {
  int err = EIO;
  if (status == 401 || status == 403)
    err = EACCES;
  else if (status == 404)
    err = ENOENT;
  else if (status == 409 || status == 422 || status == 400)
    err = EINVAL;
  std::string msg = what + ": HTTP " + std::to_string(status);
  // The API server's Status object says why (an admission policy's message).
  auto j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("message") && j["message"].is_string())
    msg += " (" + j["message"].get<std::string>() + ")";
  return make_error(err, msg);
}

Result<NodeBatchView> send(HttpClient& api, const HttpRequest& req, const std::string& what,
                           const std::atomic<bool>* abort) {
  auto r = api.send(req, abort);
  if (!r) return make_error(r.error().err, what + ": " + r.error().message);
  if (r->status < 200 || r->status >= 300) return http_error(r->status, what, r->body);
  auto v = parse_node_batch(r->body);
  if (!v) return make_error(v.error().err, what + ": " + v.error().message);
  return v;
}

}  // namespace

Result<NodeBatchView> parse_node_batch(const std::string& text) {
  auto doc = parse_json_bounded(text, JsonLimits{});
  if (!doc) return doc.error();
  const json& j = *doc;
  if (!j.is_object() || j.value("kind", "") != "Node" || !j.contains("metadata") || !j["metadata"].is_object())
    return make_error(EINVAL, "not a Node object");
  NodeBatchView v;
  const json& meta = j["metadata"];
  if (auto a = meta.find("annotations"); a != meta.end() && a->is_object()) {
    v.has_annotations = true;
    if (auto e = a->find(kBatchExplanation); e != a->end() && e->is_string()) v.explanation = e->get<std::string>();
  }
  const json status = j.contains("status") && j["status"].is_object() ? j["status"] : json::object();
  v.has_capacity = status.contains("capacity") && status["capacity"].is_object();
  v.has_allocatable = status.contains("allocatable") && status["allocatable"].is_object();
  v.shown.cpu_milli = both(status, kBatchCpu);
  v.shown.memory_bytes = both(status, kBatchMemory);
  return v;
}

std::string batch_patch(const NodeBatchView& node, const BatchQuantity& q, const std::string& explanation) {
  json ops = json::array();
  json values = json::object();
  values[kBatchCpu] = std::to_string(q.cpu_milli);
  if (q.memory_bytes >= 0) values[kBatchMemory] = std::to_string(q.memory_bytes);
  for (auto [map, exists] : {std::pair{"capacity", node.has_capacity}, {"allocatable", node.has_allocatable}}) {
    const std::string base = std::string("/status/") + map;
    if (!exists) {
      ops.push_back({{"op", "add"}, {"path", base}, {"value", values}});
      continue;
    }
    for (const auto& [k, val] : values.items())
      ops.push_back({{"op", "add"}, {"path", base + "/" + pointer_token(k)}, {"value", val}});
  }
  if (node.has_annotations)
    ops.push_back({{"op", "add"},
                   {"path", std::string("/metadata/annotations/") + pointer_token(kBatchExplanation)},
                   {"value", explanation}});
  else
    ops.push_back({{"op", "add"}, {"path", "/metadata/annotations"}, {"value", {{kBatchExplanation, explanation}}}});
  return ops.dump();
}

Result<NodeBatchView> get_node_batch(HttpClient& api, const std::string& node, const std::string& token,
                                     const std::atomic<bool>* abort) {
  HttpRequest req;
  req.path = "/api/v1/nodes/" + url_path_segment(node);
  req.headers.push_back("Authorization: Bearer " + token);
  return send(api, req, "GET node " + node, abort);
}

Result<NodeBatchView> patch_node_batch(HttpClient& api, const std::string& node, const std::string& token,
                                       const std::string& patch, const std::atomic<bool>* abort) {
  HttpRequest req;
  req.method = "PATCH";
  req.path = "/api/v1/nodes/" + url_path_segment(node) + "/status";
  req.body = patch;
  req.content_type = "application/json-patch+json";
  req.headers.push_back("Authorization: Bearer " + token);
  return send(api, req, "PATCH node " + node + " status", abort);
}

}  // namespace khagent
