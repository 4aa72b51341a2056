// Every transition of the rendezvous state machine, driven through ServerState with a FakeClock.
#include <chrono>
#include <string>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/core/server_state.h"
#include "tests/rendezvous/core/state_test_util.h"

namespace ddprun::rendezvous {
namespace {

using ::ddprun::rendezvous::testing::Count;
using ::ddprun::rendezvous::testing::Find;
using ::ddprun::rendezvous::testing::MakeJoin;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

class RunStateTest : public ::testing::Test {
 protected:
  Outbox Join(ConnId conn, const JoinRequest& r) { return state_.Join(conn, r, clock_.Now()); }
  Outbox Join(ConnId conn, int min_nodes, int max_nodes, int max_restarts = 3) {
    return Join(conn, MakeJoin("run", std::to_string(conn), min_nodes, max_nodes, 2, max_restarts));
  }
  Outbox Fail(ConnId conn, int64_t round) {
    WorkerFailure f;
    f.hostname = "host-" + std::to_string(conn);
    f.rank = 3;
    f.local_rank = 1;
    f.pid = 4242;
    f.exit_code = 7;
    return state_.GroupStatus(conn, round, GroupState::kFailed, f, clock_.Now());
  }
  Outbox Tick() { return state_.Tick(clock_.Now()); }
  // Keeps every listed conn's lease fresh.
  void Beat(std::initializer_list<ConnId> conns) {
    for (ConnId c : conns) state_.Heartbeat(c, {}, clock_.Now());
  }

  FakeClock clock_;
  ServerState state_;
};

TEST_F(RunStateTest, AHangRestartsEveryNodeWithStacksAndNamesTheStraggler) {
  Join(1, 2, 2, /*max_restarts=*/1);
  Join(2, 2, 2, 1);
  // Node 1's ranks 0,1 are at step 11 (waiting in step 11's collective); node 2's rank 3 stopped
  // at step 10; rank 2 reports no steps.
  state_.Heartbeat(1, {{0, 11, 3000}, {1, 11, 3100}}, clock_.Now());
  state_.Heartbeat(2, {{2, -1, 9000}, {3, 10, 3200}}, clock_.Now());
  clock_.Advance(milliseconds(500));
  WorkerFailure f;
  f.hostname = "n2";
  f.rank = 3;
  f.local_rank = 1;
  f.pid = 99;
  f.hang = true;
  f.message = "no progress for 3.0 s (--hang-timeout)";
  Outbox out = state_.GroupStatus(2, 1, GroupState::kFailed, f, clock_.Now());
  for (ConnId c : {1, 2}) {
    const RestartNotice* r = Find<RestartNotice>(out, c);
    ASSERT_NE(r, nullptr);
    ASSERT_TRUE(r->hang.has_value());
    EXPECT_EQ(r->hang->straggler, "rank 3 on host-2 (step 10, no progress for 3.7 s)");
    EXPECT_THAT(r->reason, HasSubstr("worker hang on n2: rank 3 (local_rank 1, pid 99) hung: "
                                     "no progress for 3.0 s"));
  }
  // Budget spent by the next hang: the close tells every node to take stacks too.
  state_.Heartbeat(1, {{0, 20, 100}}, clock_.Now());
  state_.Heartbeat(2, {{3, 20, 5000}}, clock_.Now());
  out = state_.GroupStatus(1, 2, GroupState::kFailed, f, clock_.Now());
  for (ConnId c : {1, 2}) {
    const CloseNotice* close = Find<CloseNotice>(out, c);
    ASSERT_NE(close, nullptr);
    EXPECT_EQ(close->status.code(), absl::StatusCode::kResourceExhausted);
    ASSERT_TRUE(close->root_cause.has_value());
    EXPECT_TRUE(close->root_cause->hang);
    // Equal steps: the oldest progress wins.
    EXPECT_EQ(close->straggler, "rank 3 on host-2 (step 20, no progress for 5.0 s)");
  }
}

TEST_F(RunStateTest, AnOrdinaryFailureCarriesNoHangNotice) {
  Join(1, 2, 2);
  Join(2, 2, 2);
  state_.Heartbeat(1, {{0, 5, 10}}, clock_.Now());
  Outbox out = Fail(1, 1);
  const RestartNotice* r = Find<RestartNotice>(out, 2);
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(r->hang.has_value());
}

// The verdict names its cause as a value beside the reason: a worker failure, a lost stream, a
// node that left, a scale-up, and the restart counted under that cause.
TEST_F(RunStateTest, EachRestartCarriesItsCause) {
  Join(1, 2, 3);
  Join(2, 2, 3);
  clock_.Advance(seconds(2));  // the last call for a third node
  Beat({1, 2});
  ASSERT_EQ(Count<Assignment>(Tick()), 2);
  const Outbox failed = Fail(1, 1);
  const RestartNotice* r = Find<RestartNotice>(failed, 2);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->cause, Cause::kWorkerFailure);
  clock_.Advance(seconds(2));
  Beat({1, 2});
  ASSERT_EQ(Count<Assignment>(Tick()), 2);
  Outbox out = Join(3, 2, 3);  // below max: a scale-up
  ASSERT_NE(Find<RestartNotice>(out, 1), nullptr);
  EXPECT_EQ(Find<RestartNotice>(out, 1)->cause, Cause::kNodeJoined);
  ASSERT_EQ(Count<Assignment>(out), 3) << "at max nodes the round forms at once";
  out = state_.StreamBroken(3, clock_.Now());
  ASSERT_NE(Find<RestartNotice>(out, 1), nullptr);
  EXPECT_EQ(Find<RestartNotice>(out, 1)->cause, Cause::kNodeLostStream);
  EXPECT_EQ(state_.Status("run")->restarts.back().cause, Cause::kNodeLostStream);
}

TEST_F(RunStateTest, JoinIsAcknowledged) {
  Outbox out = Join(1, 2, 2);
  ASSERT_NE(Find<JoinedNotice>(out, 1), nullptr);
  EXPECT_EQ(Find<JoinedNotice>(out, 1)->peer_host, "10.0.0.1");
  EXPECT_EQ(Find<JoinedNotice>(out, 1)->keep_alive_interval, seconds(1));
  EXPECT_EQ(Count<Assignment>(out), 0);
}

TEST_F(RunStateTest, RoundCompletesAtOnceAtMax) {
  Join(1, 2, 3);
  Join(2, 2, 3);
  Outbox out = Join(3, 2, 3);
  ASSERT_EQ(Count<Assignment>(out), 3);
  for (ConnId c = 1; c <= 3; ++c) {
    const Assignment* a = Find<Assignment>(out, c);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->round, 1);
    EXPECT_EQ(a->group_rank, c - 1);
    EXPECT_EQ(a->group_world_size, 3);
    EXPECT_EQ(a->rank_offset, 2 * (c - 1));
    EXPECT_EQ(a->world_size, 6);
    EXPECT_EQ(a->master_addr, "10.0.0.1");
    EXPECT_EQ(a->master_port, 29500);
    EXPECT_EQ(a->restart_count, 0);
    EXPECT_EQ(a->max_restarts, 3);
  }
}

