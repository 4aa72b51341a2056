// The give-up decision of the --health-check gate, inside the pure state machine
// (AgentStateMachine::OnHealthVerdict): failures in a row are counted on the verdicts' own times,
// and once they have lasted the give-up bound (the rendezvous' join_timeout) the node leaves
// and exits 3. Verdicts and times are fed in by hand: no processes, no clock.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "launcher/agent/state/agent_state.h"

namespace ddprun::launcher {
namespace {

using Phase = AgentStateMachine::Phase;
using Type = AgentAction::Type;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<Type> Types(const std::vector<AgentAction>& actions) {
  std::vector<Type> out;
  for (const AgentAction& a : actions) out.push_back(a.type);
  return out;
}

HealthCheckResult Failed(TimePoint at) { return {false, "--health-check 'x' exited 1", at}; }
HealthCheckResult Passed(TimePoint at) { return {true, "--health-check 'x' exited 0", at}; }

AgentStateMachine Gated(Duration give_up_after) {
  return AgentStateMachine(2, RestartMode::kCold, HealthGate::kBeforeEachRound, give_up_after);
}

TEST(HealthGiveUpTest, FailuresShorterThanTheBoundKeepTheNodeOutAndCountInARow) {
  AgentStateMachine sm = Gated(seconds(600));
  const TimePoint t0{};
  EXPECT_TRUE(sm.OnHealthVerdict(Failed(t0)).empty());  // not joined: nothing to step out of
  EXPECT_TRUE(sm.OnHealthVerdict(Failed(t0 + seconds(599))).empty());
  EXPECT_EQ(sm.health_failures_in_row(), 2);
  EXPECT_EQ(sm.phase(), Phase::kSittingOut);
}

TEST(HealthGiveUpTest, FailingForTheWholeBoundLeavesAndExitsWithTheRendezvousCode) {
  AgentStateMachine sm = Gated(seconds(600));
  const TimePoint t0 = TimePoint{} + seconds(1000);
  sm.OnHealthVerdict(Failed(t0));
  sm.OnHealthVerdict(Failed(t0 + seconds(300)));
  const std::vector<AgentAction> out = sm.OnHealthVerdict(Failed(t0 + seconds(600)));
  ASSERT_THAT(Types(out), ElementsAre(Type::kLeave, Type::kExit));
  EXPECT_EQ(out[1].exit_code, kExitRendezvous);
  EXPECT_THAT(out[1].message, HasSubstr("failed for 3 tries in a row over 600.00 s"));
  EXPECT_THAT(out[1].message, HasSubstr("(join_timeout 600.00 s); last: --health-check 'x'"));
  EXPECT_EQ(sm.phase(), Phase::kDone);
}

TEST(HealthGiveUpTest, APassEndsTheStreakSoTheBoundCountsFromTheNextFailure) {
  AgentStateMachine sm = Gated(seconds(600));
  const TimePoint t0{};
  sm.OnHealthVerdict(Failed(t0));
  EXPECT_THAT(Types(sm.OnHealthVerdict(Passed(t0 + seconds(500)))), ElementsAre(Type::kStepIn));
  EXPECT_EQ(sm.health_failures_in_row(), 0);
  // Joined, a later check fails: 700 s after the first failure, but the first of a new streak.
  const std::vector<AgentAction> out = sm.OnHealthVerdict(Failed(t0 + seconds(700)));
  ASSERT_THAT(Types(out), ElementsAre(Type::kStepOut));
  EXPECT_EQ(out[0].message, "health check failed: --health-check 'x' exited 1");
  EXPECT_TRUE(sm.OnHealthVerdict(Failed(t0 + seconds(900))).empty());
  EXPECT_THAT(Types(sm.OnHealthVerdict(Failed(t0 + seconds(1300)))),
              ElementsAre(Type::kLeave, Type::kExit));
}

}  // namespace
}  // namespace ddprun::launcher
