// The majority rule of an embedded server (rendezvous/core/last_round_majority.h): the rule on
// its own, then RunState driven through ServerState with a FakeClock, as each side of a
// partition sees it (issue 24: the hosting host cut off).
#include "rendezvous/core/last_round_majority.h"

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/core/server_state.h"
#include "tests/rendezvous/core/state_fixture.h"
#include "tests/rendezvous/core/state_test_util.h"

namespace ddprun::rendezvous {
namespace {

using ::ddprun::rendezvous::testing::Count;
using ::ddprun::rendezvous::testing::Find;
using ::ddprun::rendezvous::testing::MakeJoin;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

LastRoundMajority::IsPresent Among(std::set<std::string> ids) {
  return [ids](const std::string& id) { return ids.count(id) > 0; };
}

TEST(LastRoundMajorityTest, MoreThanHalfOfTheMembersHoldsIt) {
  LastRoundMajority m;
  m.Reset(1, {"a", "b", "c"});
  EXPECT_TRUE(m.HeldBy(Among({"b", "c"})));
  EXPECT_TRUE(m.HeldBy(Among({"a", "b", "c"})));
  EXPECT_FALSE(m.HeldBy(Among({"a"})));
  EXPECT_FALSE(m.HeldBy(Among({"c"})));
  EXPECT_FALSE(m.HeldBy(Among({})));
}

TEST(LastRoundMajorityTest, ExactlyHalfHoldsItOnlyWithTheLowestRank) {
  LastRoundMajority m;
  m.Reset(1, {"a", "b"});
  EXPECT_TRUE(m.HeldBy(Among({"a"})));
  EXPECT_FALSE(m.HeldBy(Among({"b"})));
  m.Reset(1, {"a", "b", "c", "d"});
  EXPECT_TRUE(m.HeldBy(Among({"a", "d"})));
  EXPECT_FALSE(m.HeldBy(Among({"b", "c"})));  // the other half has rank 0
}

TEST(LastRoundMajorityTest, MembersKnownGoneDoNotCount) {
  LastRoundMajority m;
  m.Reset(1, {"a", "b", "c"});
  m.MarkGone("b");
  m.MarkGone("c");
  EXPECT_TRUE(m.HeldBy(Among({"a"})));  // the only member that may be alive
  // Unknown ranks (a recovered round's lost host) count as silent unless named gone.
  m.Reset(1, {"", "b", "c"});
  EXPECT_TRUE(m.HeldBy(Among({"b", "c"})));
  EXPECT_FALSE(m.HeldBy(Among({"b"})));
  m.Reset(1, {"", "b", "c"}, {0});
  EXPECT_TRUE(m.HeldBy(Among({"b"})));  // 1 of 2, and b is the lowest rank left
  m.MarkGone("b");
  m.MarkGone("c");
  EXPECT_TRUE(m.HeldBy(Among({})));  // nobody could run a world elsewhere
}

TEST(LastRoundMajorityTest, NoRoundYetHoldsIt) {
  LastRoundMajority m;
  EXPECT_TRUE(m.HeldBy(Among({})));
}

TEST(LastRoundMajorityTest, DescribesWhoIsHereAndWhoIsSilent) {
  LastRoundMajority m;
  m.Reset(4, {"a", "", "c"});
  EXPECT_EQ(m.Describe(Among({"a"})),
            "1 of the 3 members of round 4 that may still be alive (here: node a; silent: group "
            "rank 1, node c)");
}

// Joint consensus: a round this server formed counts beside the confirmed one until each of
// its members showed it knows it; a member of the new round that never heard of it may be on
// the other side with the round before as its reference.
TEST(LastRoundMajorityTest, AnUnconfirmedRoundCountsBesideTheRoundBefore) {
  LastRoundMajority m;
  m.Reset(1, {"a", "b", "c"});
  m.Formed(2, {"a", "c", "d"});  // c was silent, still within its lease, when it formed
  EXPECT_EQ(m.rounds_counted(), 2u);
  EXPECT_FALSE(m.HeldBy(Among({"a", "d"})));  // 2 of round 2, but 1 of round 1
  EXPECT_TRUE(m.HeldBy(Among({"a", "b", "d"})));
  m.Confirmed(2, "a");
  m.Confirmed(2, "d");
  m.Confirmed(1, "c");  // an older round proves nothing of round 2
  EXPECT_EQ(m.rounds_counted(), 2u);
  m.Confirmed(2, "c");
  EXPECT_EQ(m.rounds_counted(), 1u);
  EXPECT_TRUE(m.HeldBy(Among({"a", "d"})));  // round 1 is forgotten
}

TEST(LastRoundMajorityTest, MembersKnownGoneNeedNotConfirm) {
  LastRoundMajority m;
  m.Reset(1, {"a", "b"});
  m.Formed(2, {"a", "b", "c"});
  m.Formed(3, {"a", "b"});
  m.Confirmed(3, "a");
  EXPECT_EQ(m.rounds_counted(), 3u);
  m.MarkGone("b");                    // b's stream broke while it was heard from
  EXPECT_EQ(m.rounds_counted(), 1u);  // round 3 is confirmed by everyone who may be alive
  EXPECT_TRUE(m.HeldBy(Among({"a"})));
}

TEST(LastRoundMajorityTest, DescribesTheOldestRoundWhoseMajorityIsMissing) {
  LastRoundMajority m;
  m.Reset(1, {"a", "b", "c"});
  m.Formed(2, {"a", "c", "d"});
  EXPECT_EQ(m.Describe(Among({"a", "d"})),
            "1 of the 3 members of round 1 that may still be alive (here: node a; silent: node b, "
            "node c)");
  EXPECT_EQ(m.Describe(Among({"a", "b", "c"})),
            "2 of the 3 members of round 2 that may still be alive (here: node a, node c; "
            "silent: node d)");
}

class MajorityRunTest : public ::ddprun::rendezvous::testing::ServerStateTest {
 protected:
  MajorityRunTest() : ServerStateTest(RoundQuorum::kMajorityOfLastRound) {}
  // Nodes 1..3 of a 1:3 run form round 1 (node 1 first: group rank 0).
  void FormRoundOfThree() {
    for (ConnId c : {1, 2, 3}) Join(c, MakeJoin("run", std::to_string(c), 1, 3));
    ASSERT_EQ(Status().round, 1);
  }
  // Node `c` re-registers (after a failover) claiming group rank c-1 of round 4, a round of
  // `nodes` nodes, in a run of `min_nodes`:`max_nodes`.
  void JoinClaimingRound4(ConnId c, int min_nodes, int max_nodes, int nodes,
                          ResumeClaim::Group group = ResumeClaim::Group::kRunning) {
    JoinRequest r = MakeJoin("run", std::to_string(c), min_nodes, max_nodes);
    ResumeClaim claim;
    claim.last.round = 4;
    claim.last.group_rank = static_cast<int>(c) - 1;
    claim.last.group_world_size = nodes;
    claim.last.world_size = 2 * nodes;
    claim.last.master_addr = "10.0.0.1";
    claim.last.master_port = 29500;
    claim.group = group;
    r.resume = claim;
    Join(c, r);
  }
  // Only `alive` speak for the lease (3 s): the others are lost to silence.
  Outbox SilenceOthers(std::initializer_list<ConnId> alive) {
    Outbox all;
    for (int i = 0; i < 7; ++i) {
      clock_.Advance(milliseconds(500));
      Beat(alive);
      Outbox out = Tick();
      all.insert(all.end(), out.begin(), out.end());
    }
    return all;
  }
};

// The old host's side of a partition: its server lost the two others to silence. They may be
// running the job with a successor, so it forms no round of one, however long it waits, and
// closes the run at join_timeout saying why.
TEST_F(MajorityRunTest, TheMinorityFormsNoRoundAndClosesAtJoinTimeout) {
  FormRoundOfThree();
  Outbox out = SilenceOthers({1});
  ASSERT_NE(Find<RestartNotice>(out, 1), nullptr);  // the lost members restarted it
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(seconds(1));
    Beat({1});
    out = Tick();
    EXPECT_EQ(Count<Assignment>(out), 0);
  }
  EXPECT_EQ(Status().round, 1);
  EXPECT_EQ(Status().phase, RunPhase::kJoining);
  clock_.Advance(seconds(60));
  Beat({1});
  out = Tick();
  const CloseNotice* close = Find<CloseNotice>(out, 1);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(close->status.message(),
              HasSubstr("no majority of its last round came back within join_timeout"));
  EXPECT_THAT(close->status.message(), HasSubstr("1 of the 3 members of round 1"));
}

// The same loss seen by a server outside the job (kAnyNodes): nothing can be on another side,
// and the one node left goes on as a world of one, as before.
TEST_F(MajorityRunTest, WithoutTheRuleTheOneNodeLeftGoesOn) {
  ServerState any;
  for (ConnId c : {1, 2, 3}) any.Join(c, MakeJoin("run", std::to_string(c), 1, 3), clock_.Now());
  Outbox out;
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(milliseconds(500));
    any.Heartbeat(1, {}, clock_.Now());
    Outbox o = any.Tick(clock_.Now());
    out.insert(out.end(), o.begin(), o.end());
  }
  ASSERT_NE(Find<Assignment>(out, 1), nullptr);
  EXPECT_EQ(Find<Assignment>(out, 1)->group_world_size, 1);
}

