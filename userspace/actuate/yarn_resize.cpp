#include "khagent/actuate/yarn_resize.h"

#include <cerrno>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "khagent/util/curl_util.h"
#include "khagent/util/json_bounded.h"

namespace khagent {

namespace {

using json = nlohmann::json;

// The RM's answers to an update (resourceInfo, or a RemoteException) are a
// few hundred bytes; anything much larger is not one of them.
constexpr JsonLimits kAnswerLimits{size_t{1} << 20, 64, 100'000};

// The message of Hadoop's {"RemoteException":{"exception","message",...}}, or
// the start of the body.
std::string remote_message(const std::string& body) {
  auto parsed = parse_json_bounded(body, kAnswerLimits);
  const json doc = parsed ? std::move(parsed).value() : json();
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
  return body_excerpt(body);
}

}  // namespace

std::string node_resource_body(const YarnResource& r, int64_t over_commit_timeout_ms) {
  json body = {{"resource", {{"memory", r.memory_mb}, {"vCores", r.vcores}}},
               {"overCommitTimeout", over_commit_timeout_ms}};
  return body.dump();
}

Result<YarnResource> parse_resource_info(const std::string& text) {
  auto parsed = parse_json_bounded(text, kAnswerLimits);
  if (!parsed) {
    return make_error(parsed.error().err == E2BIG ? E2BIG : EPROTO,
                      "update-resource answer: " + parsed.error().message + " (starts \"" +
                          body_excerpt(text, 80) + "\")");
  }
  const json& doc = parsed.value();
  if (!doc.is_object()) {
    return make_error(EPROTO, "update-resource answer is not a JSON object: " + body_excerpt(text, 80));
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
  auto vc = json_int_in_range(*v, 0, kYarnMaxVcores);
  auto mb = json_int_in_range(*m, 0, kYarnMaxMemoryMb);
  if (!vc || !mb) {
    return make_error(ERANGE, "update-resource answer: " + v->dump() + " vcores/" + m->dump() +
                                  " MB out of range");
  }
  return YarnResource{*vc, *mb};
}

Result<YarnResource> post_node_resource(HttpClient& rm, const std::string& node_id,
                                        const YarnResource& r, int64_t over_commit_timeout_ms,
                                        const std::atomic<bool>* abort) {
  // The range of `r` is the caller's to check (app/yarn_downscaler does,
  // before every POST); the RM answers a negative one with a 400.
  if (node_id.empty()) return make_error(EINVAL, "POST resource: empty node id");
  HttpRequest req;
  req.method = "POST";
  req.path = "/ws/v1/cluster/nodes/" + url_path_segment(node_id) + "/resource";
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
