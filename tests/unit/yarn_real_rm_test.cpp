// Against a real ResourceManager, when one is given:
//   KHAGENT_TEST_YARN_RM=http://rm.example:8088 [KHAGENT_TEST_YARN_USER=name]
//   [KHAGENT_TEST_YARN_NODE=host:port]   (also post the node's own total back)
// Without KHAGENT_TEST_YARN_RM the test is skipped, and ctest reports it as
// not run (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt), never as passed.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "khagent/actuate/yarn_resize.h"
#include "khagent/collect/yarn_rest.h"

using namespace khagent;

TEST(YarnRealRm, ReadsNodesAndPostsANodesOwnResourceBack) {
  const char* rm = std::getenv("KHAGENT_TEST_YARN_RM");
  if (rm == nullptr || *rm == '\0') {
    GTEST_SKIP() << "set KHAGENT_TEST_YARN_RM=http://<rm>:8088 to run against a real ResourceManager";
  }
  HttpClientOptions o;
  o.base_urls = {rm};
  const char* user = std::getenv("KHAGENT_TEST_YARN_USER");
  if (user != nullptr && *user != '\0') {
    o.auth = HttpAuth::Simple;
    o.user = user;
  }
  HttpClient client(o);
  YarnRest rest(client, client);
  auto nodes = rest.nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.error().str();
  for (const auto& n : nodes.value()) {
    EXPECT_FALSE(n.id.empty());
    EXPECT_NE(n.id.find(':'), std::string::npos) << n.id;
    std::printf("node %s host %s state %s total %lld vcores/%lld MB\n", n.id.c_str(), n.host.c_str(),
                n.state.c_str(), static_cast<long long>(n.total.vcores),
                static_cast<long long>(n.total.memory_mb));
  }
  auto apps = rest.running_apps();
  ASSERT_TRUE(apps.ok()) << apps.error().str();

  const char* node_id = std::getenv("KHAGENT_TEST_YARN_NODE");
  if (node_id == nullptr || *node_id == '\0') return;
  auto node = rest.node(node_id);
  ASSERT_TRUE(node.ok()) << node.error().str();
  // The node's current total, posted back: the request shape is checked by
  // the real RM, and nothing changes. -1: the RM never preempts for it.
  auto r = post_node_resource(client, node_id, node.value().total, {}, -1);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r.value(), node.value().total);
}