// Agents that died where the server saw it (their streams broke while they were still heard
// from) cannot be on another side: the node left goes on alone, as without the rule.
TEST_F(MajorityRunTest, MembersWhoseStreamsBrokeWhileHeardFromDoNotCount) {
  FormRoundOfThree();
  clock_.Advance(milliseconds(500));
  Beat({1, 2, 3});
  state_.StreamBroken(2, clock_.Now());
  state_.StreamBroken(3, clock_.Now());
  clock_.Advance(seconds(3));  // the last call after the failure
  Beat({1});
  Outbox out = Tick();
  ASSERT_NE(Find<Assignment>(out, 1), nullptr);
  EXPECT_EQ(Find<Assignment>(out, 1)->group_world_size, 1);
}

// A stream that breaks after a silence (gRPC's keepalive on a cut link) proves nothing.
TEST_F(MajorityRunTest, AStreamThatBreaksAfterASilenceCountsAsSilent) {
  FormRoundOfThree();
  clock_.Advance(milliseconds(2500));  // nodes 2 and 3 silent, still within the lease
  Beat({1});
  state_.StreamBroken(2, clock_.Now());
  state_.StreamBroken(3, clock_.Now());
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(seconds(1));
    Beat({1});
    EXPECT_EQ(Count<Assignment>(Tick()), 0);
  }
}

