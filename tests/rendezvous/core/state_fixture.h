// A fixture that drives ServerState with a FakeClock: the state machine tests' common harness.
#ifndef DDPRUN_TESTS_RENDEZVOUS_CORE_STATE_FIXTURE_H_
#define DDPRUN_TESTS_RENDEZVOUS_CORE_STATE_FIXTURE_H_

#include <initializer_list>

#include "common/clock.h"
#include "gtest/gtest.h"
#include "rendezvous/core/server_state.h"

namespace ddprun::rendezvous::testing {

class ServerStateTest : public ::testing::Test {
 protected:
  explicit ServerStateTest(RoundQuorum quorum = RoundQuorum::kAnyNodes)
      : state_(ServerLimits{}, nullptr, quorum) {}

  Outbox Join(ConnId conn, const JoinRequest& r) { return state_.Join(conn, r, clock_.Now()); }
  Outbox Tick() { return state_.Tick(clock_.Now()); }
  // Keeps every listed conn's lease fresh.
  void Beat(std::initializer_list<ConnId> conns) {
    for (ConnId c : conns) state_.Heartbeat(c, {}, clock_.Now());
  }
  // The status of run "run", which the test has created.
  RunStatus Status() { return *state_.Status("run"); }

  FakeClock clock_;
  ServerState state_;
};

}  // namespace ddprun::rendezvous::testing

#endif  // DDPRUN_TESTS_RENDEZVOUS_CORE_STATE_FIXTURE_H_
