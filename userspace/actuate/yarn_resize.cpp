#include "khagent/actuate/yarn_resize.h"

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "khagent/util/curl_util.h"
#include "khagent/util/hadoop_error.h"
#include "khagent/util/json_bounded.h"

namespace khagent {

namespace {

using json = nlohmann::json;

// The RM's answers to an update (resourceInfo, or a RemoteException) are a
// few hundred bytes; anything much larger is not one of them.
constexpr JsonLimits kAnswerLimits{size_t{1} << 20, 64, 100'000};

}  // namespace

std::string node_resource_body(const YarnResource& r, const std::map<std::string, int64_t>& others,
                               int64_t over_commit_timeout_ms) {
  json resource = {{"memory", r.memory_mb}, {"vCores", r.vcores}};
  if (!others.empty()) {
    json infos = json::array();
    infos.push_back({{"name", "memory-mb"}, {"value", r.memory_mb}, {"units", "Mi"}});
    infos.push_back({{"name", "vcores"}, {"value", r.vcores}});
    for (const auto& [name, value] : others) infos.push_back({{"name", name}, {"value", value}});
    resource["resourceInformations"] = {{"resourceInformation", std::move(infos)}};
  }
  json body = {{"resource", std::move(resource)}, {"overCommitTimeout", over_commit_timeout_ms}};
  return body.dump();
}

Result<YarnResource> parse_resource_info(const std::string& text) {
  auto parsed = parse_json_bounded(text, kAnswerLimits);
  if (!parsed) {
    return make_error(
        parsed.error().err == E2BIG ? E2BIG : EPROTO,
        "update-resource answer: " + parsed.error().message + " (starts \"" + body_excerpt(text, 80) + "\")");
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
    return make_error(ERANGE, "update-resource answer: " + v->dump() + " vcores/" + m->dump() + " MB out of range");
  }
  return YarnResource{*vc, *mb};
}

Result<YarnResource> post_node_resource(HttpClient& rm, const std::string& node_id, const YarnResource& r,
                                        const std::map<std::string, int64_t>& others, int64_t over_commit_timeout_ms,
                                        const std::atomic<bool>* abort) {
  // The range of `r` is the caller's to check (app/yarn_downscaler does,
  // before every POST); the RM answers a negative one with a 400.
  if (node_id.empty()) return make_error(EINVAL, "POST resource: empty node id");
  HttpRequest req;
  req.method = "POST";
  req.path = "/ws/v1/cluster/nodes/" + url_path_segment(node_id) + "/resource";
  req.body = node_resource_body(r, others, over_commit_timeout_ms);
  auto sent = rm.send(req, abort);
  if (!sent) return sent.error();
  const HttpResponse& resp = sent.value();
  const std::string what = "POST " + resp.base_url + req.path;
  if (resp.status >= 200 && resp.status < 300) {
    auto info = parse_resource_info(resp.body);
    if (!info) return make_error(info.error().err, what + ": " + info.error().message);
    return info;
  }
  HadoopError e = hadoop_http_error(resp.status, resp.body);
  return make_error(e.err, what + ": " + e.message);
}

bool restore_node_resource(HttpClientOptions rm, const std::string& node_id, const YarnResource& configured,
                           const std::map<std::string, int64_t>& others, int64_t over_commit_timeout_ms) {
  rm.retries = 0;
  rm.timeout_ms = std::min<long>(rm.timeout_ms, 5000);
  rm.connect_timeout_ms = std::min(rm.connect_timeout_ms, rm.timeout_ms);
  HttpClient client(rm);
  std::atomic<bool> no_abort{false};
  auto r = post_node_resource(client, node_id, configured, others, over_commit_timeout_ms, &no_abort);
  if (r) {
    spdlog::info(
        "yarn: restored {} to its configured {}{} (the RM answered with {}, its total before or "
        "after the update)",
        node_id, yarn_resource_str(configured),
        others.empty() ? "" : " and " + std::to_string(others.size()) + " other resource types",
        yarn_resource_str(r.value()));
    return true;
  }
  spdlog::error("yarn: could not restore {} to {}: {}", node_id, yarn_resource_str(configured), r.error().str());
  return false;
}

}  // namespace khagent