// A majority side goes on: the host's server keeps two of three.
TEST_F(MajorityRunTest, TheMajoritySideGoesOnWithoutTheSilentMember) {
  FormRoundOfThree();
  Outbox out = SilenceOthers({1, 2});
  out = Tick();
  clock_.Advance(seconds(2));
  Beat({1, 2});
  out = Tick();
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(Find<Assignment>(out, 2)->round, 2);
}

// The successor's side: the two survivors re-register with claims of round 4 that do not name
// the host gone (it was only silent). The run waits a lease for it, then restarts without it:
// two of three is a majority.
TEST_F(MajorityRunTest, TheSuccessorWithTheMajorityFormsTheNextRound) {
  for (ConnId c : {2, 3}) JoinClaimingRound4(c, 1, 3, 3);
  Outbox out = SilenceOthers({2, 3});
  ASSERT_NE(Find<RestartNotice>(out, 2), nullptr);
  EXPECT_THAT(Find<RestartNotice>(out, 2)->reason, HasSubstr("group rank 0 of round 4"));
  clock_.Advance(seconds(2));
  Beat({2, 3});
  out = Tick();
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(Find<Assignment>(out, 2)->round, 5);
  EXPECT_EQ(Find<Assignment>(out, 2)->group_world_size, 2);
}

// A cut-off node that made itself the successor, alone: one claim of three, no round.
TEST_F(MajorityRunTest, ALonelySuccessorFormsNoRound) {
  JoinClaimingRound4(3, 1, 3, 3);
  for (int i = 0; i < 20; ++i) {
    clock_.Advance(milliseconds(500));
    Beat({3});
    EXPECT_EQ(Count<Assignment>(Tick()), 0);
  }
  EXPECT_EQ(Status().round, 4);
}

