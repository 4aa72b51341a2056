// A spare's standby (issue 40, agent_state.h): the rendezvous tells a node that waits beyond the
// running round that it is a spare; with the health gate its check is re-run while it waits, a
// failing one steps it out so that the run does not pick it, a passing one steps it back in.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
