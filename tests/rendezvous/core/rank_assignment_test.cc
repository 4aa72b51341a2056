#include "rendezvous/core/rank_assignment.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun::rendezvous {
namespace {

using ::testing::ElementsAre;

TEST(AssignGroupRanksTest, InOrderWithoutRequests) {
  EXPECT_THAT(AssignGroupRanks({{}, {}, {}}), ElementsAre(0, 1, 2));
}

TEST(AssignGroupRanksTest, HonoursRequestsAndKeepsOrderOfTheRest) {
  EXPECT_THAT(AssignGroupRanks({{-1}, {0}, {-1}, {3}}), ElementsAre(1, 0, 2, 3));
}

TEST(AssignGroupRanksTest, RequestBeyondSizeTakesAFreeRank) {
  EXPECT_THAT(AssignGroupRanks({{5}, {-1}}), ElementsAre(0, 1));
}

TEST(AssignGroupRanksTest, DuplicateRequestFirstWins) {
  EXPECT_THAT(AssignGroupRanks({{1}, {1}}), ElementsAre(1, 0));
}

TEST(AssignGroupRanksTest, Empty) { EXPECT_TRUE(AssignGroupRanks({}).empty()); }

}  // namespace
}  // namespace ddprun::rendezvous