// Issue 24: every assignment names where the run's server can move (failover of the embedded
// server): the same list for every member, in group-rank order, at most nine entries however
// large the round.
TEST_F(RunStateTest, AssignmentsCarryTheSameSuccessorsInGroupRankOrder) {
  Outbox out;
  for (ConnId c = 1; c <= 12; ++c) out = Join(c, 12, 12);
  ASSERT_EQ(Count<Assignment>(out), 12);
  const std::vector<Successor>& first = Find<Assignment>(out, 1)->successors;
  ASSERT_EQ(first.size(), 9u);
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].node_id, std::to_string(i + 1));  // joined in order: rank i is node i+1
    EXPECT_EQ(first[i].addr, "10.0.0." + std::to_string(i + 1));
  }
  for (ConnId c = 2; c <= 12; ++c) {
    const std::vector<Successor>& other = Find<Assignment>(out, c)->successors;
    ASSERT_EQ(other.size(), first.size());
    for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(other[i].node_id, first[i].node_id);
  }
}

TEST_F(RunStateTest, RoundCompletesAtMinAfterLastCall) {
  Join(1, 2, 3);
  Join(2, 2, 3);
  // last_call_timeout is 2 s from the moment min was reached.
  clock_.Advance(milliseconds(1999));
  Beat({1, 2});
  EXPECT_EQ(Count<Assignment>(Tick()), 0);
  ASSERT_TRUE(state_.NextDeadline().has_value());
  clock_.Advance(milliseconds(1));
  Outbox out = Tick();
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(Find<Assignment>(out, 2)->group_world_size, 2);
}

TEST_F(RunStateTest, LastCallDeadlineIsReported) {
  Join(1, 1, 2);
  ASSERT_TRUE(state_.NextDeadline().has_value());
  EXPECT_EQ(*state_.NextDeadline(), clock_.Now() + seconds(2));
}

TEST_F(RunStateTest, DroppingBelowMinCancelsLastCall) {
  Join(1, 2, 3);
  Join(2, 2, 3);
  clock_.Advance(seconds(1));
  state_.Leave(2, "bye", clock_.Now());
  clock_.Advance(seconds(5));
  Beat({1});
  EXPECT_EQ(Count<Assignment>(Tick()), 0);
}

