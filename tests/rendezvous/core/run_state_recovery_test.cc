// Re-registration and the rebuild of a run by a rendezvous server that restarted without state
// (rendezvous/core/run_state_recovery.cc), driven through ServerState with a FakeClock.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/api/eviction.h"
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

using Group = ResumeClaim::Group;

// Node "<conn>" of a 2:3 run claiming group rank `rank` of round `round` (3 nodes, 2 workers
// each, master on node 1).
JoinRequest Claim(ConnId conn, int64_t round, int rank, Group group = Group::kRunning,
                  int restarts = 2, int group_world_size = 3) {
  JoinRequest r = MakeJoin("run", std::to_string(conn), 2, 3);
  ResumeClaim c;
  c.last.round = round;
  c.last.group_rank = rank;
  c.last.group_world_size = group_world_size;
  c.last.rank_offset = 2 * rank;
  // Saturated: an impossible claim may name a group world whose double is no int (UBSan found
  // the overflow).
  c.last.world_size = static_cast<int>(std::min<int64_t>(int64_t{2} * group_world_size, INT_MAX));
  c.last.master_addr = "10.0.0.1";
  c.last.master_port = 29500;
  c.last.restart_count = restarts;
  c.last.max_restarts = 3;
  c.restarts_used = restarts;
  c.group = group;
  r.resume = c;
  return r;
}

using RunStateRecoveryTest = ::ddprun::rendezvous::testing::ServerStateTest;

// Issue 40: a spare (no workers, waiting since an older round) re-registers with a restarted
// server; the members' round goes on full, and the spare is told it is one, counted as one,
// and fills the next hole.
TEST_F(RunStateRecoveryTest, ASpareBackAfterAServerRestartStaysASpareAndFillsAHole) {
  Join(1, Claim(1, 4, 0));
  Join(2, Claim(2, 4, 1));
  Join(4, Claim(4, 3, 0, Group::kWaiting));
  const Outbox out = Join(3, Claim(3, 4, 2));
  EXPECT_EQ(Count<ResumedNotice>(out), 3);
  EXPECT_EQ(Count<RestartNotice>(out), 0);
  ASSERT_NE(Find<StandbyNotice>(out, 4), nullptr);
  EXPECT_EQ(Find<StandbyNotice>(out, 4)->round, 4);
  EXPECT_EQ(Status().spares, 1);
  const Outbox lost = state_.StreamBroken(2, clock_.Now());
  ASSERT_NE(Find<Assignment>(lost, 4), nullptr);
  EXPECT_EQ(Find<Assignment>(lost, 4)->group_rank, 1);
  EXPECT_EQ(Find<Assignment>(lost, 3)->group_rank, 2);
  EXPECT_EQ(Status().spares_used, 1);
}

// Issue 41: a node set aside (evicted as slow in round 3, not yet requalified) re-registers
// with a server that lost the run. It is not a claimant (its old round would settle the
// recovery at once), and not a spare: the new server has no preflight figures to judge it by,
// so it is closed as evicted. The members' round goes on.
TEST_F(RunStateRecoveryTest, ANodeSetAsideBeforeAServerRestartIsNoSpareAfterIt) {
  JoinRequest aside = Claim(4, 3, 1, Group::kWaiting);
  aside.resume->set_aside = "this node was evicted from the run as slow (--evict-slow): ...";
  Join(1, Claim(1, 4, 0));
  Outbox out = Join(4, aside);
  const CloseNotice* closed = Find<CloseNotice>(out, 4);
  ASSERT_NE(closed, nullptr);
  EXPECT_TRUE(IsEvictedStop(closed->status)) << closed->status;
  EXPECT_THAT(std::string(closed->status.message()),
              HasSubstr("this node was set aside before it re-registered (the server said then: "
                        "this node was evicted from the run as slow"));
  EXPECT_EQ(Status().phase, RunPhase::kRecovering) << "its claim settles nothing";
  Join(2, Claim(2, 4, 1));
  out = Join(3, Claim(3, 4, 2));
  EXPECT_EQ(Count<ResumedNotice>(out), 3);
  EXPECT_EQ(Count<RestartNotice>(out), 0);
  EXPECT_EQ(Status().spares, 0);
  EXPECT_EQ(Status().members.size(), 3u);
}

