// Spares (issue 40): a node connected beyond the running round waits as a spare; when a member
// is lost, the next round takes it into the lost member's group rank and nobody else moves.
#include <chrono>
#include <string>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/core/run_state.h"
#include "rendezvous/core/server_metrics.h"
#include "rendezvous/core/server_state.h"
#include "tests/rendezvous/core/state_fixture.h"
#include "tests/rendezvous/core/state_test_util.h"

namespace ddprun::rendezvous {
namespace {

using ::ddprun::rendezvous::testing::Count;
using ::ddprun::rendezvous::testing::Find;
using ::ddprun::rendezvous::testing::MakeJoin;
using ::testing::HasSubstr;

class RunStateSparesTest : public testing::ServerStateTest {
 protected:
  // Node `conn` (node id "<conn>") of a --nnodes=min:max run.
  Outbox Join(ConnId conn, int min_nodes, int max_nodes) {
    return ServerStateTest::Join(conn, MakeJoin("run", std::to_string(conn), min_nodes, max_nodes));
  }
  // The group rank `out` assigns to `conn`, or -1.
  static int RankOf(const Outbox& out, ConnId conn) {
    const Assignment* a = Find<Assignment>(out, conn);
    return a == nullptr ? -1 : a->group_rank;
  }
};

// Three members (ranks 0, 1, 2) and one spare; rank 1 is lost: the spare takes rank 1 at once,
// ranks 0 and 2 stay, and the rank offsets follow the ranks.
TEST_F(RunStateSparesTest, ASpareTakesTheLostNodesGroupRank) {
  for (ConnId c = 1; c <= 3; ++c) Join(c, 3, 3);
  EXPECT_EQ(Count<Assignment>(Join(4, 3, 3)), 0) << "beyond max: a spare, no restart";
  const Outbox out = state_.StreamBroken(2, clock_.Now());
  ASSERT_EQ(Count<Assignment>(out), 3) << "at max again: the round forms at once";
  EXPECT_EQ(RankOf(out, 1), 0);
  EXPECT_EQ(RankOf(out, 3), 2);
  EXPECT_EQ(RankOf(out, 4), 1);
  EXPECT_EQ(Find<Assignment>(out, 4)->rank_offset, 2);
  EXPECT_EQ(Find<Assignment>(out, 3)->rank_offset, 4);
  EXPECT_EQ(Find<Assignment>(out, 4)->round, 2);
}

// Two members lost in one tick (their leases), two spares: one restart, the spares take ranks 1
// and 2 in arrival order, ranks 0 and 3 stay where they were.
TEST_F(RunStateSparesTest, TwoLossesTwoSparesKeepEveryOtherRank) {
  for (ConnId c = 1; c <= 6; ++c) Join(c, 4, 4);
  clock_.Advance(std::chrono::seconds(3));  // the lease: 1 s * 3
  Beat({1, 4, 5, 6});
  const Outbox out = Tick();
  EXPECT_EQ(Count<RestartNotice>(out), 2);
  ASSERT_EQ(Count<Assignment>(out), 4);
  EXPECT_EQ(RankOf(out, 1), 0);
  EXPECT_EQ(RankOf(out, 5), 1);
  EXPECT_EQ(RankOf(out, 6), 2);
  EXPECT_EQ(RankOf(out, 4), 3);
  EXPECT_EQ(Status().restarts_used, 1);
  EXPECT_EQ(Status().spares_used, 2);
}

// With no spare left, an elastic run shrinks after the last call (compacting, as a round smaller
// than a survivor's rank must) and a fixed one waits for a node.
TEST_F(RunStateSparesTest, NoSpareLeftShrinksAnElasticRunAndWaitsInAFixedOne) {
  for (ConnId c = 1; c <= 4; ++c) Join(c, 2, 3);
  Outbox out = state_.StreamBroken(1, clock_.Now());
  EXPECT_EQ(RankOf(out, 4), 0) << "the spare takes rank 0";
  out = state_.StreamBroken(2, clock_.Now());
  EXPECT_EQ(Count<Assignment>(out), 0) << "no spare: the last call runs";
  clock_.Advance(std::chrono::seconds(2));
  Beat({3, 4});
  out = Tick();
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(RankOf(out, 4), 0);
  EXPECT_EQ(RankOf(out, 3), 1);  // was 2: a round of 2 has no rank 2

  ServerState fixed{ServerLimits{}};
  Outbox ignored;
  for (ConnId c = 1; c <= 3; ++c) {
    fixed.Join(c, MakeJoin("fixed", std::to_string(c), 3, 3), clock_.Now());
  }
  EXPECT_EQ(Count<Assignment>(fixed.StreamBroken(2, clock_.Now())), 0);
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(std::chrono::seconds(2));
    for (ConnId c : {1, 3}) fixed.Heartbeat(c, {}, clock_.Now());
    ASSERT_EQ(Count<Assignment>(fixed.Tick(clock_.Now())), 0) << i;
  }
  EXPECT_EQ(fixed.Status("fixed")->spares, 0);
  EXPECT_EQ(fixed.Status("fixed")->members[0].state, "waiting") << "no round runs";
  out = fixed.Join(4, MakeJoin("fixed", "4", 3, 3), clock_.Now());
  ASSERT_EQ(Count<Assignment>(out), 3);
  EXPECT_EQ(RankOf(out, 4), 1);
  EXPECT_EQ(RankOf(out, 3), 2);
}

// The spare that took a lost rank is lost itself while its workers start: the next spare takes
// the same rank; the order each spare was told matches.
TEST_F(RunStateSparesTest, ALossDuringRecoveryTakesTheNextSpare) {
  for (ConnId c = 1; c <= 3; ++c) Join(c, 3, 3);
  ASSERT_NE(Find<StandbyNotice>(Join(4, 3, 3), 4), nullptr);
  const Outbox joined5 = Join(5, 3, 3);
  ASSERT_NE(Find<StandbyNotice>(joined5, 5), nullptr);
  EXPECT_EQ(Find<StandbyNotice>(joined5, 5)->position, 1);
  EXPECT_EQ(Find<StandbyNotice>(joined5, 5)->members, 3);
  Outbox out = state_.StreamBroken(2, clock_.Now());
  EXPECT_EQ(RankOf(out, 4), 1);
  ASSERT_NE(Find<StandbyNotice>(out, 5), nullptr) << "still a spare, now first in line";
  EXPECT_EQ(Find<StandbyNotice>(out, 5)->position, 0);
  out = state_.StreamBroken(4, clock_.Now());
  ASSERT_EQ(Count<Assignment>(out), 3);
  EXPECT_EQ(RankOf(out, 1), 0);
  EXPECT_EQ(RankOf(out, 5), 1);
  EXPECT_EQ(RankOf(out, 3), 2);
  EXPECT_EQ(Find<Assignment>(out, 5)->round, 3);
  EXPECT_EQ(Status().spares, 0);
  EXPECT_EQ(Status().spares_used, 2);
}

// A lost node that comes back (rejoined under a new id) finds its rank taken by a spare: it
// waits as a spare itself, costs no restart, and takes the next hole.
TEST_F(RunStateSparesTest, AReturningNodeBecomesASpare) {
  for (ConnId c = 1; c <= 4; ++c) Join(c, 3, 3);
  state_.StreamBroken(2, clock_.Now());
  JoinRequest back = MakeJoin("run", "2-rejoin1", 3, 3);
  back.node.formerly_node_id = "2";
  Outbox out = ServerStateTest::Join(7, back);
  EXPECT_EQ(Count<RestartNotice>(out), 0);
  EXPECT_EQ(Count<Assignment>(out), 0);
  ASSERT_NE(Find<StandbyNotice>(out, 7), nullptr);
  EXPECT_EQ(Find<StandbyNotice>(out, 7)->round, 2);
  EXPECT_EQ(Status().members.back().node_id, "2-rejoin1");
  EXPECT_EQ(Status().members.back().state, "spare");
  EXPECT_EQ(Status().restarts_used, 1);
  out = state_.StreamBroken(1, clock_.Now());
  EXPECT_EQ(RankOf(out, 7), 0);
}

// What operators see: the spares in the status and /metrics, each restart's detection time and
// whether a spare was taken, and the same facts in the survivors' restart notices.
TEST_F(RunStateSparesTest, SparesAreCountedInStatusAndMetrics) {
  for (ConnId c = 1; c <= 4; ++c) Join(c, 2, 2);
  RunStatus s = Status();
  EXPECT_EQ(s.spares, 2);
  EXPECT_EQ(s.members[2].state, "spare");
  EXPECT_EQ(s.members[3].state, "spare");
  EXPECT_EQ(s.members[2].group_rank, -1);
  // Node 2's stream breaks after 2.7 s of silence (2 keep-alive intervals, then some): the
  // silence is the detection time (a break while still heard from is noticed at once: below).
  clock_.Advance(std::chrono::milliseconds(2700));
  Beat({1, 3, 4});
  const Outbox out = state_.StreamBroken(2, clock_.Now());
  const RestartNotice* told = Find<RestartNotice>(out, 1);
  ASSERT_NE(told, nullptr);
  EXPECT_TRUE(told->facts.spare_used);
  ASSERT_TRUE(told->facts.lost_silent_s.has_value());
  EXPECT_DOUBLE_EQ(*told->facts.lost_silent_s, 2.7);
  s = Status();
  EXPECT_EQ(s.spares, 1);
  EXPECT_EQ(s.spares_used, 1);
  ASSERT_EQ(s.restarts.size(), 1u);
  EXPECT_TRUE(s.restarts[0].spare_used);
  EXPECT_DOUBLE_EQ(*s.restarts[0].lost_silent_s, 2.7);
  const std::string metrics =
      FormatMetrics(state_.metrics(), state_.AllStatus(/*with_members=*/false));
  EXPECT_THAT(metrics,
              HasSubstr("# TYPE ddprun_rdzv_spares gauge\nddprun_rdzv_spares{run_id=\"run\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("# TYPE ddprun_rdzv_spares_used_total counter\n"
                                 "ddprun_rdzv_spares_used_total{run_id=\"run\"} 1\n"));
  // A worker failure with no loss: no detection time, and no spare (the round is full).
  const Outbox failed = state_.GroupStatus(1, 2, GroupState::kFailed, std::nullopt, clock_.Now());
  ASSERT_NE(Find<RestartNotice>(failed, 3), nullptr);
  EXPECT_FALSE(Find<RestartNotice>(failed, 3)->facts.spare_used);
  EXPECT_FALSE(Find<RestartNotice>(failed, 3)->facts.lost_silent_s.has_value());
  // Node 3 dies while it is heard from: its stream's break is the detection, at once.
  const Outbox died = state_.StreamBroken(3, clock_.Now());
  ASSERT_NE(Find<RestartNotice>(died, 1), nullptr);
  EXPECT_DOUBLE_EQ(*Find<RestartNotice>(died, 1)->facts.lost_silent_s, 0.0);
  EXPECT_TRUE(Find<RestartNotice>(died, 1)->facts.spare_used);
}

// The etcd backend's coordinator changes: the new RunState, restored from the snapshot, keeps the
// spare a spare (not a newcomer that restarts the round) and counts it used when it is taken.
TEST(RunSnapshotTest, SparesSurviveACoordinatorChange) {
  FakeClock clock;
  RunState before(MakeJoin("run", "1", 2, 2), clock.Now());
  Outbox out;
  for (ConnId c = 1; c <= 3; ++c) {
    before.Join(c, MakeJoin("run", std::to_string(c), 2, 2), clock.Now(), &out);
  }
  const RunSnapshot snapshot = before.Snapshot();
  ASSERT_EQ(snapshot.members.size(), 3u);

  RunState after(MakeJoin("run", "1", 2, 2), clock.Now());
  Outbox rejoined;
  for (ConnId c = 1; c <= 3; ++c) {
    after.Join(c + 10, MakeJoin("run", std::to_string(c), 2, 2), clock.Now(), &rejoined);
  }
  rejoined.clear();
  after.Restore(snapshot, clock.Now(), &rejoined);
  EXPECT_EQ(Count<RestartNotice>(rejoined), 0);
  EXPECT_EQ(Count<StandbyNotice>(rejoined), 0) << "it was told already";
  RunStatus s = after.Status();
  EXPECT_EQ(s.spares, 1);
  EXPECT_EQ(s.members[2].node_id, "3");
  EXPECT_EQ(s.members[2].state, "spare");
  Outbox lost;
  after.StreamBroken(11, clock.Now(), &lost);
  ASSERT_NE(Find<Assignment>(lost, 13), nullptr);
  EXPECT_EQ(Find<Assignment>(lost, 13)->group_rank, 0);
  EXPECT_EQ(after.Status().spares_used, 1);
  EXPECT_TRUE(after.Status().restarts.back().spare_used);
}

}  // namespace
}  // namespace ddprun::rendezvous