TEST_F(RunStateTest, JoinTimeoutClosesARoundBelowMin) {
  Join(1, 2, 2);
  for (int i = 0; i < 59; ++i) {
    clock_.Advance(seconds(1));
    Beat({1});
    ASSERT_EQ(Find<CloseNotice>(Tick(), 1), nullptr) << i;
  }
  clock_.Advance(seconds(1));
  Beat({1});
  Outbox out = Tick();
  const CloseNotice* close = Find<CloseNotice>(out, 1);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(close->status.message(), HasSubstr("only 1 of 2"));
  EXPECT_EQ(state_.Status("run")->phase, RunPhase::kClosed);
}

TEST_F(RunStateTest, BrokenStreamRestartsSurvivorsAndSpendsBudget) {
  Join(1, 2, 3);
  Join(2, 2, 3);
  Join(3, 2, 3);
  Outbox out = state_.StreamBroken(2, clock_.Now());
  ASSERT_NE(Find<RestartNotice>(out, 1), nullptr);
  ASSERT_NE(Find<RestartNotice>(out, 3), nullptr);
  EXPECT_EQ(Find<RestartNotice>(out, 2), nullptr);
  EXPECT_THAT(Find<RestartNotice>(out, 1)->reason, HasSubstr("node 2 (host-2) was lost"));
  EXPECT_EQ(Find<RestartNotice>(out, 1)->round, 1);
  EXPECT_EQ(state_.Status("run")->restarts_used, 1);
  // Two survivors, below max: the last call applies.
  clock_.Advance(seconds(2));
  Beat({1, 3});
  out = Tick();
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(Find<Assignment>(out, 1)->round, 2);
  EXPECT_EQ(Find<Assignment>(out, 1)->group_rank, 0);
  EXPECT_EQ(Find<Assignment>(out, 3)->group_rank, 1);
  EXPECT_EQ(Find<Assignment>(out, 3)->restart_count, 1);
  EXPECT_EQ(Find<Assignment>(out, 3)->world_size, 4);
}

// In-process recovery's setting (failure_last_call_timeout=0): the survivors of a lost node
// re-form at once instead of waiting the last call for it; the first round still waits, and the
// lost node coming back scales the run up again without spending the budget.
TEST_F(RunStateTest, ZeroFailureLastCallFormsTheSurvivorsRoundAtOnce) {
  for (ConnId c = 1; c <= 3; ++c) {
    JoinRequest r = MakeJoin("run", std::to_string(c), 2, 3);
    r.timeouts.failure_last_call_timeout = seconds(0);
    Join(c, r);
  }
  Outbox out = state_.StreamBroken(2, clock_.Now());
  ASSERT_NE(Find<RestartNotice>(out, 1), nullptr);
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(Find<Assignment>(out, 1)->round, 2);
  EXPECT_EQ(Find<Assignment>(out, 3)->world_size, 4);
  EXPECT_EQ(state_.Status("run")->restarts_used, 1);

  JoinRequest back = MakeJoin("run", "2b", 2, 3);
  back.timeouts.failure_last_call_timeout = seconds(0);
  out = Join(4, back);
  ASSERT_EQ(Count<Assignment>(out), 3);  // at max: at once, as always
  EXPECT_EQ(Find<Assignment>(out, 4)->round, 3);
  EXPECT_EQ(state_.Status("run")->restarts_used, 1);

  // A second loss after the scale-up is a failure again: no last call either.
  out = state_.StreamBroken(4, clock_.Now());
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(Find<Assignment>(out, 1)->round, 4);
}

TEST_F(RunStateTest, FailureLastCallDoesNotShortenTheFirstRound) {
  for (ConnId c = 1; c <= 2; ++c) {
    JoinRequest r = MakeJoin("run", std::to_string(c), 2, 3);
    r.timeouts.failure_last_call_timeout = seconds(0);
    EXPECT_EQ(Count<Assignment>(Join(c, r)), 0);
  }
  clock_.Advance(seconds(2));
  Beat({1, 2});
  EXPECT_EQ(Count<Assignment>(Tick()), 2);
}

TEST_F(RunStateTest, SilentNodeIsLostAfterItsLease) {
  Join(1, 2, 3);
  Join(2, 2, 3);
  Join(3, 2, 3);
  // Lease = 1 s * 3. Node 3 stays silent.
  clock_.Advance(milliseconds(2999));
  Beat({1, 2});
  EXPECT_EQ(Count<RestartNotice>(Tick()), 0);
  EXPECT_EQ(*state_.NextDeadline(), clock_.Now() + milliseconds(1));
  clock_.Advance(milliseconds(1));
  Outbox out = Tick();
  const CloseNotice* close = Find<CloseNotice>(out, 3);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(close->status.message(), HasSubstr("lease expired"));
  EXPECT_TRUE(close->given_up);
  EXPECT_NE(Find<RestartNotice>(out, 1), nullptr);
  EXPECT_NE(Find<RestartNotice>(out, 2), nullptr);
  EXPECT_EQ(state_.Status("run")->restarts_used, 1);
}

