// The crash-loop breaker (rendezvous/api/crash_loop.h) on its own, and in RunState: the run
// closes job-wide (kAborted, the agents' exit code 4) at the second identical failure without
// progress, and goes on as before when progress was made in between.
#include "rendezvous/api/crash_loop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/rendezvous/core/state_fixture.h"
#include "tests/rendezvous/core/state_test_util.h"

namespace ddprun::rendezvous {
namespace {

using ::ddprun::rendezvous::testing::Count;
using ::ddprun::rendezvous::testing::Find;
using ::ddprun::rendezvous::testing::MakeJoin;
using ::testing::HasSubstr;

WorkerFailure Failure(const std::string& signature, bool progress) {
  WorkerFailure f;
  f.exit_code = 1;
  f.message = "ModuleNotFoundError: No module named 'x'";
  f.signature = signature;
  f.made_progress = progress;
  return f;
}

TEST(CrashLoopBreakerTest, TheSecondIdenticalFailureWithoutProgressRepeats) {
  CrashLoopBreaker b;
  EXPECT_FALSE(b.Repeats(Failure("exit code 1: A", false)));
  EXPECT_TRUE(b.Repeats(Failure("exit code 1: A", false)));
}

TEST(CrashLoopBreakerTest, ProgressOrADifferentFailureStartsAgain) {
  CrashLoopBreaker b;
  EXPECT_FALSE(b.Repeats(Failure("exit code 1: A", false)));
  EXPECT_FALSE(b.Repeats(Failure("exit code 1: B", false)));  // different: counts anew
  EXPECT_FALSE(b.Repeats(Failure("exit code 1: B", true)));   // progress in this attempt
  EXPECT_FALSE(b.Repeats(Failure("exit code 1: B", false)));
  EXPECT_TRUE(b.Repeats(Failure("exit code 1: B", false)));
}

TEST(CrashLoopBreakerTest, AnEmptySignatureIsTheBreakerTurnedOff) {
  CrashLoopBreaker b;
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(b.Repeats(Failure("", false)));
}

class CrashLoopRunTest : public ::ddprun::rendezvous::testing::ServerStateTest {};

TEST_F(CrashLoopRunTest, TheRunClosesForEveryNodeAtTheSecondIdenticalFailure) {
  Join(1, MakeJoin("run", "1", 2, 2, 2, /*max_restarts=*/10));
  Join(2, MakeJoin("run", "2", 2, 2, 2, 10));
  ASSERT_EQ(Status().round, 1);
  Outbox out =
      state_.GroupStatus(2, 1, GroupState::kFailed, Failure("exit code 1: A", false), clock_.Now());
  EXPECT_EQ(Count<RestartNotice>(out), 2);  // the first one restarts, as always
  ASSERT_EQ(Status().round, 2);
  out =
      state_.GroupStatus(2, 2, GroupState::kFailed, Failure("exit code 1: A", false), clock_.Now());
  ASSERT_EQ(Count<CloseNotice>(out), 2);
  const CloseNotice* close = Find<CloseNotice>(out, 1);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(close->status.message(),
              HasSubstr("the same failure twice before any progress: not restarting (worker "
                        "failure on host-2"));
  EXPECT_EQ(Status().phase, RunPhase::kClosed);
  EXPECT_EQ(Status().restarts_used, 1);  // the budget was not spent on it
}

TEST_F(CrashLoopRunTest, AFailureAfterProgressRestartsAsBefore) {
  Join(1, MakeJoin("run", "1", 1, 1, 2, 10));
  for (int64_t round = 1; round <= 4; ++round) {
    Outbox out = state_.GroupStatus(1, round, GroupState::kFailed,
                                    Failure("exit code 1: A", /*progress=*/true), clock_.Now());
    EXPECT_EQ(Count<CloseNotice>(out), 0);
  }
  EXPECT_EQ(Status().restarts_used, 4);
}

// The etcd backend's coordinator can change between the two failures: the breaker's state goes
// with the run's snapshot, and the new coordinator's RunState still stops the second one.
TEST(CrashLoopSnapshotTest, ANewCoordinatorStillStopsTheSecondIdenticalFailure) {
  FakeClock clock;
  const JoinRequest join = MakeJoin("run", "1", 1, 1, 2, /*max_restarts=*/10);
  RunState before(join, clock.Now());
  Outbox out;
  before.Join(1, join, clock.Now(), &out);
  ASSERT_TRUE(before
                  .GroupStatus(1, 1, GroupState::kFailed, Failure("exit code 1: A", false),
                               clock.Now(), &out)
                  .ok());
  const RunSnapshot snapshot = before.Snapshot();
  EXPECT_EQ(snapshot.crash_loop_signature, "exit code 1: A");
  ASSERT_EQ(snapshot.round, 2);

  RunState after(join, clock.Now());
  Outbox rejoined;
  after.Join(7, join, clock.Now(), &rejoined);
  after.Restore(snapshot, clock.Now(), &rejoined);
  Outbox second;
  ASSERT_TRUE(after
                  .GroupStatus(7, 2, GroupState::kFailed, Failure("exit code 1: A", false),
                               clock.Now(), &second)
                  .ok());
  const CloseNotice* close = Find<CloseNotice>(second, 7);
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->status.code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace ddprun::rendezvous