// The same node first, with the claim an agent from before this fix sent (its last round,
// running; its group rank now the spare's): without the check it would start the recovery and
// contradict the member that holds that rank.
TEST_F(RunStateRecoveryTest, ANodeSetAsideComingBackFirstIsNoClaimantOfTheRecovery) {
  JoinRequest aside = Claim(4, 4, 1);
  aside.resume->set_aside = "this node was kept out by the preflight: send 97 Mbit/s";
  const Outbox first = Join(4, aside);
  ASSERT_NE(Find<CloseNotice>(first, 4), nullptr);
  EXPECT_TRUE(IsEvictedStop(Find<CloseNotice>(first, 4)->status));
  Join(1, Claim(1, 4, 0));
  Join(2, Claim(2, 4, 1));
  const Outbox out = Join(3, Claim(3, 4, 2));
  EXPECT_EQ(Count<ResumedNotice>(out), 3);
  EXPECT_EQ(Count<RestartNotice>(out), 0);
}

TEST_F(RunStateRecoveryTest, EveryMemberBackTheRoundGoesOnWithoutRestartOrBudget) {
  Outbox out = Join(1, Claim(1, 4, 0));
  EXPECT_NE(Find<JoinedNotice>(out, 1), nullptr);
  EXPECT_EQ(Count<ResumedNotice>(out), 0);
  EXPECT_EQ(Status().phase, RunPhase::kRecovering);
  EXPECT_EQ(Status().members[0].state, "recovering");
  Join(2, Claim(2, 4, 1));
  out = Join(3, Claim(3, 4, 2));
  // The last member settles it at once: no waiting for the lease.
  EXPECT_EQ(Count<ResumedNotice>(out), 3);
  EXPECT_EQ(Find<ResumedNotice>(out, 2)->round, 4);
  EXPECT_EQ(Count<RestartNotice>(out), 0);
  EXPECT_EQ(Count<Assignment>(out), 0);
  RunStatus s = Status();
  EXPECT_EQ(s.phase, RunPhase::kRunning);
  EXPECT_EQ(s.round, 4);
  EXPECT_EQ(s.restarts_used, 2);
  ASSERT_EQ(s.members.size(), 3u);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(s.members[r].group_rank, r);
  // The run goes on as before: a failure spends the budget from where it was.
  WorkerFailure f;
  f.hostname = "host-2";
  out = state_.GroupStatus(2, 4, GroupState::kFailed, f, clock_.Now());
  EXPECT_EQ(Count<RestartNotice>(out), 3);
  EXPECT_EQ(Find<RestartNotice>(out, 1)->restart_count, 3);
  EXPECT_EQ(Status().restarts_used, 3);
}

TEST_F(RunStateRecoveryTest, AMemberThatDoesNotComeBackIsLostAfterTheLease) {
  Join(1, Claim(1, 4, 0));
  Join(3, Claim(3, 4, 2));
  clock_.Advance(milliseconds(2900));
  Beat({1, 3});
  EXPECT_EQ(Count<RestartNotice>(Tick()), 0);  // the lease (3 s) has not passed
  clock_.Advance(milliseconds(200));
  Beat({1, 3});
  Outbox out = Tick();
  ASSERT_EQ(Count<RestartNotice>(out), 2);
  EXPECT_THAT(Find<RestartNotice>(out, 1)->reason,
              HasSubstr("group rank 1 of round 4 did not re-register within 3000 ms after the "
                        "rendezvous server restarted"));
  EXPECT_EQ(Status().restarts_used, 3);  // lost like a broken stream: one restart
  // The survivors keep their order in round 5 (after the last call).
  clock_.Advance(seconds(2));
  Beat({1, 3});
  out = Tick();
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(Find<Assignment>(out, 1)->round, 5);
  EXPECT_EQ(Find<Assignment>(out, 1)->group_rank, 0);
  EXPECT_EQ(Find<Assignment>(out, 3)->group_rank, 1);
}

// Issue 24, failover of an embedded server: the survivors' claims name the hosting agent's
// group rank as gone, so the successor settles as soon as the others are back instead of
// waiting a lease; the loss spends one restart like any lost node.
TEST_F(RunStateRecoveryTest, AGroupRankClaimedGoneIsNotWaitedFor) {
  JoinRequest first = Claim(2, 4, 1);
  first.resume->gone_group_rank = 0;
  Outbox out = Join(2, first);
  EXPECT_EQ(Count<RestartNotice>(out), 0);  // rank 2 is not back yet
  JoinRequest second = Claim(3, 4, 2);
  second.resume->gone_group_rank = 0;
  out = Join(3, second);
  ASSERT_EQ(Count<RestartNotice>(out), 2);
  EXPECT_THAT(Find<RestartNotice>(out, 2)->reason,
              HasSubstr("group rank 0 of round 4 lost with the agent that hosted the rendezvous"));
  EXPECT_EQ(Status().restarts_used, 3);
}

