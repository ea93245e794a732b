#include "khagent/actuate/kube_node_status.h"

#include <cerrno>
#include <cstdint>
#include <numeric>
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
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

int64_t whole(const json& map, const char* key) {
  if (!map.is_object()) return -1;
  auto it = map.find(key);
  if (it == map.end() || !it->is_string()) return -1;
  return whole_quantity(it->get_ref<const std::string&>());
}

int64_t both(const json& status, const char* key) {
  const json empty = json::object();
  const int64_t cap = whole(status.value("capacity", empty), key);
  const int64_t alloc = whole(status.value("allocatable", empty), key);
  return cap == alloc ? cap : -1;
}

Error http_error(long status, const std::string& what, const std::string& body) {
  int err = EIO;
  if (status == 401 || status == 403) err = EACCES;
  else if (status == 404) err = ENOENT;
  else if (status == 409 || status == 422 || status == 400) err = EINVAL;
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

int64_t whole_quantity(std::string_view s) {
  // digits[.digits][suffix]: the API server writes what we sent in its
  // canonical form ("1000" comes back as "1k", 6 GiB as "6Gi").
  size_t i = 0;
  uint64_t num = 0;  // the digits, the point left out
  uint64_t den = 1;  // 10^(digits after the point)
  bool digits = false, dot = false;
  for (; i < s.size(); i++) {
    const char c = s[i];
    if (c >= '0' && c <= '9') {
      digits = true;
      if (__builtin_mul_overflow(num, 10, &num) || __builtin_add_overflow(num, static_cast<uint64_t>(c - '0'), &num))
        return -1;
      if (dot && __builtin_mul_overflow(den, 10, &den)) return -1;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!digits) return -1;
  const std::string_view suffix = s.substr(i);
  uint64_t mult = 1;
  if (suffix == "m") {
    if (__builtin_mul_overflow(den, 1000, &den)) return -1;
  } else if (!suffix.empty()) {
    static constexpr std::pair<std::string_view, uint64_t> kSuffixes[] = {{"k", 1'000ULL},
                                                                          {"M", 1'000'000ULL},
                                                                          {"G", 1'000'000'000ULL},
                                                                          {"T", 1'000'000'000'000ULL},
                                                                          {"P", 1'000'000'000'000'000ULL},
                                                                          {"E", 1'000'000'000'000'000'000ULL},
                                                                          {"Ki", 1ULL << 10},
                                                                          {"Mi", 1ULL << 20},
                                                                          {"Gi", 1ULL << 30},
                                                                          {"Ti", 1ULL << 40},
                                                                          {"Pi", 1ULL << 50},
                                                                          {"Ei", 1ULL << 60}};
    bool known = false;
    for (const auto& [name, m] : kSuffixes)
      if (suffix == name) {
        mult = m;
        known = true;
      }
    if (!known) return -1;
  }
  // num * mult / den, whole: reduce by the common factor first.
  const uint64_t g = std::gcd(mult, den);
  mult /= g;
  den /= g;
  if (num % den != 0) return -1;
  uint64_t v = 0;
  if (__builtin_mul_overflow(num / den, mult, &v) || v > static_cast<uint64_t>(INT64_MAX)) return -1;
  return static_cast<int64_t>(v);
}

Result<NodeBatchView> parse_node_batch(const std::string& text) {
  auto doc = parse_json_bounded(text, JsonLimits{});
  if (!doc) return doc.error();
  const json& j = *doc;
  const auto kind = j.is_object() ? j.find("kind") : j.end();
  if (!j.is_object() || kind == j.end() || !kind->is_string() || kind->get_ref<const std::string&>() != "Node" ||
      !j.contains("metadata") || !j["metadata"].is_object())
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
  else ops.push_back({{"op", "add"}, {"path", "/metadata/annotations"}, {"value", {{kBatchExplanation, explanation}}}});
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
