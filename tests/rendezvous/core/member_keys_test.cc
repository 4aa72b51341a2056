// Member keys and the server's run limits (issue 28, points 2 and 6), driven through ServerState
// with a FakeClock and a fake MemberKeys: a token holder cannot take over another run's member,
// finished runs hold no slot, and one client cannot take every slot.
#include "rendezvous/core/member_keys.h"

#include <chrono>
#include <memory>
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
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// Keys anyone can compute, which is all a state machine test needs: what matters is that the
// state compares them.
class FakeKeys final : public MemberKeys {
 public:
  explicit FakeKeys(bool durable) : durable_(durable) {}
  std::string KeyFor(const std::string& run_id, const std::string& node_id) const override {
    return "key:" + run_id + "/" + node_id;
  }
  bool durable() const override { return durable_; }

 private:
  bool durable_;
};

// Node `node` of the 2:2 run "run" re-registering as a member of `round` with group rank `rank`.
JoinRequest Claim(const std::string& node, int64_t round, int rank, const std::string& key) {
  JoinRequest r = MakeJoin("run", node, 2, 2);
  ResumeClaim c;
  c.last.round = round;
  c.last.group_rank = rank;
  c.last.group_world_size = 2;
  c.last.world_size = 4;
  c.last.rank_offset = 2 * rank;
  c.last.master_addr = "10.0.0.a";
  c.last.master_port = 29500;
  c.group = ResumeClaim::Group::kRunning;
  r.resume = c;
  r.member_key = key;
  r.peer_host = "10.9.9.9";
  return r;
}

class MemberKeysTest : public ::testing::Test {
 protected:
  explicit MemberKeysTest(bool durable = false)
      : state_(ServerLimits{}, std::make_shared<FakeKeys>(durable)) {}
  Outbox Join(ConnId conn, const JoinRequest& r) { return state_.Join(conn, r, clock_.Now()); }
  // Nodes "a" and "b" form round 1 of "run".
  void FormRound() {
    Join(1, MakeJoin("run", "a", 2, 2));
    Outbox out = Join(2, MakeJoin("run", "b", 2, 2));
    ASSERT_NE(Find<Assignment>(out, 1), nullptr);
  }

  FakeClock clock_;
  ServerState state_;
};

TEST_F(MemberKeysTest, JoinedCarriesTheNodesKey) {
  Outbox out = Join(1, MakeJoin("run", "a", 2, 2));
  const JoinedNotice* joined = Find<JoinedNotice>(out, 1);
  ASSERT_NE(joined, nullptr);
  EXPECT_EQ(joined->member_key, "key:run/a");
}