// Issue 24 item 5, a claim from an old round after a failover: the successor settled round 4
// without the host and formed round 5; a node that still claims round 3 (it missed round 4) has
// its workers stopped and waits as a newcomer. No rank is handed out twice.
TEST_F(RunStateRecoveryTest, AClaimFromAnOldRoundAfterAFailoverJoinsAsANewcomer) {
  for (ConnId conn : {2, 3}) {
    JoinRequest claim = Claim(conn, 4, static_cast<int>(conn) - 1);
    claim.resume->gone_group_rank = 0;
    Join(conn, claim);
  }
  clock_.Advance(seconds(2));  // the last call after the failure
  Beat({2, 3});
  Outbox out = Tick();
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(Find<Assignment>(out, 2)->round, 5);
  EXPECT_EQ(Find<Assignment>(out, 2)->group_rank, 0);
  EXPECT_EQ(Find<Assignment>(out, 3)->group_rank, 1);

  out = Join(4, Claim(4, 3, 1));  // round 3, group rank 1: node 3's rank now
  ASSERT_NE(Find<RestartNotice>(out, 4), nullptr);
  EXPECT_EQ(Find<RestartNotice>(out, 4)->round, 3);
  EXPECT_EQ(Find<ResumedNotice>(out, 4), nullptr);
  // Round 5 goes on for nodes 2 and 3 until node 4's scale-up forms round 6 with three ranks.
  std::vector<int> ranks;
  for (const auto& m : Status().members) {
    if (m.group_rank >= 0) ranks.push_back(m.group_rank);
  }
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(std::adjacent_find(ranks.begin(), ranks.end()), ranks.end());
  EXPECT_EQ(Status().restarts_used, 3);  // the host's loss only
}

// Issue 24 item 5, two agents that both believe they serve, seen from the successor: the
// survivors named the host's rank gone, but the host's agent is alive (its stream broke, its
// server is on its own) and re-registers here too before the run settles. Its claim of rank 0
// is one claim more; nothing is handed out twice and the round goes on with everyone.
TEST_F(RunStateRecoveryTest, TheHostClaimedGoneButBackBeforeTheSettleIsTakenIn) {
  JoinRequest b = Claim(2, 4, 1);
  b.resume->gone_group_rank = 0;
  Outbox out = Join(2, b);
  out = Join(1, Claim(1, 4, 0));  // the "gone" host, alive
  JoinRequest c = Claim(3, 4, 2);
  c.resume->gone_group_rank = 0;
  out = Join(3, c);
  // Every group rank is back, the "gone" one too: round 4 goes on, nothing restarts.
  EXPECT_EQ(Count<ResumedNotice>(out), 3);
  EXPECT_EQ(Count<RestartNotice>(out), 0);
  RunStatus s = Status();
  EXPECT_EQ(s.phase, RunPhase::kRunning);
  EXPECT_EQ(s.restarts_used, 2);
  std::vector<int> ranks;
  for (const auto& m : s.members) {
    if (m.group_rank >= 0) ranks.push_back(m.group_rank);
  }
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2}));
}

TEST_F(RunStateRecoveryTest, AMissingMemberWithTheBudgetSpentClosesTheRun) {
  Join(1, Claim(1, 4, 0, Group::kRunning, /*restarts=*/3));
  clock_.Advance(seconds(3));
  Beat({1});
  Outbox out = Tick();
  const CloseNotice* close = Find<CloseNotice>(out, 1);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(close->status.message(), HasSubstr("group ranks 1, 2 of round 4"));
}

TEST_F(RunStateRecoveryTest, TwoNodesClaimingOneGroupRankRestartAndGetDistinctRanks) {
  Join(1, Claim(1, 4, 0));
  Join(2, Claim(2, 4, 1));
  Outbox out = Join(3, Claim(3, 4, 1));
  ASSERT_EQ(Count<RestartNotice>(out), 3);
  EXPECT_THAT(Find<RestartNotice>(out, 3)->reason,
              HasSubstr("contradict each other: node 2 (host-2) and node 3 (host-3) both claim "
                        "group rank 1"));
  EXPECT_EQ(Status().restarts_used, 2);  // not the workers' fault: no budget spent
  // Three nodes of a 2:3 run: the next round forms at once, one rank each.
  ASSERT_EQ(Count<Assignment>(out), 3);
  std::set<int> ranks;
  for (ConnId c : {1, 2, 3}) ranks.insert(Find<Assignment>(out, c)->group_rank);
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(Find<Assignment>(out, 1)->round, 5);
}

