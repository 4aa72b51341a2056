// The agent state machine's --health-check gate (agent_state.h): a node starts out of the run,
// joins once a check passes, and every cold start waits for a check of its own; a failing one
// steps the node out until a later check passes. Pure: verdicts are fed in by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "launcher/agent/state/agent_state.h"

namespace ddprun::launcher {
namespace {

using Phase = AgentStateMachine::Phase;
using Type = AgentAction::Type;
using ::testing::ElementsAre;

std::vector<Type> Types(const std::vector<AgentAction>& actions) {
  std::vector<Type> out;
  for (const AgentAction& a : actions) out.push_back(a.type);
  return out;
}

rendezvous::Assignment Round(int64_t round) {
  rendezvous::Assignment a;
  a.round = round;
  return a;
}

WorkerExit StoppedByUs(int local_rank) {
  WorkerExit e;
  e.local_rank = local_rank;
  e.signal = SIGTERM;
  return e;
}

// A gated machine whose first check passed and whose workers of round 1 run.
AgentStateMachine Running() {
  AgentStateMachine sm(1, RestartMode::kCold, HealthGate::kBeforeEachRound);
  sm.OnHealthChecked(true, "");
  sm.OnAssignment(Round(1));
  return sm;
}

// Running(), then a restart: the workers stopped and round 2's assignment waits for its check.
AgentStateMachine CheckingRound2() {
  AgentStateMachine sm = Running();
  sm.OnRestart("node n2 failed", std::nullopt);
  sm.OnWorkerExited(StoppedByUs(0));
  EXPECT_THAT(Types(sm.OnAssignment(Round(2))), ElementsAre(Type::kCheckHealth));
  EXPECT_EQ(sm.phase(), Phase::kCheckingHealth);
  return sm;
}

TEST(HealthGateTest, ANodeStartsOutOfTheRunAndJoinsOnceACheckPasses) {
  AgentStateMachine sm(1, RestartMode::kCold, HealthGate::kBeforeEachRound);
  EXPECT_EQ(sm.phase(), Phase::kSittingOut);
  EXPECT_TRUE(sm.OnHealthChecked(false, "exit code 1").empty());  // not joined: nothing to leave
  EXPECT_EQ(sm.phase(), Phase::kSittingOut);
  EXPECT_THAT(Types(sm.OnHealthChecked(true, "")), ElementsAre(Type::kStepIn));
  // The check that let it join covers its first round.
  const std::vector<AgentAction> start = sm.OnAssignment(Round(1));
  ASSERT_THAT(Types(start), ElementsAre(Type::kStartWorkers));
  EXPECT_EQ(start[0].assignment.round, 1);
  EXPECT_EQ(sm.phase(), Phase::kRunning);
}

TEST(HealthGateTest, EveryColdRestartWaitsForACheckOfItsOwn) {
  AgentStateMachine sm = Running();
  EXPECT_THAT(Types(sm.OnRestart("node n2 failed", std::nullopt)), ElementsAre(Type::kStopWorkers));
  EXPECT_TRUE(sm.OnAssignment(Round(2)).empty());  // waits for the stop
  EXPECT_THAT(Types(sm.OnWorkerExited(StoppedByUs(0))), ElementsAre(Type::kCheckHealth));
  EXPECT_EQ(sm.phase(), Phase::kCheckingHealth);
  const std::vector<AgentAction> start = sm.OnHealthChecked(true, "");
  ASSERT_THAT(Types(start), ElementsAre(Type::kStartWorkers));
  EXPECT_EQ(start[0].assignment.round, 2);
}

TEST(HealthGateTest, AFailedCheckStepsOutAndAPassingOneStepsBackIn) {
  AgentStateMachine sm = CheckingRound2();
  EXPECT_TRUE(sm.OnAssignment(Round(3)).empty());  // the newest round waits for the same check
  const std::vector<AgentAction> out = sm.OnHealthChecked(false, "health check failed: ECC");
  ASSERT_THAT(Types(out), ElementsAre(Type::kStepOut));
  EXPECT_EQ(out[0].message, "health check failed: ECC");
  EXPECT_EQ(sm.phase(), Phase::kSittingOut);
  // An assignment sent before the step-out reached the server is not this node's to run.
  EXPECT_TRUE(sm.OnAssignment(Round(4)).empty());
  EXPECT_TRUE(sm.OnHealthChecked(false, "still ECC").empty());
  EXPECT_THAT(Types(sm.OnHealthChecked(true, "")), ElementsAre(Type::kStepIn));
  const std::vector<AgentAction> start = sm.OnAssignment(Round(5));
  ASSERT_THAT(Types(start), ElementsAre(Type::kStartWorkers));
  EXPECT_EQ(start[0].assignment.round, 5);
}

TEST(HealthGateTest, ARoundThatEndsDuringTheCheckIsDroppedAndThePassCountsForTheNext) {
  AgentStateMachine sm = CheckingRound2();
  EXPECT_TRUE(sm.OnRestart("another node joined", std::nullopt).empty());
  EXPECT_EQ(sm.phase(), Phase::kRendezvous);
  EXPECT_TRUE(sm.OnHealthChecked(true, "").empty());
  const std::vector<AgentAction> start = sm.OnAssignment(Round(3));
  ASSERT_THAT(Types(start), ElementsAre(Type::kStartWorkers));
  EXPECT_EQ(start[0].assignment.round, 3);
}

TEST(HealthGateTest, ACheckThatFailsAfterItsRoundEndedStillStepsOut) {
  AgentStateMachine sm = CheckingRound2();
  sm.OnRestart("another node joined", std::nullopt);
  EXPECT_THAT(Types(sm.OnHealthChecked(false, "exit code 1")), ElementsAre(Type::kStepOut));
  EXPECT_EQ(sm.phase(), Phase::kSittingOut);
}

TEST(HealthGateTest, SignalsAndClosesWithoutWorkersExitAtOnce) {
  AgentStateMachine out(1, RestartMode::kCold, HealthGate::kBeforeEachRound);
  EXPECT_THAT(Types(out.OnStopSignal(SIGTERM)), ElementsAre(Type::kLeave, Type::kExit));
  EXPECT_EQ(out.phase(), Phase::kDone);

  AgentStateMachine checking = CheckingRound2();
  const std::vector<AgentAction> closed =
      checking.OnClosed(absl::ResourceExhaustedError("budget spent"), std::nullopt);
  ASSERT_THAT(Types(closed), ElementsAre(Type::kExit));
  EXPECT_EQ(closed[0].exit_code, kExitWorkersFailed);
}

TEST(HealthGateTest, GivingUpLeavesAndExitsWithTheCodeGivenButNeverWhileWorkersRun) {
  AgentStateMachine running = Running();
  EXPECT_TRUE(running.OnHealthAbandoned(kExitRendezvous, "failed for 600 s").empty());
  EXPECT_TRUE(running.OnHealthChecked(false, "late").empty());  // workers run: changes nothing
  EXPECT_EQ(running.phase(), Phase::kRunning);

  AgentStateMachine out(1, RestartMode::kCold, HealthGate::kBeforeEachRound);
  const std::vector<AgentAction> actions = out.OnHealthAbandoned(kExitRendezvous, "gave up");
  ASSERT_THAT(Types(actions), ElementsAre(Type::kLeave, Type::kExit));
  EXPECT_EQ(actions[1].exit_code, kExitRendezvous);
  EXPECT_EQ(out.exit_reason(), "gave up");
}

TEST(HealthGateTest, WithoutAGateAssignmentsStartAtOnce) {
  AgentStateMachine sm(1);
  EXPECT_EQ(sm.phase(), Phase::kRendezvous);
  EXPECT_THAT(Types(sm.OnAssignment(Round(1))), ElementsAre(Type::kStartWorkers));
}

// Spares (issue 40): the rendezvous tells a node that waits beyond the running round that it
// is a spare; with the gate its check is re-run while it waits, a failing one steps it out so
// that the run does not pick it, a passing one steps it back in.
// A gated node whose first check passed, joined, and was told it is a spare.
AgentStateMachine GatedSpare() {
  AgentStateMachine sm(1, RestartMode::kCold, HealthGate::kBeforeEachRound);
  EXPECT_THAT(Types(sm.OnHealthChecked(true, "")), ElementsAre(Type::kStepIn));
  EXPECT_FALSE(sm.standby());
  EXPECT_TRUE(sm.OnStandby().empty());
  EXPECT_TRUE(sm.standby());
  return sm;
}

TEST(StandbyTest, ASpareRerunsItsCheckAndStepsOutWhenItFails) {
  AgentStateMachine sm = GatedSpare();
  EXPECT_THAT(Types(sm.OnStandbyCheckDue()), ElementsAre(Type::kCheckHealth));
  EXPECT_TRUE(sm.OnHealthChecked(true, "").empty());  // still fine: still a spare
  EXPECT_TRUE(sm.standby());
  EXPECT_THAT(Types(sm.OnStandbyCheckDue()), ElementsAre(Type::kCheckHealth));
  const std::vector<AgentAction> out = sm.OnHealthChecked(false, "health check failed: gpu 3");
  ASSERT_THAT(Types(out), ElementsAre(Type::kStepOut));
  EXPECT_EQ(out[0].message, "health check failed: gpu 3");
  EXPECT_EQ(sm.phase(), Phase::kSittingOut);
  EXPECT_FALSE(sm.standby());
  EXPECT_TRUE(sm.OnStandbyCheckDue().empty()) << "out of the run: the sitting-out retries run";
}

TEST(StandbyTest, ASpareThatSteppedOutStepsBackInOnAPassingCheckAndWaitsToBeToldAgain) {
  AgentStateMachine sm = GatedSpare();
  sm.OnStandbyCheckDue();
  ASSERT_THAT(Types(sm.OnHealthChecked(false, "down")), ElementsAre(Type::kStepOut));
  EXPECT_THAT(Types(sm.OnHealthChecked(true, "")), ElementsAre(Type::kStepIn));
  EXPECT_EQ(sm.phase(), Phase::kRendezvous);
  EXPECT_FALSE(sm.standby()) << "a new node now: a spare only once the rendezvous says so";
  EXPECT_TRUE(sm.OnStandbyCheckDue().empty());
  sm.OnStandby();
  EXPECT_TRUE(sm.standby());
}

TEST(StandbyTest, AnAssignmentEndsTheStandbyAndStartsAtOnceAfterAPassingCheck) {
  AgentStateMachine sm = GatedSpare();
  sm.OnStandbyCheckDue();
  sm.OnHealthChecked(true, "");
  rendezvous::Assignment a;
  a.round = 2;
  a.group_rank = 1;  // the lost node's
  const std::vector<AgentAction> start = sm.OnAssignment(a);
  ASSERT_THAT(Types(start), ElementsAre(Type::kStartWorkers));
  EXPECT_EQ(start[0].assignment.group_rank, 1);
  EXPECT_FALSE(sm.standby());
  EXPECT_TRUE(sm.OnStandbyCheckDue().empty());
}

TEST(StandbyTest, WithoutTheGateASpareRunsNoCheck) {
  AgentStateMachine sm(1);
  sm.OnStandby();
  EXPECT_TRUE(sm.standby());
  EXPECT_TRUE(sm.OnStandbyCheckDue().empty());
}

}  // namespace
}  // namespace ddprun::launcher
