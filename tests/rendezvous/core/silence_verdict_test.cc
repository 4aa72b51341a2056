// Who decides that a silent node is lost (issue 40, docs/design.md §3a): with liveness=auto the
// liveness detector does for a member of the running round only while a spare stands ready to
// take its group rank; the lease decides otherwise. ServerState hands out the verdicts to offer
// whenever they may have changed (the liveness receiver's Offer).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "rendezvous/core/server_state.h"
#include "tests/rendezvous/core/state_fixture.h"
#include "tests/rendezvous/core/state_test_util.h"

namespace ddprun::rendezvous {
namespace {

using ::ddprun::rendezvous::testing::MakeJoin;
using Offers = std::vector<std::pair<ConnId, SilenceVerdict>>;

constexpr SilenceVerdict kLease = SilenceVerdict::kByLease;
constexpr SilenceVerdict kSilence = SilenceVerdict::kBySilence;

class SilenceVerdictTest : public testing::ServerStateTest {
 protected:
  // Node `conn` of a fixed run of `nodes`, with the liveness path in `mode`.
  Outbox Join(ConnId conn, int nodes, LivenessMode mode = LivenessMode::kAuto) {
    JoinRequest r = MakeJoin("run", std::to_string(conn), nodes, nodes);
    r.timeouts.liveness.mode = mode;
    return ServerStateTest::Join(conn, r);
  }
  // The last offer made to each conn since the previous call, in conn order.
  Offers LastOffers() {
    Offers last;
    for (const auto& [conn, verdict] : state_.TakeVerdictOffers()) {
      auto it = std::find_if(last.begin(), last.end(), [&](auto& o) { return o.first == conn; });
      if (it == last.end()) {
        last.emplace_back(conn, verdict);
      } else {
        it->second = verdict;
      }
    }
    std::sort(last.begin(), last.end());
    return last;
  }
};

// The server's heartbeat budget (liveness_max_rate): a run of up to 2,000 nodes keeps the 20 ms
// asked at the defaults; a larger one is told a longer interval, the same for every agent and
// for the server's own detectors, so that its datagrams stay within the budget.
TEST(LivenessForRunOfTest, ARunTooLargeForTheIntervalWithinTheServersBudgetHeartbeatsSlower) {
  const LivenessSettings asked;  // 20 ms, 100,000 a second
  EXPECT_EQ(LivenessForRunOf(asked, 4).interval, std::chrono::milliseconds(20));
  EXPECT_EQ(LivenessForRunOf(asked, 2000).interval, std::chrono::milliseconds(20));
  EXPECT_EQ(LivenessForRunOf(asked, 2001).interval, std::chrono::milliseconds(21));
  EXPECT_EQ(LivenessForRunOf(asked, 10000).interval, std::chrono::milliseconds(100));
  LivenessSettings slow = asked;
  slow.interval = std::chrono::milliseconds(250);
  EXPECT_EQ(LivenessForRunOf(slow, 10000).interval, std::chrono::milliseconds(250))
      << "an interval asked longer than the budget needs stays";
  LivenessSettings wide = asked;
  wide.max_rate = 500000;
  EXPECT_EQ(LivenessForRunOf(wide, 10000).interval, std::chrono::milliseconds(20));
  const LivenessSettings run = LivenessForRunOf(asked, 10000);
  EXPECT_EQ(run.pause, asked.pause);
  EXPECT_EQ(run.min_sd, asked.min_sd);
  EXPECT_DOUBLE_EQ(run.phi, asked.phi);
}

TEST_F(SilenceVerdictTest, EveryAgentOfALargeRunIsToldTheIntervalFittedToTheBudget) {
  JoinRequest r = MakeJoin("big", "1", 2, 10000);
  r.timeouts.liveness.mode = LivenessMode::kAuto;
  const Outbox out = ServerStateTest::Join(1, r);
  const JoinedNotice* joined = testing::Find<JoinedNotice>(out, 1);
  ASSERT_NE(joined, nullptr);
  EXPECT_EQ(joined->liveness.interval, std::chrono::milliseconds(100));
  const Outbox small = Join(2, 3);
  ASSERT_NE(testing::Find<JoinedNotice>(small, 2), nullptr);
  EXPECT_EQ(testing::Find<JoinedNotice>(small, 2)->liveness.interval,
            std::chrono::milliseconds(20));
}

TEST_F(SilenceVerdictTest, AutoLetsTheDetectorDecideForMembersOnlyWhileASpareStandsReady) {
  Join(1, 2);
  Join(2, 2);  // the round forms: no spare
  EXPECT_EQ(LastOffers(), (Offers{{1, kLease}, {2, kLease}}));
  Join(3, 2);  // a spare: every member may now be lost by its silence, the spare itself not
  EXPECT_EQ(LastOffers(), (Offers{{1, kSilence}, {2, kSilence}, {3, kLease}}));
  EXPECT_EQ(state_.SilenceVerdictOf(1), kSilence);
  EXPECT_EQ(state_.SilenceVerdictOf(3), kLease);
  state_.Silent(2, std::chrono::milliseconds(300), clock_.Now());  // the spare takes its rank
  EXPECT_EQ(LastOffers(), (Offers{{1, kLease}, {3, kLease}}));
  EXPECT_EQ(state_.SilenceVerdictOf(3), kLease) << "no spare left: the lease decides again";
}

TEST_F(SilenceVerdictTest, ASpareLeavingWithdrawsTheOffer) {
  for (ConnId c = 1; c <= 3; ++c) Join(c, 2);
  LastOffers();
  state_.Leave(3, "its health check failed", clock_.Now());
  EXPECT_EQ(LastOffers(), (Offers{{1, kLease}, {2, kLease}}));
}

TEST_F(SilenceVerdictTest, OnLetsTheDetectorDecideForEveryNodeAndOffDecidesNothing) {
  Join(1, 2, LivenessMode::kOn);
  EXPECT_EQ(state_.SilenceVerdictOf(1), kSilence) << "waiting for the round too";
  Join(2, 2, LivenessMode::kOn);
  Join(3, 2, LivenessMode::kOn);
  EXPECT_EQ(state_.SilenceVerdictOf(3), kSilence) << "the spare too";
  EXPECT_EQ(LastOffers(), (Offers{{1, kSilence}, {2, kSilence}, {3, kSilence}}));

  JoinRequest off = MakeJoin("other", "9", 1, 1);
  off.timeouts.liveness.mode = LivenessMode::kOff;
  ServerStateTest::Join(9, off);
  EXPECT_EQ(state_.SilenceVerdictOf(9), kLease);
  EXPECT_TRUE(LastOffers().empty()) << "a run without the liveness path offers nothing";
}

}  // namespace
}  // namespace ddprun::rendezvous
