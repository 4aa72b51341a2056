// Spares (issue 40): a node connected beyond the running round waits as a spare; when a member
// is lost, the next round takes it into the lost member's group rank and nobody else moves.
#include <chrono>
#include <string>

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

class RunStateSparesTest : public testing::ServerStateTest {
 protected:
  // Node `conn` (node id "<conn>") of a --nnodes=min:max run.
  Outbox Join(ConnId conn, int min_nodes, int max_nodes) {
    return ServerStateTest::Join(conn, MakeJoin("run", std::to_string(conn), min_nodes, max_nodes));
  }
  // The group rank `out` assigns to `conn`, or -1.
  static int RankOf(const Outbox& out, ConnId conn) {
    const Assignment* a = Find<Assignment>(out, conn);
    return a == nullptr ? -1 : a->group_rank;
  }
};

// Three members (ranks 0, 1, 2) and one spare; rank 1 is lost: the spare takes rank 1 at once,
// ranks 0 and 2 stay, and the rank offsets follow the ranks.
TEST_F(RunStateSparesTest, ASpareTakesTheLostNodesGroupRank) {
  for (ConnId c = 1; c <= 3; ++c) Join(c, 3, 3);
  EXPECT_EQ(Count<Assignment>(Join(4, 3, 3)), 0) << "beyond max: a spare, no restart";
  const Outbox out = state_.StreamBroken(2, clock_.Now());
  ASSERT_EQ(Count<Assignment>(out), 3) << "at max again: the round forms at once";
  EXPECT_EQ(RankOf(out, 1), 0);
  EXPECT_EQ(RankOf(out, 3), 2);
  EXPECT_EQ(RankOf(out, 4), 1);
  EXPECT_EQ(Find<Assignment>(out, 4)->rank_offset, 2);
  EXPECT_EQ(Find<Assignment>(out, 3)->rank_offset, 4);
  EXPECT_EQ(Find<Assignment>(out, 4)->round, 2);
}

}  // namespace
}  // namespace ddprun::rendezvous