TEST_F(RunStateTest, ASilentNodeIsLostAtOnceWithNodeLostSilence) {
  Join(1, 2, 3);
  Join(2, 2, 3);
  Join(3, 2, 3);
  clock_.Advance(milliseconds(280));
  Outbox out = state_.Silent(3, milliseconds(280), clock_.Now());
  const CloseNotice* close = Find<CloseNotice>(out, 3);
  ASSERT_NE(close, nullptr);
  EXPECT_TRUE(close->given_up);
  EXPECT_THAT(close->status.message(), HasSubstr("silent for 0.28 s"));
  const RestartNotice* restart = Find<RestartNotice>(out, 1);
  ASSERT_NE(restart, nullptr);
  EXPECT_EQ(restart->cause, Cause::kNodeLostSilence);
  EXPECT_THAT(restart->reason, HasSubstr("was lost: silent for 0.28 s"));
  EXPECT_EQ(state_.Status("run")->restarts_used, 1);
  EXPECT_FALSE(state_.HasJoined(3));
  // Told once: the stream is forgotten, a late second report changes nothing.
  EXPECT_TRUE(state_.Silent(3, milliseconds(300), clock_.Now()).empty());
}

TEST_F(RunStateTest, WorkerFailureRestartsEveryNodeAndSpendsBudgetOnce) {
  Join(1, 2, 2);
  Join(2, 2, 2);
  Outbox out = Fail(2, 1);
  ASSERT_NE(Find<RestartNotice>(out, 1), nullptr);
  ASSERT_NE(Find<RestartNotice>(out, 2), nullptr);
  EXPECT_THAT(Find<RestartNotice>(out, 1)->reason,
              HasSubstr("worker failure on host-2: rank 3 (local_rank 1, pid 4242) exited with "
                        "code 7"));
  // At max again right away: the next round forms in the same step.
  ASSERT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(Find<Assignment>(out, 1)->round, 2);
  EXPECT_EQ(Find<Assignment>(out, 1)->restart_count, 1);
  EXPECT_EQ(state_.Status("run")->restarts_used, 1);
  // A second report of the same round (the other node saw its workers die too) is stale.
  absl::Status result;
  out = state_.GroupStatus(1, 1, GroupState::kFailed, std::nullopt, clock_.Now(), &result);
  EXPECT_EQ(result.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(state_.Status("run")->restarts_used, 1);
}

TEST_F(RunStateTest, SignalInFailureIsNamed) {
  Join(1, 1, 1);
  WorkerFailure f;
  f.hostname = "h";
  f.signal = 9;
  Outbox out = state_.GroupStatus(1, 1, GroupState::kFailed, f, clock_.Now());
  ASSERT_NE(Find<RestartNotice>(out, 1), nullptr);
  EXPECT_THAT(Find<RestartNotice>(out, 1)->reason, HasSubstr("killed by SIGKILL"));
}

TEST_F(RunStateTest, SpentBudgetClosesTheRunWithTheRootCause) {
  Join(1, 2, 2, /*max_restarts=*/1);
  Join(2, 2, 2, /*max_restarts=*/1);
  Fail(1, 1);
  Outbox out = Fail(2, 2);
  for (ConnId c : {1, 2}) {
    const CloseNotice* close = Find<CloseNotice>(out, c);
    ASSERT_NE(close, nullptr);
    EXPECT_EQ(close->status.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(close->status.message(), HasSubstr("restart budget spent"));
    EXPECT_THAT(close->status.message(), HasSubstr("worker failure on host-2"));
    ASSERT_TRUE(close->root_cause.has_value());
    EXPECT_EQ(close->root_cause->pid, 4242);
  }
  EXPECT_EQ(Count<RestartNotice>(out), 0);
  EXPECT_EQ(state_.Status("run")->restarts_used, 1);
  EXPECT_EQ(state_.num_conns(), 0u);
}

TEST_F(RunStateTest, LostNodeWithNoBudgetClosesTheRun) {
  Join(1, 1, 2, /*max_restarts=*/0);
  Join(2, 1, 2, /*max_restarts=*/0);
  Outbox out = state_.StreamBroken(1, clock_.Now());
  const CloseNotice* close = Find<CloseNotice>(out, 2);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(close->status.message(), HasSubstr("node 1 (host-1) was lost"));
}

TEST_F(RunStateTest, LateJoinBelowMaxScalesUpWithoutSpendingBudget) {
  Join(1, 1, 3);
  Join(2, 1, 3);
  clock_.Advance(seconds(2));
  ASSERT_EQ(Count<Assignment>(Tick()), 2);
  Outbox out = Join(3, 1, 3);
  EXPECT_NE(Find<JoinedNotice>(out, 3), nullptr);
  ASSERT_NE(Find<RestartNotice>(out, 1), nullptr);
  EXPECT_THAT(Find<RestartNotice>(out, 1)->reason, HasSubstr("node 3 (host-3) joined"));
  ASSERT_EQ(Count<Assignment>(out), 3);  // at max at once
  EXPECT_EQ(Find<Assignment>(out, 3)->round, 2);
  EXPECT_EQ(Find<Assignment>(out, 3)->group_rank, 2);
  EXPECT_EQ(Find<Assignment>(out, 3)->restart_count, 0);
  EXPECT_EQ(state_.Status("run")->restarts_used, 0);
}

TEST_F(RunStateTest, JoinAtMaxWaitsForALaterRound) {
  Join(1, 1, 2);
  Join(2, 1, 2);
  Outbox out = Join(3, 1, 2);
  EXPECT_NE(Find<JoinedNotice>(out, 3), nullptr);
  EXPECT_EQ(Count<RestartNotice>(out), 0);
  EXPECT_EQ(Count<Assignment>(out), 0);
  // A failure: the survivors keep their places, the waiting node still waits.
  out = Fail(1, 1);
  EXPECT_EQ(Count<Assignment>(out), 2);
  EXPECT_EQ(Find<Assignment>(out, 3), nullptr);
  // A member leaves cleanly: the waiting node gets in, no budget spent for that.
  out = state_.Leave(1, "done", clock_.Now());
  EXPECT_NE(Find<CloseNotice>(out, 1), nullptr);
  EXPECT_TRUE(Find<CloseNotice>(out, 1)->status.ok());
  ASSERT_NE(Find<RestartNotice>(out, 2), nullptr);
  EXPECT_THAT(Find<RestartNotice>(out, 2)->reason, HasSubstr("left: done"));
  ASSERT_EQ(Count<Assignment>(out), 2);
  // Node 2 keeps its rank; the waiting node takes the rank node 1 left.
  EXPECT_EQ(Find<Assignment>(out, 2)->group_rank, 1);
  EXPECT_EQ(Find<Assignment>(out, 3)->group_rank, 0);
  EXPECT_EQ(Find<Assignment>(out, 3)->restart_count, 1);
}

TEST_F(RunStateTest, SurvivorsKeepTheirRanksAndANewcomerFillsTheHole) {
  for (ConnId c = 1; c <= 4; ++c) Join(c, 2, 4);
  state_.StreamBroken(2, clock_.Now());
  // A newcomer arrives during the last call (the round is at max again at once); it takes the
  // lost node's rank, the survivors keep theirs.
  Outbox out = Join(5, 2, 4);
  ASSERT_EQ(Count<Assignment>(out), 4);
  EXPECT_EQ(Find<Assignment>(out, 1)->group_rank, 0);
  EXPECT_EQ(Find<Assignment>(out, 3)->group_rank, 2);
  EXPECT_EQ(Find<Assignment>(out, 4)->group_rank, 3);
  EXPECT_EQ(Find<Assignment>(out, 5)->group_rank, 1);
}

TEST_F(RunStateTest, ExplicitNodeRankIsHonoured) {
  JoinRequest a = MakeJoin("run", "a", 2, 2);
  a.node.requested_node_rank = 1;
  JoinRequest b = MakeJoin("run", "b", 2, 2);
  b.node.requested_node_rank = 0;
  b.node.master_port = 31000;
  Join(1, a);
  Outbox out = Join(2, b);
  EXPECT_EQ(Find<Assignment>(out, 1)->group_rank, 1);
  EXPECT_EQ(Find<Assignment>(out, 2)->group_rank, 0);
  EXPECT_EQ(Find<Assignment>(out, 1)->master_addr, "10.0.0.b");
  EXPECT_EQ(Find<Assignment>(out, 1)->master_port, 31000);
  EXPECT_EQ(Find<Assignment>(out, 1)->rank_offset, 2);
}

TEST_F(RunStateTest, DuplicateNodeRankIsRefused) {
  JoinRequest a = MakeJoin("run", "a", 2, 3);
  a.node.requested_node_rank = 1;
  JoinRequest b = MakeJoin("run", "b", 2, 3);
  b.node.requested_node_rank = 1;
  Join(1, a);
  Outbox out = Join(2, b);
  const CloseNotice* close = Find<CloseNotice>(out, 2);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(close->status.message(), HasSubstr("--node-rank=1 is already taken by node a"));
  EXPECT_EQ(state_.Status("run")->members.size(), 1u);
}

TEST_F(RunStateTest, NodeRankOutOfRangeIsRefused) {
  JoinRequest a = MakeJoin("run", "a", 2, 3);
  a.node.requested_node_rank = 3;
  Outbox out1 = Join(1, a);
  const CloseNotice* close = Find<CloseNotice>(out1, 1);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RunStateTest, DuplicateNodeIdIsRefused) {
  Join(1, MakeJoin("run", "a", 2, 3));
  Outbox out2 = Join(2, MakeJoin("run", "a", 2, 3));
  const CloseNotice* close = Find<CloseNotice>(out2, 2);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(RunStateTest, DisagreeingNodeCountsAreRefusedNamingBoth) {
  Join(1, 2, 3);
  Outbox out = Join(2, MakeJoin("run", "2", 1, 3));
  const CloseNotice* close = Find<CloseNotice>(out, 2);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(close->status.message(), HasSubstr("--nnodes=1:3"));
  EXPECT_THAT(close->status.message(), HasSubstr("--nnodes=2:3"));
  EXPECT_THAT(close->status.message(), HasSubstr("node 1 on host-1"));
}

TEST_F(RunStateTest, DisagreeingNprocIsRefusedNamingBoth) {
  Join(1, MakeJoin("run", "a", 2, 2, /*nproc=*/4));
  Outbox out3 = Join(2, MakeJoin("run", "b", 2, 2, 8));
  const CloseNotice* close = Find<CloseNotice>(out3, 2);
  ASSERT_NE(close, nullptr);
  EXPECT_THAT(close->status.message(), HasSubstr("--nproc-per-node=8"));
  EXPECT_THAT(close->status.message(), HasSubstr("--nproc-per-node=4"));
}

TEST_F(RunStateTest, DisagreeingMaxRestartsIsRefusedNamingBoth) {
  Join(1, MakeJoin("run", "a", 2, 2, 2, /*max_restarts=*/3));
  Outbox out4 = Join(2, MakeJoin("run", "b", 2, 2, 2, 5));
  const CloseNotice* close = Find<CloseNotice>(out4, 2);
  ASSERT_NE(close, nullptr);
  EXPECT_THAT(close->status.message(), HasSubstr("--max-restarts=5"));
  EXPECT_THAT(close->status.message(), HasSubstr("--max-restarts=3"));
}

TEST_F(RunStateTest, InvalidJoinIsRefused) {
  Outbox out5 = Join(1, MakeJoin("run", "a", 0, 2));
  const CloseNotice* close = Find<CloseNotice>(out5, 1);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kInvalidArgument);
  Outbox out6 = Join(2, MakeJoin("", "a", 1, 2));
  close = Find<CloseNotice>(out6, 2);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(state_.num_runs(), 0u);
}

TEST_F(RunStateTest, SuccessOfOneNodeDoesNotRestartTheOthers) {
  Join(1, 2, 2);
  Join(2, 2, 2);
  Outbox out = state_.GroupStatus(1, 1, GroupState::kSucceeded, std::nullopt, clock_.Now());
  ASSERT_NE(Find<CloseNotice>(out, 1), nullptr);
  EXPECT_TRUE(Find<CloseNotice>(out, 1)->status.ok());
  EXPECT_EQ(Count<RestartNotice>(out), 0);
  EXPECT_EQ(Find<CloseNotice>(out, 2), nullptr);
  // Its stream ending afterwards is no loss.
  EXPECT_TRUE(state_.StreamBroken(1, clock_.Now()).empty());
  out = state_.GroupStatus(2, 1, GroupState::kSucceeded, std::nullopt, clock_.Now());
  ASSERT_NE(Find<CloseNotice>(out, 2), nullptr);
  EXPECT_TRUE(Find<CloseNotice>(out, 2)->status.ok());
  EXPECT_EQ(state_.Status("run")->phase, RunPhase::kClosed);
  // A late agent of the finished run is told so.
  Outbox out7 = Join(3, 2, 2);
  const CloseNotice* late = Find<CloseNotice>(out7, 3);
  ASSERT_NE(late, nullptr);
  EXPECT_EQ(late->status.code(), absl::StatusCode::kFailedPrecondition);
}

// The soak's case: two members finish while the third's agent is frozen (SIGSTOP) past the lease.
// Restarting cannot bring the finished ones back: the run closes OK instead, and the frozen
// node, fenced and coming back (a join with its resume claim), is told the job succeeded.
TEST_F(RunStateTest, AMemberLostAfterOthersFinishedClosesTheRunOkWithoutARestart) {
  Join(1, 2, 3);
  Join(2, 2, 3);
  Join(3, 2, 3);
  ASSERT_EQ(state_.Status("run")->phase, RunPhase::kRunning);
  state_.GroupStatus(1, 1, GroupState::kSucceeded, std::nullopt, clock_.Now());
  state_.GroupStatus(2, 1, GroupState::kSucceeded, std::nullopt, clock_.Now());
  clock_.Advance(seconds(3));
  Outbox out = Tick();
  EXPECT_EQ(Count<RestartNotice>(out), 0);
  ASSERT_NE(Find<CloseNotice>(out, 3), nullptr);
  EXPECT_TRUE(Find<CloseNotice>(out, 3)->given_up);
  EXPECT_EQ(state_.Status("run")->phase, RunPhase::kClosed);
  EXPECT_EQ(state_.Status("run")->restarts_used, 0);

  JoinRequest back = MakeJoin("run", "3-rejoin1", 2, 3);
  back.resume = ResumeClaim{};
  back.resume->group = ResumeClaim::Group::kWaiting;
  out = Join(4, back);
  ASSERT_NE(Find<CloseNotice>(out, 4), nullptr);
  EXPECT_TRUE(Find<CloseNotice>(out, 4)->status.ok());
  // A stranger arriving late is still refused.
  out = Join(5, 2, 3);
  ASSERT_NE(Find<CloseNotice>(out, 5), nullptr);
  EXPECT_EQ(Find<CloseNotice>(out, 5)->status.code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(RunStateTest, AMemberLeavingOrBreakingAfterOthersFinishedRestartsNothing) {
  Join(1, 2, 3);
  Join(2, 2, 3);
  Join(3, 2, 3);
  state_.GroupStatus(1, 1, GroupState::kSucceeded, std::nullopt, clock_.Now());
  Outbox out = state_.StreamBroken(2, clock_.Now());
  EXPECT_EQ(Count<RestartNotice>(out), 0);
  EXPECT_EQ(state_.Status("run")->phase, RunPhase::kRunning);  // node 3 still finishing
  out = state_.GroupStatus(3, 1, GroupState::kSucceeded, std::nullopt, clock_.Now());
  EXPECT_TRUE(Find<CloseNotice>(out, 3)->status.ok());
  EXPECT_EQ(state_.Status("run")->phase, RunPhase::kClosed);
}

TEST_F(RunStateTest, SuccessOfTheRoundClosesWaitingNodesOk) {
  Join(1, 1, 1);
  Join(2, 1, 1);  // waits: the round is at max
  Outbox out = state_.GroupStatus(1, 1, GroupState::kSucceeded, std::nullopt, clock_.Now());
  ASSERT_NE(Find<CloseNotice>(out, 2), nullptr);
  EXPECT_TRUE(Find<CloseNotice>(out, 2)->status.ok());
}

TEST_F(RunStateTest, ClosedRunIsForgottenAfterRetention) {
  Join(1, 1, 1);
  state_.GroupStatus(1, 1, GroupState::kSucceeded, std::nullopt, clock_.Now());
  EXPECT_EQ(state_.num_runs(), 1u);
  clock_.Advance(seconds(300));
  Tick();
  EXPECT_EQ(state_.num_runs(), 0u);
}

TEST_F(RunStateTest, RunWithEveryAgentGoneIsForgotten) {
  Join(1, 2, 2);
  state_.StreamBroken(1, clock_.Now());
  EXPECT_EQ(state_.num_runs(), 0u);
}

TEST_F(RunStateTest, CleanLeaveOfAMemberRestartsWithoutBudget) {
  Join(1, 1, 2);
  Join(2, 1, 2);
  Outbox out = state_.Leave(2, "SIGTERM", clock_.Now());
  ASSERT_NE(Find<RestartNotice>(out, 1), nullptr);
  clock_.Advance(seconds(2));
  Beat({1});
  out = Tick();
  ASSERT_NE(Find<Assignment>(out, 1), nullptr);
  EXPECT_EQ(Find<Assignment>(out, 1)->restart_count, 0);
  EXPECT_EQ(Find<Assignment>(out, 1)->world_size, 2);
}

TEST_F(RunStateTest, LocalAddrOverridesPeerAddress) {
  JoinRequest a = MakeJoin("run", "a", 1, 1);
  a.node.local_addr = "node-a.example";
  Outbox out8 = Join(1, a);
  EXPECT_EQ(Find<Assignment>(out8, 1)->master_addr, "node-a.example");
}

TEST_F(RunStateTest, LoopbackMasterWithRemotePeersUsesItsHostname) {
  JoinRequest a = MakeJoin("run", "a", 2, 2);
  a.peer_host = "127.0.1.1";  // the hosting agent reached its own server via /etc/hosts
  JoinRequest b = MakeJoin("run", "b", 2, 2);
  Join(1, a);
  Outbox out = Join(2, b);
  EXPECT_EQ(Find<Assignment>(out, 2)->master_addr, "host-a");
}

TEST_F(RunStateTest, AllLoopbackKeepsTheLoopbackMasterAddr) {
  JoinRequest a = MakeJoin("run", "a", 2, 2);
  a.peer_host = "127.0.0.1";
  JoinRequest b = MakeJoin("run", "b", 2, 2);
  b.peer_host = "127.0.0.1";
  Join(1, a);
  Outbox out = Join(2, b);
  EXPECT_EQ(Find<Assignment>(out, 2)->master_addr, "127.0.0.1");
}

TEST_F(RunStateTest, Ipv6PeerAddressIsTheMasterAddr) {
  JoinRequest a = MakeJoin("run", "a", 1, 1);
  a.peer_host = "::1";
  Outbox out9 = Join(1, a);
  EXPECT_EQ(Find<Assignment>(out9, 1)->master_addr, "::1");
}

TEST_F(RunStateTest, RunsAreIndependent) {
  Join(1, MakeJoin("x", "1", 2, 2));
  Join(2, MakeJoin("y", "1", 2, 2));  // same node id, other run: fine
  Outbox out = Join(3, MakeJoin("x", "3", 2, 2));
  EXPECT_NE(Find<Assignment>(out, 1), nullptr);
  EXPECT_EQ(Find<Assignment>(out, 2), nullptr);
  out = state_.StreamBroken(1, clock_.Now());
  EXPECT_EQ(Find<RestartNotice>(out, 2), nullptr);
  EXPECT_EQ(state_.Status("y")->phase, RunPhase::kJoining);
}

TEST(ServerStateLimitsTest, RunsPerServerAndNodesPerRun) {
  ServerLimits limits;
  limits.max_runs = 1;
  limits.max_nodes_per_run = 2;
  ServerState state(limits);
  FakeClock clock;
  state.Join(1, MakeJoin("x", "1", 1, 2), clock.Now());
  Outbox out10 = state.Join(2, MakeJoin("y", "1", 1, 2), clock.Now());
  const CloseNotice* close = Find<CloseNotice>(out10, 2);
  ASSERT_NE(close, nullptr);
  EXPECT_THAT(close->status.message(), HasSubstr("limit of 1 runs"));
  state.Join(3, MakeJoin("x", "3", 1, 2), clock.Now());
  Outbox out11 = state.Join(4, MakeJoin("x", "4", 1, 2), clock.Now());
  close = Find<CloseNotice>(out11, 4);
  ASSERT_NE(close, nullptr);
  EXPECT_THAT(close->status.message(), HasSubstr("limit of 2 nodes"));
  Outbox out12 = state.Join(5, MakeJoin("x", "5", 1, 3), clock.Now());
  close = Find<CloseNotice>(out12, 5);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kInvalidArgument);
}

// issue 28, point 9: a run id with a newline would forge the server's log lines (and a run id
// names files): refused at the join, the message shows it escaped.
TEST(ServerStateLimitsTest, IdsWithControlCharactersAreRefused) {
  ServerState state{ServerLimits{}};
  FakeClock clock;
  Outbox out = state.Join(1, MakeJoin("x\n[ddprun-rdzv] forged line", "1", 1, 1), clock.Now());
  const CloseNotice* close = Find<CloseNotice>(out, 1);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(close->status.message(), HasSubstr("x\\n[ddprun-rdzv] forged line"));
  EXPECT_THAT(close->status.message(), Not(HasSubstr("\n")));
  out = state.Join(2, MakeJoin("x", "node\x1b[2J", 1, 1), clock.Now());
  ASSERT_NE(Find<CloseNotice>(out, 2), nullptr);
  EXPECT_FALSE(state.Status("x").ok() && state.Status("x")->num_nodes > 0);
}

TEST_F(RunStateTest, MessagesBeforeJoinCloseTheStream) {
  Outbox out13 = state_.Heartbeat(9, {}, clock_.Now());
  const CloseNotice* close = Find<CloseNotice>(out13, 9);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(state_.StreamBroken(9, clock_.Now()).empty());
}

TEST_F(RunStateTest, StatusListsMembersByRankThenWaiting) {
  Join(1, 1, 2);
  Join(2, 1, 2);
  Join(3, 1, 2);
  absl::StatusOr<RunStatus> s = state_.Status("run");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->round, 1);
  EXPECT_EQ(s->phase, RunPhase::kRunning);
  ASSERT_EQ(s->members.size(), 3u);
  EXPECT_EQ(s->members[0].node_id, "1");
  EXPECT_EQ(s->members[0].group_rank, 0);
  EXPECT_EQ(s->members[0].addr, "10.0.0.1");
  EXPECT_EQ(s->members[2].node_id, "3");
  EXPECT_EQ(s->members[2].state, "spare");  // beyond max while the round runs
  EXPECT_EQ(state_.Status("nope").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ddprun::rendezvous