TEST_F(RunStateRecoveryTest, ClaimsDisagreeingOnTheWorldRestart) {
  Join(1, Claim(1, 4, 0));
  JoinRequest other = Claim(2, 4, 1);
  other.resume->last.master_port = 1234;
  Outbox out = Join(2, other);
  ASSERT_EQ(Count<RestartNotice>(out), 2);
  EXPECT_THAT(Find<RestartNotice>(out, 1)->reason, HasSubstr("master 10.0.0.1:1234"));
}

TEST_F(RunStateRecoveryTest, AnImpossibleClaimNeverCrashesOrWaits) {
  Outbox out = Join(1, Claim(1, 4, 0, Group::kRunning, 2, /*group_world_size=*/1 << 30));
  ASSERT_EQ(Count<RestartNotice>(out), 1);
  EXPECT_THAT(Find<RestartNotice>(out, 1)->reason, HasSubstr("the run has at most 3"));
  out = Join(2, Claim(2, 4, -5));
  EXPECT_EQ(Status().phase, RunPhase::kJoining);  // settled: plain joins from now on
}

TEST_F(RunStateRecoveryTest, ARoundAlreadyOverRestartsWithoutBudget) {
  // Node 2 was told round 4 is over (a failure the old server already charged: restarts 3)
  // before the old server died; node 1 never heard.
  Join(1, Claim(1, 4, 0, Group::kRunning, 2, 2));
  Outbox out = Join(2, Claim(2, 4, 1, Group::kWaiting, 3, 2));
  ASSERT_NE(Find<RestartNotice>(out, 1), nullptr);
  EXPECT_THAT(Find<RestartNotice>(out, 1)->reason,
              HasSubstr("round 4 was already over after the rendezvous server restarted"));
  EXPECT_EQ(Status().restarts_used, 3);
}

TEST_F(RunStateRecoveryTest, WorkersOfAnOlderRoundAreStopped) {
  Join(1, Claim(1, 4, 0, Group::kRunning, 2, 2));
  Outbox out = Join(3, Claim(3, 3, 2));  // still runs round 3
  EXPECT_EQ(Count<RestartNotice>(out), 0);
  out = Join(2, Claim(2, 4, 1, Group::kRunning, 2, 2));
  ASSERT_NE(Find<RestartNotice>(out, 3), nullptr);
  EXPECT_EQ(Find<RestartNotice>(out, 3)->round, 3);
  EXPECT_NE(Find<ResumedNotice>(out, 1), nullptr);
  EXPECT_NE(Find<ResumedNotice>(out, 2), nullptr);
  // Round 4 has 2 of max 3 nodes and node 3 now waits: a scale-up, no budget.
  ASSERT_EQ(Count<RestartNotice>(out), 3);
  EXPECT_THAT(Find<RestartNotice>(out, 1)->reason, HasSubstr("node 3 (host-3) joined"));
  EXPECT_EQ(Status().restarts_used, 2);
}

TEST_F(RunStateRecoveryTest, ResultsReportedWhileTheServerWasAwayAreApplied) {
  Join(1, Claim(1, 4, 0, Group::kSucceeded, 2, 2));
  Outbox out = Join(2, Claim(2, 4, 1, Group::kRunning, 2, 2));
  ASSERT_NE(Find<CloseNotice>(out, 1), nullptr);
  EXPECT_TRUE(Find<CloseNotice>(out, 1)->status.ok());
  EXPECT_NE(Find<ResumedNotice>(out, 2), nullptr);
  EXPECT_EQ(Count<RestartNotice>(out), 0);
  // A group status sent after the claim (before the settle) updates it.
  out = state_.GroupStatus(2, 4, GroupState::kSucceeded, std::nullopt, clock_.Now());
  ASSERT_NE(Find<CloseNotice>(out, 2), nullptr);
  EXPECT_EQ(Status().phase, RunPhase::kClosed);
}

