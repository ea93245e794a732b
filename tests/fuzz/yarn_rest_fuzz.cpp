// The ResourceManager's and NodeManager's REST answers: every input goes to
// each parser (node list, one node, NM containers, NM node info, running
// apps, app attempts, the answer to a resource update) and what they return
// to the helpers that use it.
// Whatever the numbers say, a parsed entry that is not marked invalid holds
// resources within the sane bounds (policy/yarn.h).
#include "khagent/actuate/yarn_resize.h"
#include "khagent/collect/yarn_rest.h"

#include "fuzz_util.h"

using namespace khagent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = khagent_fuzz::text_of(data, size);

  if (auto nodes = parse_yarn_nodes(text)) {
    for (const auto& n : *nodes) {
      if (n.invalid.empty()) FUZZ_CHECK(yarn_resource_sane(n.total) && yarn_resource_sane(n.used));
      (void)yarn_node_gone(n.state);
      (void)yarn_http_address_ok(n.http_address);
    }
    (void)match_node(*nodes, {"worker1", "worker1.example.com"});
  }
  if (auto n = parse_yarn_node(text)) {
    FUZZ_CHECK(yarn_resource_sane(n->total) && yarn_resource_sane(n->used));
    (void)yarn_http_address_ok(n->http_address);
  }
  if (auto cs = parse_nm_containers(text)) {
    for (const auto& c : *cs) {
      if (c.invalid.empty()) FUZZ_CHECK(yarn_resource_sane(c.resource));
      (void)nm_container_active(c.state);
      (void)app_of_container(c.id);
      FUZZ_CHECK(attempt_of_container(c.id) >= 0);
    }
  }
  if (auto r = parse_nm_node_info(text)) FUZZ_CHECK(yarn_resource_sane(*r));
  if (auto apps = parse_yarn_apps(text)) {
    for (const auto& a : *apps) (void)a.id.size();
  }
  if (auto am = parse_am_container(text)) (void)app_of_container(*am);
  if (auto r = parse_resource_info(text)) FUZZ_CHECK(yarn_resource_sane(*r));
  return 0;
}