// The same with claims whose workers were already stopped: a restart of round 4 was heard
// before the split (a worker failed, the old host restarted the round; its last call is when the
// link went). Round 4 is still the reference: the successor of two of its five members forms no
// round, while the old host's side, three of five, may. (Before, a successor whose claims were
// all "waiting" took no reference at all, and any number of nodes went on.)
TEST_F(MajorityRunTest, ASuccessorOfWaitingClaimsStillNeedsAMajorityOfTheirRound) {
  for (ConnId c : {4, 5}) JoinClaimingRound4(c, 2, 5, 5, ResumeClaim::Group::kWaiting);
  for (int i = 0; i < 20; ++i) {
    clock_.Advance(milliseconds(500));
    Beat({4, 5});
    EXPECT_EQ(Count<Assignment>(Tick()), 0) << "two of round 4's five formed a round";
  }
}

// A job of two, cut in two: only the side with group rank 0 goes on.
TEST_F(MajorityRunTest, AnEvenSplitGoesOnOnlyOnTheSideOfRankZero) {
  for (ConnId c : {1, 2}) Join(c, MakeJoin("run", std::to_string(c), 1, 2));
  ASSERT_EQ(Status().round, 1);
  Outbox out = SilenceOthers({1});
  clock_.Advance(seconds(2));
  Beat({1});
  out = Tick();
  ASSERT_NE(Find<Assignment>(out, 1), nullptr);
  EXPECT_EQ(Find<Assignment>(out, 1)->group_world_size, 1);
}

// A member given up (its agent was stopped longer than the lease) rejoins as a new node: it
// counts as the member it was, so the run does not wait for the old id forever.
TEST_F(MajorityRunTest, AMemberThatRejoinsAsANewNodeCountsAsItself) {
  FormRoundOfThree();
  SilenceOthers({1});
  JoinRequest back = MakeJoin("run", "2-rejoin1", 1, 3);
  back.node.formerly_node_id = "2";
  Join(2, back);
  clock_.Advance(seconds(2));
  Beat({1, 2});
  Outbox out = Tick();
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(Find<Assignment>(out, 2)->round, 2);
}

// Issue 43 (found by rendezvous_partition_test): the host is cut off from nodes 2 and 3, whose
// leases run out 500 ms apart, and a newcomer joins the host's side. When node 2 is given up,
// node 3 is still within its lease: host, node 3 and the newcomer make a full round 2, which node
// 3 never hears of. When node 3 is given up too, host and newcomer are 2 of round 2's 3 — but
// nodes 2 and 3, on the other side, are 2 of round 1's 3 with a successor. Round 2 was never
// confirmed by node 3, so round 1 still counts: the host's side forms nothing more.
TEST_F(MajorityRunTest, ARoundAMemberNeverConfirmedDoesNotMakeTheCutOffSideAMajority) {
  FormRoundOfThree();
  for (ConnId c : {1, 2, 3}) {
    state_.GroupStatus(c, 1, GroupState::kRunning, std::nullopt, clock_.Now());
  }
  clock_.Advance(milliseconds(500));
  Beat({1, 3});  // node 2's last word
  Join(4, MakeJoin("run", "4", 1, 3));
  Outbox out;
  for (int i = 0; i < 6; ++i) {  // node 2's lease ends first, then node 3's
    clock_.Advance(milliseconds(500));
    Beat({1, 4});
    Outbox o = Tick();
    for (const Outgoing& sent : o) {  // the host and the newcomer start their workers
      const auto* a = std::get_if<Assignment>(&sent.msg);
      if (a != nullptr && (sent.conn == 1 || sent.conn == 4)) {
        state_.GroupStatus(sent.conn, a->round, GroupState::kRunning, std::nullopt, clock_.Now());
      }
    }
    out.insert(out.end(), o.begin(), o.end());
  }
  const Assignment* formed = Find<Assignment>(out, 4);
  ASSERT_NE(formed, nullptr) << "round 2 (host, node 3 within its lease, newcomer) formed";
  EXPECT_EQ(formed->round, 2);
  EXPECT_EQ(formed->group_world_size, 3);
  for (int i = 0; i < 20; ++i) {
    clock_.Advance(milliseconds(500));
    Beat({1, 4});
    out = Tick();
    EXPECT_EQ(Count<Assignment>(out), 0) << "the cut-off side formed round " << Status().round;
  }
  EXPECT_EQ(Status().round, 2);
}

}  // namespace
}  // namespace ddprun::rendezvous