TEST_F(RunStateRecoveryTest, AFailureReportedWhileAwaySpendsTheBudgetOnce) {
  Join(1, Claim(1, 4, 0, Group::kRunning, 2, 2));
  JoinRequest failed = Claim(2, 4, 1, Group::kFailed, 2, 2);
  failed.resume->failure = WorkerFailure{"host-2", 3, 1, 77, 1, 0, "boom", false};
  Outbox out = Join(2, failed);
  ASSERT_EQ(Count<RestartNotice>(out), 2);
  EXPECT_THAT(Find<RestartNotice>(out, 1)->reason, HasSubstr("exited with code 1: boom"));
  EXPECT_EQ(Status().restarts_used, 3);
}

TEST_F(RunStateRecoveryTest, ANewcomerDuringRecoveryWaitsThenScalesUp) {
  Join(1, Claim(1, 4, 0, Group::kRunning, 2, 2));
  Outbox out = Join(9, MakeJoin("run", "9", 2, 3));
  EXPECT_NE(Find<JoinedNotice>(out, 9), nullptr);
  EXPECT_EQ(Count<Assignment>(out), 0);
  out = Join(2, Claim(2, 4, 1, Group::kRunning, 2, 2));
  EXPECT_EQ(Count<ResumedNotice>(out), 2);
  ASSERT_EQ(Count<RestartNotice>(out), 2);
  ASSERT_EQ(Count<Assignment>(out), 3);  // 3 = max: round 5 forms at once
  EXPECT_EQ(Find<Assignment>(out, 9)->group_rank, 2);
}

TEST_F(RunStateRecoveryTest, AServerThatKnowsTheRunStopsUnknownAndFutureClaims) {
  Join(1, MakeJoin("run", "1", 2, 3));
  Join(2, MakeJoin("run", "2", 2, 3));
  clock_.Advance(seconds(2));
  Beat({1, 2});
  ASSERT_EQ(Count<Assignment>(Tick()), 2);  // round 1
  // A node that claims round 7: from the future. Its workers stop; it joins as a newcomer.
  Outbox out = Join(3, Claim(3, 7, 2));
  ASSERT_NE(Find<RestartNotice>(out, 3), nullptr);
  EXPECT_EQ(Find<RestartNotice>(out, 3)->round, 7);
  EXPECT_THAT(Find<RestartNotice>(out, 3)->reason,
              HasSubstr("round 7 is from the future: run 'run' is at round 1"));
  ASSERT_EQ(Count<Assignment>(out), 3);  // the scale-up: round 2 with all three
  EXPECT_EQ(Find<Assignment>(out, 3)->round, 2);
  EXPECT_EQ(Status().restarts_used, 0);
}

TEST_F(RunStateRecoveryTest, AnAgentBackOnANewStreamBeforeTheOldOneBrokeGoesOn) {
  Join(1, MakeJoin("run", "1", 2, 2));
  Outbox out = Join(2, MakeJoin("run", "2", 2, 2));
  const Assignment a = *Find<Assignment>(out, 2);
  // The agent saw its stream break; the server has not noticed. Same node id, new stream.
  JoinRequest again = MakeJoin("run", "2", 2, 2);
  again.resume = ResumeClaim{a, 0, Group::kRunning, std::nullopt};
  out = Join(7, again);
  EXPECT_NE(Find<JoinedNotice>(out, 7), nullptr);
  EXPECT_NE(Find<ResumedNotice>(out, 7), nullptr);
  EXPECT_EQ(Count<RestartNotice>(out), 0);
  // The old stream breaking later changes nothing.
  out = state_.StreamBroken(2, clock_.Now());
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(Status().phase, RunPhase::kRunning);
  EXPECT_EQ(Status().members.size(), 2u);
  out = state_.GroupStatus(7, a.round, GroupState::kSucceeded, std::nullopt, clock_.Now());
  EXPECT_NE(Find<CloseNotice>(out, 7), nullptr);
}

TEST_F(RunStateRecoveryTest, AnAgentBackOutOfStepRestartsTheRoundWithoutBudget) {
  Join(1, MakeJoin("run", "1", 2, 2));
  Join(2, MakeJoin("run", "2", 2, 2));
  JoinRequest again = MakeJoin("run", "2", 2, 2);
  again.resume = ResumeClaim{};  // it never heard of round 1
  Outbox out = Join(7, again);
  ASSERT_EQ(Count<RestartNotice>(out), 2);
  EXPECT_THAT(Find<RestartNotice>(out, 1)->reason, HasSubstr("out of step with round 1"));
  EXPECT_EQ(Status().restarts_used, 0);
}

}  // namespace
}  // namespace ddprun::rendezvous
