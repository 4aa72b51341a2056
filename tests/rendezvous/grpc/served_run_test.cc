// Which of two servers of one run the agents follow (rendezvous/grpc/served_run.h): issue 24
// item 5, successor candidates that disagree. After a partition heals, each agent hosting a
// server compares its own with the others it finds; the comparison must be a strict total
// order, so that two servers never each move to the other and every agent ends at one.
#include "rendezvous/grpc/served_run.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace ddprun::rendezvous {
namespace {

ServedRun Served(int64_t round, size_t agents, int order) {
  ServedRun r;
  r.endpoint = "10.0.0." + std::to_string(order + 2) + ":29400";
  r.round = round;
  r.agents = agents;
  r.order = order;
  return r;
}

TEST(ServedRunTest, ALaterRoundWinsThenMoreAgentsThenTheEarlierHost) {
  EXPECT_TRUE(Supersedes(Served(5, 1, 2), Served(4, 3, -1)));  // it went on
  EXPECT_TRUE(Supersedes(Served(4, 2, 1), Served(4, 1, -1)));  // same round, more agents
  EXPECT_TRUE(Supersedes(Served(4, 1, -1), Served(4, 1, 1)));  // the original host first
  EXPECT_FALSE(Supersedes(Served(4, 1, 1), Served(4, 1, -1)));
  EXPECT_FALSE(Supersedes(Served(4, 1, 1), Served(4, 1, 1)));  // itself: no move
}

TEST(ServedRunTest, NoTwoServersEachMoveToTheOtherAndEveryoneEndsAtOne) {
  std::vector<ServedRun> servers;
  for (int64_t round : {3, 4}) {
    for (size_t agents : {1u, 2u}) {
      for (int order : {-1, 0, 1, 2}) servers.push_back(Served(round, agents, order));
    }
  }
  for (const ServedRun& a : servers) {
    for (const ServedRun& b : servers) {
      EXPECT_FALSE(Supersedes(a, b) && Supersedes(b, a));
    }
  }
  // Every server's agents move to the best one they see; with everyone seeing everyone, that
  // is one server for all, whatever order they look in.
  const ServedRun best =
      *std::max_element(servers.begin(), servers.end(),
                        [](const ServedRun& x, const ServedRun& y) { return Supersedes(y, x); });
  for (const ServedRun& mine : servers) {
    ServedRun chosen = mine;
    for (const ServedRun& other : servers) {
      if (Supersedes(other, chosen)) chosen = other;
    }
    EXPECT_EQ(chosen.endpoint, best.endpoint);
    EXPECT_EQ(chosen.round, best.round);
    EXPECT_EQ(chosen.agents, best.agents);
  }
}

}  // namespace
}  // namespace ddprun::rendezvous
