#include "khagent/actuate/yarn_resize.h"

#include <cerrno>
#include <string>

#include <nlohmann/json.hpp>

namespace khagent {

namespace {

using json = nlohmann::json;

// The message of Hadoop's {"RemoteException":{"exception","message",...}}, or
// the start of the body.
std::string remote_message(const std::string& body) {
  json doc = json::parse(body, nullptr, false);
  if (doc.is_object()) {
    auto it = doc.find("RemoteException");
    if (it != doc.end() && it->is_object()) {
      auto text = [&](const char* k) {
        auto f = it->find(k);
        return f != it->end() && f->is_string() ? f->get<std::string>() : std::string();
      };
      std::string ex = text("exception");
      std::string msg = text("message");
      if (!ex.empty() || !msg.empty()) return ex + (ex.empty() || msg.empty() ? "" : ": ") + msg;
    }
  }
  return body.substr(0, 200);
}

}  // namespace

std::string node_resource_body(const YarnResource& r, int64_t over_commit_timeout_ms) {
  json body = {{"resource", {{"memory", r.memory_mb}, {"vCores", r.vcores}}},
               {"overCommitTimeout", over_commit_timeout_ms}};
  return body.dump();
}

Result<YarnResource> parse_resource_info(const std::string& text) {
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return make_error(EPROTO, "update-resource answer is not a JSON object: " + text.substr(0, 80));
  }
  auto it = doc.find("resourceInfo");
  if (it == doc.end() || !it->is_object()) {
    return make_error(EPROTO, "update-resource answer has no \"resourceInfo\" object");
  }
  auto m = it->find("memory");
  auto v = it->find("vCores");
  if (m == it->end() || !m->is_number() || v == it->end() || !v->is_number()) {
    return make_error(EPROTO, "update-resource answer lacks numeric memory/vCores");
  }
  return YarnResource{v->get<int64_t>(), m->get<int64_t>()};
}

Result<YarnResource> post_node_resource(HttpClient& rm, const std::string& node_id,
                                        const YarnResource& r, int64_t over_commit_timeout_ms,
                                        const std::atomic<bool>* abort) {
  HttpRequest req;
  req.method = "POST";
  req.path = "/ws/v1/cluster/nodes/" + node_id + "/resource";
  req.body = node_resource_body(r, over_commit_timeout_ms);
  auto sent = rm.send(req, abort);
  if (!sent) return sent.error();
  const HttpResponse& resp = sent.value();
  const std::string what = "POST " + resp.base_url + req.path;
  if (resp.status >= 200 && resp.status < 300) {
    auto info = parse_resource_info(resp.body);
    if (!info) return make_error(info.error().err, what + ": " + info.error().message);
    return info;
  }
  int err = EIO;
  if (resp.status == 401 || resp.status == 403) err = EACCES;
  if (resp.status == 404) err = ENOENT;
  if (resp.status == 400) err = EINVAL;
  return make_error(err, what + ": HTTP " + std::to_string(resp.status) + ": " + remote_message(resp.body));
}

}  // namespace khagent
