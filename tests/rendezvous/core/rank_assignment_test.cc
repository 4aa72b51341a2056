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

// Survivors 0 and 2 of a round of 3 (rank 1 lost), then two spares: the first spare takes rank 1,
// nobody else moves, the second spare is not in the round (the caller cut it off at max).
TEST(RankAssignmentTest, KeepRanksFillsTheHoleWithTheFirstSpare) {
  EXPECT_THAT(AssignGroupRanks({{-1, 0}, {-1, 2}, {-1, -1}}), ElementsAre(0, 2, 1));
  // Two holes, two spares in arrival order: lowest hole to the first.
  EXPECT_THAT(AssignGroupRanks({{-1, 1}, {-1, 3}, {-1, -1}, {-1, -1}}), ElementsAre(1, 3, 0, 2));
  // No spare: rank 2 does not fit a round of 2, so the survivors compact (keeping their order);
  // rank 2 of 3 lost instead, the survivors' ranks fit and stay.
  EXPECT_THAT(AssignGroupRanks({{-1, 0}, {-1, 2}}), ElementsAre(0, 1));
  EXPECT_THAT(AssignGroupRanks({{-1, 0}, {-1, 1}}), ElementsAre(0, 1));
}

TEST(RankAssignmentTest, AnExplicitRankStillComesFirst) {
  // Survivors 0 and 3 of a round of 4; two newcomers, the second asked for rank 1: it gets it,
  // the survivors keep 0 and 3, the first newcomer takes the hole left, 2.
  EXPECT_THAT(AssignGroupRanks({{-1, 0}, {-1, 3}, {-1, -1}, {1, -1}}), ElementsAre(0, 3, 2, 1));
}

TEST(AssignGroupRanksTest, Empty) { EXPECT_TRUE(AssignGroupRanks({}).empty()); }

}  // namespace
}  // namespace ddprun::rendezvous