TEST_F(MemberKeysTest, TakeOverWithoutTheKeyIsRefusedAndTheRunGoesOn) {
  FormRound();
  // Another token holder knows node a's id (Status lists it) and claims its place.
  Outbox out = Join(9, Claim("a", 1, 0, /*key=*/""));
  const CloseNotice* close = Find<CloseNotice>(out, 9);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(close->status.message(), HasSubstr("run 'run'"));
  EXPECT_THAT(close->status.message(), HasSubstr("node 'a'"));
  EXPECT_EQ(Count<ResumedNotice>(out), 0);
  EXPECT_EQ(Find<JoinedNotice>(out, 9), nullptr);
  std::vector<std::string> log = state_.TakeSecurityLog();
  ASSERT_THAT(log, SizeIs(1));
  EXPECT_THAT(log[0], HasSubstr("node 'a' from 10.9.9.9"));
  EXPECT_EQ(state_.metrics().refused["member_key"], 1u);
  // Its stream belongs to no run: a failure report there acts on nothing.
  out = state_.GroupStatus(9, 1, GroupState::kFailed, WorkerFailure{}, clock_.Now());
  EXPECT_EQ(Count<RestartNotice>(out), 0);
  RunStatus s = *state_.Status("run");
  EXPECT_EQ(s.phase, RunPhase::kRunning);
  EXPECT_EQ(s.round, 1);
  EXPECT_EQ(s.restarts_used, 0);
  // A wrong key is refused the same way.
  out = Join(10, Claim("a", 1, 0, "key:run/b"));
  EXPECT_EQ(Find<CloseNotice>(out, 10)->status.code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(MemberKeysTest, TheMemberWithItsKeyResumes) {
  FormRound();
  Outbox out = Join(11, Claim("a", 1, 0, "key:run/a"));
  EXPECT_NE(Find<ResumedNotice>(out, 11), nullptr);
  EXPECT_EQ(Find<JoinedNotice>(out, 11)->member_key, "key:run/a");
  EXPECT_THAT(state_.TakeSecurityLog(), IsEmpty());
}

TEST_F(MemberKeysTest, AKeyOfAnotherRunProvesNothingHere) {
  FormRound();
  // A member of run "mine" (workers of that job hold its agent's key at most) claims node a of
  // "run" with the key it was given.
  JoinRequest mine = MakeJoin("mine", "a", 1, 1);
  Outbox out = Join(20, mine);
  const std::string key = Find<JoinedNotice>(out, 20)->member_key;
  out = Join(21, Claim("a", 1, 0, key));
  EXPECT_EQ(Find<CloseNotice>(out, 21)->status.code(), absl::StatusCode::kPermissionDenied);
  // And a second join on a stream of "mine" cannot move it to "run".
  out = Join(20, Claim("a", 1, 0, "key:run/a"));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(state_.RunIdOf(20), "mine");
  EXPECT_EQ(state_.Status("run")->restarts_used, 0);
}

TEST_F(MemberKeysTest, EphemeralKeysAcceptUnverifiableClaimsForALostRunAndSaySo) {
  // A new server process without a secret file: the agents' keys came from the old one.
  Outbox out = Join(1, Claim("a", 4, 0, "key-of-the-old-process"));
  EXPECT_EQ(state_.Status("run")->phase, RunPhase::kRecovering);
  out = Join(2, Claim("b", 4, 1, "key-of-the-old-process"));
  EXPECT_EQ(Count<ResumedNotice>(out), 2);  // recovered as without keys
  // Each gets this process's key for its next re-registration.
  EXPECT_EQ(Find<JoinedNotice>(out, 2)->member_key, "key:run/b");
  std::vector<std::string> log = state_.TakeSecurityLog();
  ASSERT_THAT(log, SizeIs(1));  // once per run, not once per agent
  EXPECT_THAT(log[0], HasSubstr("unverified"));
  // From now on the run is known: the old key no longer passes for a member.
  out = Join(3, Claim("a", 4, 0, "key-of-the-old-process"));
  EXPECT_EQ(Find<CloseNotice>(out, 3)->status.code(), absl::StatusCode::kPermissionDenied);
}

class DurableMemberKeysTest : public MemberKeysTest {
 protected:
  DurableMemberKeysTest() : MemberKeysTest(/*durable=*/true) {}
};

TEST_F(DurableMemberKeysTest, ClaimsForALostRunAreVerified) {
  // A restarted server with its secret file: an intruder's claim cannot shape the run.
  Outbox out = Join(9, Claim("a", 4, 0, "forged"));
  ASSERT_NE(Find<JoinedNotice>(out, 9), nullptr);  // only as a newcomer
  EXPECT_EQ(state_.Status("run")->phase, RunPhase::kJoining);
  EXPECT_THAT(state_.TakeSecurityLog(), SizeIs(1));
  out = Join(8, Claim("b", 4, 1, "forged"));
  // Two newcomers form a fresh round 1: nobody claimed round 4 with a valid key.
  ASSERT_NE(Find<Assignment>(out, 8), nullptr);
  EXPECT_EQ(Find<Assignment>(out, 8)->round, 1);
  EXPECT_EQ(state_.Status("run")->restarts_used, 0);
}

TEST_F(DurableMemberKeysTest, TheRealMembersRecoverTheirRound) {
  Join(1, Claim("a", 4, 0, "key:run/a"));
  EXPECT_EQ(state_.Status("run")->phase, RunPhase::kRecovering);
  Outbox out = Join(2, Claim("b", 4, 1, "key:run/b"));
  EXPECT_EQ(Count<ResumedNotice>(out), 2);
  EXPECT_THAT(state_.TakeSecurityLog(), IsEmpty());
}

TEST_F(DurableMemberKeysTest, AFencedNodeRejoiningUnderANewIdIsANewcomer) {
  FormRound();
  // Rule 2: a node the run does not know with a claim (a fenced node's rejoin, no valid key):
  // it only stops its own workers, nothing to verify.
  JoinRequest rejoin = Claim("a-rejoin1", 1, 0, "key:run/a");
  rejoin.resume->group = ResumeClaim::Group::kWaiting;
  Outbox out = Join(5, rejoin);
  EXPECT_NE(Find<JoinedNotice>(out, 5), nullptr);
  EXPECT_EQ(Find<CloseNotice>(out, 5), nullptr);
}

// Point 6: the limits count open runs, per server and per client.

// Run `run` of one node from `peer`, formed and finished (closed OK).
void RunAJob(ServerState* state, ConnId conn, const std::string& run, const std::string& peer,
             TimePoint now) {
  JoinRequest r = MakeJoin(run, "n", 1, 1);
  r.peer_host = peer;
  Outbox out = state->Join(conn, r, now);
  ASSERT_NE(Find<Assignment>(out, conn), nullptr) << run;
  out = state->GroupStatus(conn, 1, GroupState::kSucceeded, std::nullopt, now);
  ASSERT_NE(Find<CloseNotice>(out, conn), nullptr);
  ASSERT_EQ(state->Status(run)->phase, RunPhase::kClosed);
}

TEST(ServerRunLimitsTest, FinishedRunsHoldNoSlot) {
  ServerLimits limits;
  limits.max_runs = 3;
  ServerState state(limits);
  FakeClock clock;
  for (int job = 0; job < 5; ++job) {
    RunAJob(&state, 100 + job, "job" + std::to_string(job), "10.0.0.1", clock.Now());
  }
  // Still reported (late agents and the status page learn how they ended).
  EXPECT_EQ(state.Status("job0")->phase, RunPhase::kClosed);
  EXPECT_EQ(state.num_runs(), 5u);
  // Open runs still count.
  for (int i = 0; i < 3; ++i) {
    state.Join(200 + i, MakeJoin("open" + std::to_string(i), "n", 2, 2), clock.Now());
  }
  Outbox out = state.Join(300, MakeJoin("one-too-many", "n", 2, 2), clock.Now());
  ASSERT_NE(Find<CloseNotice>(out, 300), nullptr);
  EXPECT_THAT(Find<CloseNotice>(out, 300)->status.message(), HasSubstr("limit of 3 runs"));
}

TEST(ServerRunLimitsTest, OneClientCannotTakeEverySlot) {
  ServerLimits limits;
  limits.max_runs = 10;
  limits.max_runs_per_client = 2;
  ServerState state(limits);
  FakeClock clock;
  auto join = [&](ConnId conn, const std::string& run, const std::string& peer) {
    JoinRequest r = MakeJoin(run, "n", 2, 2);
    r.peer_host = peer;
    return state.Join(conn, r, clock.Now());
  };
  join(1, "a1", "10.0.0.7");
  join(2, "a2", "10.0.0.7");
  Outbox out = join(3, "a3", "10.0.0.7");
  const CloseNotice* close = Find<CloseNotice>(out, 3);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(close->status.message(), HasSubstr("limit of 2 open runs per client (10.0.0.7"));
  // Others are not held back, and joining an existing run is not starting one.
  EXPECT_EQ(Find<CloseNotice>(join(4, "b1", "10.0.0.8"), 4), nullptr);
  JoinRequest second = MakeJoin("a1", "m", 2, 2);
  second.peer_host = "10.0.0.7";
  EXPECT_NE(Find<Assignment>(state.Join(5, second, clock.Now()), 5), nullptr);
  // A finished run frees the client's slot.
  state.GroupStatus(1, 1, GroupState::kSucceeded, std::nullopt, clock.Now());
  state.GroupStatus(5, 1, GroupState::kSucceeded, std::nullopt, clock.Now());
  ASSERT_EQ(state.Status("a1")->phase, RunPhase::kClosed);
  EXPECT_EQ(Find<CloseNotice>(join(6, "a3", "10.0.0.7"), 6), nullptr);
}

TEST(ServerRunLimitsTest, ClosedRunsRememberedAreBounded) {
  ServerLimits limits;
  limits.max_closed_runs = 3;
  ServerState state(limits);
  FakeClock clock;
  for (int job = 0; job < 5; ++job) {
    RunAJob(&state, 100 + job, "job" + std::to_string(job), "10.0.0.1", clock.Now());
    clock.Advance(std::chrono::seconds(1));
  }
  EXPECT_EQ(state.num_runs(), 3u);
  EXPECT_EQ(state.Status("job0").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(state.Status("job4")->phase, RunPhase::kClosed);
}

// Issue 43 S2: with an embedded server's majority rule, nodes 1..3 form round 1 and 2 and 3
// fall silent (their leases run out): node 1 alone is no majority. A newcomer claiming to be
// node 2 under a new id counts as node 2 only with node 2's key.
class FormerIdTest : public ::testing::Test {
 protected:
  FormerIdTest()
      : state_(ServerLimits{}, std::make_shared<FakeKeys>(/*durable=*/false),
               RoundQuorum::kMajorityOfLastRound) {}
  void FormRoundAndSilenceTwoAndThree() {
    for (ConnId c : {1, 2, 3}) {
      state_.Join(c, MakeJoin("run", std::to_string(c), 2, 3), clock_.Now());
    }
    ASSERT_EQ(state_.Status("run")->round, 1);
    for (int i = 0; i < 8; ++i) {
      clock_.Advance(std::chrono::milliseconds(500));
      state_.Heartbeat(1, {}, clock_.Now());
      state_.Tick(clock_.Now());
    }
    ASSERT_EQ(state_.Status("run")->phase, RunPhase::kJoining);
  }
  // Joins conn 9 as "9-rejoin1", formerly node 2, presenting `key`; returns what the next
  // seconds brought to it (its Joined, and an assignment if a round formed).
  Outbox RejoinAsFormerlyTwo(const std::string& key) {
    JoinRequest r = MakeJoin("run", "9-rejoin1", 2, 3);
    r.node.formerly_node_id = "2";
    r.formerly_member_key = key;
    Outbox all = state_.Join(9, r, clock_.Now());
    for (int i = 0; i < 6; ++i) {  // past the last call of 2 s
      clock_.Advance(std::chrono::milliseconds(500));
      state_.Heartbeat(1, {}, clock_.Now());
      state_.Heartbeat(9, {}, clock_.Now());
      Outbox out = state_.Tick(clock_.Now());
      all.insert(all.end(), out.begin(), out.end());
    }
    return all;
  }

  FakeClock clock_;
  ServerState state_;
};

TEST_F(FormerIdTest, AClaimWithoutTheFormerNodesKeyIsNotCounted) {
  FormRoundAndSilenceTwoAndThree();
  Outbox out = RejoinAsFormerlyTwo("key:run/3");  // a key, but another node's
  const JoinedNotice* joined = Find<JoinedNotice>(out, 9);
  ASSERT_NE(joined, nullptr);  // it may join, as a new node
  EXPECT_EQ(joined->succeeds_node_id, "");
  EXPECT_EQ(Count<Assignment>(out), 0) << "no majority: node 2 is not back";
  std::vector<std::string> log = state_.TakeSecurityLog();
  ASSERT_THAT(log, SizeIs(1));
  EXPECT_THAT(log[0], HasSubstr("ignored a claim to be formerly node '2'"));
}

TEST_F(FormerIdTest, AClaimWithTheFormerNodesKeyIsCounted) {
  FormRoundAndSilenceTwoAndThree();
  Outbox out = RejoinAsFormerlyTwo("key:run/2");
  const JoinedNotice* joined = Find<JoinedNotice>(out, 9);
  ASSERT_NE(joined, nullptr);
  EXPECT_EQ(joined->succeeds_node_id, "2");
  const Assignment* a = Find<Assignment>(out, 9);
  ASSERT_NE(a, nullptr) << "2 of 3 are back";
  EXPECT_EQ(a->round, 2);
  EXPECT_THAT(state_.TakeSecurityLog(), IsEmpty());
}

// Issue 43 S4: the same run id under two token scopes is two runs; neither reaches the other.
TEST_F(MemberKeysTest, RunsOfDifferentScopesAreDifferentRuns) {
  JoinRequest squatter = MakeJoin("4242.0", "squatter", 1, 1);
  squatter.token_scope = "mallory";
  Outbox out = Join(1, squatter);
  ASSERT_NE(Find<Assignment>(out, 1), nullptr);
  for (ConnId c : {2, 3}) {
    JoinRequest real = MakeJoin("4242.0", "real-" + std::to_string(c), 2, 2);
    real.token_scope = "alice";
    out = Join(c, real);
    EXPECT_EQ(Find<CloseNotice>(out, c), nullptr) << "not refused for the squatter's --nnodes";
  }
  const Assignment* a = Find<Assignment>(out, 3);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->group_world_size, 2);
  EXPECT_EQ(state_.Status("alice/4242.0")->num_nodes, 2);
  EXPECT_EQ(state_.Status("mallory/4242.0")->num_nodes, 1);
  EXPECT_FALSE(state_.Status("4242.0").ok());
  // A key is the namespaced run's: the squatter's key opens nothing of alice's.
  EXPECT_EQ(Find<JoinedNotice>(Join(4, MakeJoin("x", "n", 2, 2)), 4)->member_key, "key:x/n");
  // A run id with '/' (which could name another scope's run) is refused.
  out = Join(5, MakeJoin("alice/4242.0", "sneak", 2, 2));
  ASSERT_NE(Find<CloseNotice>(out, 5), nullptr);
  EXPECT_EQ(Find<CloseNotice>(out, 5)->status.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ddprun::rendezvous
