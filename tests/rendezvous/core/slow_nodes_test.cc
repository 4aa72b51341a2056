// The slow-node judge inside a run (issue 41): a member's slowest rank is its figure, a node
// outside the running round is not judged, the verdict shows in the run's status, and a new
// round starts the judge afresh.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/api/eviction.h"
#include "rendezvous/core/server_state.h"
#include "tests/rendezvous/core/state_fixture.h"
#include "tests/rendezvous/core/state_test_util.h"

namespace ddprun::rendezvous {
namespace {

using ::ddprun::rendezvous::testing::MakeJoin;

class SlowNodesTest : public testing::ServerStateTest {
 protected:
  // Nodes 1..3 of a fixed run of 3, and node 4 waiting beyond it (a spare); with --evict-slow
  // when `evict`.
  void SetUp() override { JoinAll(false); }
  void JoinAll(bool evict) {
    for (ConnId c = 1; c <= 4; ++c) {
      JoinRequest r = MakeJoin(evict ? "evicting" : "run", std::to_string(c), 3, 3);
      r.timeouts.slow_nodes.evict = evict;
      Join(c + (evict ? 10 : 0), r);
    }
  }
  // Node `conn`'s compute report.
  std::optional<SlowNodeChange> Report(ConnId conn, std::vector<RankCompute> ranks) {
    std::optional<SlowNodeChange> change;
    last_out_ = state_.Compute(conn, ranks, clock_.Now(), &change);
    return change;
  }
  Outbox last_out_;
  // One report from each member first..first+2 (5 s later): the last one's slowest rank
  // computes `slow_ms`.
  std::vector<SlowNodeChange> Reports(double slow_ms, ConnId first = 1) {
    clock_.Advance(std::chrono::seconds(5));
    std::vector<SlowNodeChange> changes;
    for (ConnId c = first; c <= first + 2; ++c) {
      // Two local ranks: the node runs at the pace of the slower one.
      const std::vector<RankCompute> ranks = {
          {static_cast<int>(2 * c), 30, 100},
          {static_cast<int>(2 * c + 1), c == first + 2 ? slow_ms : 29, 100}};
      if (auto change = Report(c, ranks)) changes.push_back(*change);
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
    EXPECT_FALSE(Report(4, {{6, 500, 100}}).has_value());
  }
  EXPECT_EQ(Member("4")->compute_ms, 0) << "the spare has no figure";
  for (int i = 0; i < 3; ++i) Reports(90);
  ASSERT_EQ(Status().slow_nodes, 1);
  // Node 2 is lost: the spare takes its rank in a new round, whose steps compare afresh.
  state_.StreamBroken(2, clock_.Now());
  EXPECT_EQ(Status().slow_nodes, 0);
  EXPECT_EQ(Member("3")->compute_ms, 0);
}

TEST_F(SlowNodesTest, WithoutEvictSlowANamedNodeStaysInTheRun) {
  for (int i = 0; i < 5; ++i) Reports(90);
  EXPECT_EQ(Status().slow_nodes, 1);
  EXPECT_EQ(Status().round, 1);
  EXPECT_TRUE(last_out_.empty());
}

// --evict-slow (issue 41): the named node is closed out, not given up (it ends), and the spare
// takes its group rank in a free restart (cause node_slow, no unit of --max-restarts).
TEST_F(SlowNodesTest, WithEvictSlowASpareTakesTheSlowNodesGroupRankInAFreeRestart) {
  JoinAll(true);
  auto status = [&] { return *state_.Status("evicting"); };
  const int slow_rank = [&] {
    for (const MemberStatus& m : status().members) {
      if (m.node_id == "3") return m.group_rank;
    }
    return -1;
  }();
  ASSERT_GE(slow_rank, 0);
  Reports(90, 11);
  Reports(90, 11);
  Reports(90, 11);
  const CloseNotice* closed = testing::Find<CloseNotice>(last_out_, 13);
  ASSERT_NE(closed, nullptr) << "the slow node is closed out";
  EXPECT_FALSE(closed->given_up);
  EXPECT_TRUE(IsEvictedStop(closed->status)) << "the agent exits 5, not 3";
  EXPECT_THAT(std::string(closed->status.message()),
              ::testing::HasSubstr("evicted from the run as slow (--evict-slow): its workers "
                                   "computed 90.0 ms a step, 3.00x the run's median node"));
  const Assignment* spare = testing::Find<Assignment>(last_out_, 14);
  ASSERT_NE(spare, nullptr) << "the spare is assigned";
  EXPECT_EQ(spare->group_rank, slow_rank) << "the slow node's group rank";
  const RunStatus s = status();
  EXPECT_EQ(s.round, 2);
  EXPECT_EQ(s.restarts_used, 0) << "an eviction spends no restart";
  EXPECT_EQ(s.spares_used, 1);
  ASSERT_FALSE(s.restarts.empty());
  EXPECT_EQ(s.restarts.back().cause, Cause::kNodeSlow);
  EXPECT_EQ(s.num_nodes, 3);
}

TEST_F(SlowNodesTest, WithEvictSlowButNoSpareTheNodeIsOnlyNamed) {
  JoinRequest r;
  for (ConnId c = 21; c <= 23; ++c) {
    r = MakeJoin("nospare", std::to_string(c), 3, 3);
    r.timeouts.slow_nodes.evict = true;
    Join(c, r);
  }
  for (int i = 0; i < 5; ++i) Reports(90, 21);
  EXPECT_EQ(state_.Status("nospare")->slow_nodes, 1);
  EXPECT_EQ(state_.Status("nospare")->round, 1) << "never below the world without a spare";
  EXPECT_TRUE(last_out_.empty());
}

}  // namespace
}  // namespace ddprun::rendezvous
