// The slow-node judge inside a run (issue 41): a member's slowest rank is its figure, a node
// outside the running round is not judged, the verdict shows in the run's status, and a new
// round starts the judge afresh.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rendezvous/core/server_state.h"
#include "tests/rendezvous/core/state_fixture.h"
#include "tests/rendezvous/core/state_test_util.h"

namespace ddprun::rendezvous {
namespace {

using ::ddprun::rendezvous::testing::MakeJoin;

class SlowNodesTest : public testing::ServerStateTest {
 protected:
  // Nodes 1..3 of a fixed run of 3, and node 4 waiting beyond it (a spare).
  void SetUp() override {
    for (ConnId c = 1; c <= 4; ++c) Join(c, MakeJoin("run", std::to_string(c), 3, 3));
  }
  // One report from each member (5 s later): node 3's slowest rank computes `slow_ms`.
  std::vector<SlowNodeChange> Reports(double slow_ms) {
    clock_.Advance(std::chrono::seconds(5));
    std::vector<SlowNodeChange> changes;
    for (ConnId c = 1; c <= 3; ++c) {
      // Two local ranks: the node runs at the pace of the slower one.
      const std::vector<RankCompute> ranks = {
          {static_cast<int>(2 * c), 30, 100},
          {static_cast<int>(2 * c + 1), c == 3 ? slow_ms : 29, 100}};
      if (auto change = state_.Compute(c, ranks, clock_.Now())) changes.push_back(*change);
    }
    return changes;
  }
  const MemberStatus* Member(const std::string& node_id) {
    status_ = Status();
    for (const MemberStatus& m : status_.members) {
      if (m.node_id == node_id) return &m;
    }
    return nullptr;
  }
  RunStatus status_;
};

TEST_F(SlowNodesTest, AMembersSlowestRankMakesItSlowAndTheRunsStatusSaysSo) {
  EXPECT_TRUE(Reports(90).empty());
  EXPECT_TRUE(Reports(90).empty());
  const std::vector<SlowNodeChange> named = Reports(90);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].node_id, "3");
  EXPECT_DOUBLE_EQ(named[0].compute_ms, 90);
  EXPECT_DOUBLE_EQ(named[0].median_ms, 30);
  EXPECT_EQ(Status().slow_nodes, 1);
  ASSERT_NE(Member("3"), nullptr);
  EXPECT_TRUE(Member("3")->slow);
  EXPECT_DOUBLE_EQ(Member("3")->compute_ms, 90);
  EXPECT_DOUBLE_EQ(Member("3")->compute_ratio, 3);
  EXPECT_FALSE(Member("1")->slow);
  EXPECT_DOUBLE_EQ(Member("1")->compute_ms, 30);
}

TEST_F(SlowNodesTest, ASpareIsNotJudgedAndANewRoundStartsAfresh) {
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(std::chrono::seconds(5));
    EXPECT_FALSE(state_.Compute(4, {{6, 500, 100}}, clock_.Now()).has_value());
  }
  EXPECT_EQ(Member("4")->compute_ms, 0) << "the spare has no figure";
  for (int i = 0; i < 3; ++i) Reports(90);
  ASSERT_EQ(Status().slow_nodes, 1);
  // Node 2 is lost: the spare takes its rank in a new round, whose steps compare afresh.
  state_.StreamBroken(2, clock_.Now());
  EXPECT_EQ(Status().slow_nodes, 0);
  EXPECT_EQ(Member("3")->compute_ms, 0);
}

}  // namespace
}  // namespace ddprun::rendezvous
