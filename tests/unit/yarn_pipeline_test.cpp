// The pure pieces the YARN downscaler is wired from: the node's maximum, a
// POST the RM has not shown yet, the interference window (policy/yarn.h),
// and the reclaim candidates built from the inventory (collect/yarn_inventory.h).
#include <gtest/gtest.h>

#include "khagent/collect/yarn_inventory.h"
#include "khagent/policy/yarn.h"
#include "khagent/policy/yarn_candidates.h"

using namespace khagent;

namespace {

constexpr uint64_t kS = 1'000'000'000;

TEST(YarnMax, AnotherNodeStartsOverAndIsSaved) {
  YarnMaxRecord rec{"old:1", {32, 65536}, {{"yarn.io/gpu", 4}}};
  EXPECT_TRUE(yarn_max_observe(rec, "new:2", {8, 8192}, {}));
  EXPECT_EQ(rec.node_id, "new:2");
  EXPECT_EQ(rec.max, (YarnResource{8, 8192}));
  EXPECT_TRUE(rec.others.empty());
}

TEST(YarnMax, SameNodeKeepsTheMostSeenPerDimension) {
  YarnMaxRecord rec{"n:1", {8, 8192}, {{"yarn.io/gpu", 2}}};
  EXPECT_FALSE(yarn_max_observe(rec, "n:1", {4, 4096}, {{"yarn.io/gpu", 0}}));  // shrunk: kept
  EXPECT_EQ(rec.max, (YarnResource{8, 8192}));
  EXPECT_EQ(rec.others.at("yarn.io/gpu"), 2);
  EXPECT_TRUE(yarn_max_observe(rec, "n:1", {4, 16384}, {}));  // memory grew alone
  EXPECT_EQ(rec.max, (YarnResource{8, 16384}));
  EXPECT_TRUE(yarn_max_observe(rec, "n:1", {8, 16384}, {{"yarn.io/fpga", 1}}));  // a new type
  EXPECT_EQ(rec.others.at("yarn.io/fpga"), 1);
}

TEST(YarnPendingPost, StandsUntilShownOrTwoIntervalsPass) {
  std::optional<YarnPendingPost> p;
  EXPECT_EQ(yarn_settle_post(p, {8, 8192}, 10 * kS, kS), YarnPostSeen::None);
  p = YarnPendingPost{{4, 4096}, 10 * kS};
  EXPECT_EQ(yarn_settle_post(p, {8, 8192}, 11 * kS, kS), YarnPostSeen::NotYet);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(yarn_settle_post(p, {4, 4096}, 11 * kS, kS), YarnPostSeen::Applied);
  EXPECT_FALSE(p.has_value());
  p = YarnPendingPost{{4, 4096}, 10 * kS};
  EXPECT_EQ(yarn_settle_post(p, {8, 8192}, 12 * kS, kS), YarnPostSeen::Dropped);
  EXPECT_FALSE(p.has_value());
}

TEST(YarnInterference, WindowRestartsOnlyWhenItMoves) {
  std::map<std::string, uint64_t> at, window;
  yarn_interference_window({{"c1", 100}}, false, at, window);
  EXPECT_EQ(window.at("c1"), 0u);  // first seen: the window starts now
  yarn_interference_window({{"c1", 300}, {"c2", 50}}, false, at, window);
  EXPECT_EQ(window.at("c1"), 0u);  // not moved: kept
  EXPECT_EQ(window.at("c2"), 0u);
  yarn_interference_window({{"c1", 300}, {"c2", 80}}, true, at, window);
  EXPECT_EQ(window.at("c1"), 200u);
  EXPECT_EQ(window.at("c2"), 30u);
  yarn_interference_window({{"c1", 10}}, true, at, window);  // a total that went back: 0
  EXPECT_EQ(window.at("c1"), 0u);
}

TEST(YarnCandidates, ActiveUnkilledWithQueueAmAndStart) {
  YarnInventory inv;
  inv.containers = {{"container_1_0001_01_000001", "RUNNING", "u", {1, 1024}, "", ""},
                    {"container_1_0001_01_000002", "RUNNING", "u", {2, 2048}, "", ""},
                    {"container_1_0001_01_000003", "DONE", "u", {2, 2048}, "", ""},
                    {"container_1_0002_01_000002", "RUNNING", "u", {1, 1024}, "", ""},
                    {"container_1_0002_01_000003", "RUNNING", "u", {1, 1024}, "", ""}};
  inv.apps["application_1_0001"] = YarnApp{"application_1_0001", "root.low", 0, 0, "", ""};
  inv.am_of_app["application_1_0002"] = YarnAmAttempt{1, "container_1_0002_01_000002"};
  auto out =
      yarn_reclaim_candidates(inv, {"container_1_0002_01_000003"}, {{"low", -5}}, {{"container_1_0001_01_000002", 7}},
                              [](const std::string& id) -> uint64_t { return id.back() == '2' ? 42 : 0; });
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].id, "container_1_0001_01_000001");
  EXPECT_TRUE(out[0].is_am);  // no attempt read: the first container of its attempt
  EXPECT_EQ(out[0].queue, "root.low");
  EXPECT_EQ(out[0].queue_priority, -5);
  EXPECT_EQ(out[1].id, "container_1_0001_01_000002");
  EXPECT_FALSE(out[1].is_am);
  EXPECT_EQ(out[1].interference_ns, 7u);
  EXPECT_EQ(out[1].start_ms, 42u);
  EXPECT_EQ(out[1].resource, (YarnResource{2, 2048}));
  EXPECT_EQ(out[2].id, "container_1_0002_01_000002");
  EXPECT_TRUE(out[2].is_am);  // the RM named it
  EXPECT_EQ(out[2].queue, "");
}

}  // namespace
