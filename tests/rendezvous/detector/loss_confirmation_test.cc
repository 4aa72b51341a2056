// The confirmation rule (rendezvous/detector/loss_confirmation.h): one observer's silence is a
// suspicion, two overlapping ones are a loss, a stream reset is a loss alone.
#include "rendezvous/detector/loss_confirmation.h"

#include <chrono>

#include "gtest/gtest.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;

const TimePoint kT0{std::chrono::seconds(1000)};

TEST(LossConfirmationTest, OneObserversSilenceIsNotALoss) {
  LossConfirmation c{ConfirmationRule{}};
  c.Suspect("server", "n2", Evidence::kSilence, kT0);
  const LossDecision d = c.Decide("n2", 3, kT0);
  EXPECT_FALSE(d.lost);
  EXPECT_EQ(d.confirmations, 1);
}

TEST(LossConfirmationTest, TwoObserversSuspectingAtOnceAreALoss) {
  LossConfirmation c{ConfirmationRule{}};
  c.Suspect("server", "n2", Evidence::kSilence, kT0);
  c.Suspect("n1", "n2", Evidence::kCollectiveError, kT0 + milliseconds(30));
  const LossDecision d = c.Decide("n2", 3, kT0 + milliseconds(30));
  EXPECT_TRUE(d.lost);
  EXPECT_FALSE(d.decisive);
  EXPECT_EQ(d.confirmations, 2);
  EXPECT_FALSE(c.Decide("n1", 3, kT0 + milliseconds(30)).lost);
}

TEST(LossConfirmationTest, OneObserverRepeatingItselfCountsOnce) {
  LossConfirmation c{ConfirmationRule{}};
  for (int i = 0; i < 5; ++i) c.Suspect("server", "n2", Evidence::kSilence, kT0 + milliseconds(i));
  EXPECT_FALSE(c.Decide("n2", 3, kT0 + milliseconds(5)).lost);
}

// Two suspicions 150 ms apart, neither renewed, never stood together.
TEST(LossConfirmationTest, SuspicionsThatDoNotOverlapDoNotAddUp) {
  LossConfirmation c{ConfirmationRule{}};
  c.Suspect("server", "n2", Evidence::kSilence, kT0);
  c.Suspect("n1", "n2", Evidence::kSilence, kT0 + milliseconds(150));
  EXPECT_FALSE(c.Decide("n2", 3, kT0 + milliseconds(150)).lost);
  c.Suspect("server", "n2", Evidence::kSilence, kT0 + milliseconds(160));
  EXPECT_TRUE(c.Decide("n2", 3, kT0 + milliseconds(160)).lost);
  EXPECT_FALSE(c.Decide("n2", 3, kT0 + milliseconds(161) + kDefaultSuspicionTtl).lost);
}

TEST(LossConfirmationTest, AWithdrawnSuspicionNoLongerStands) {
  LossConfirmation c{ConfirmationRule{}};
  c.Suspect("server", "n2", Evidence::kSilence, kT0);
  c.Suspect("n1", "n2", Evidence::kSilence, kT0);
  c.Withdraw("n1", "n2");
  EXPECT_FALSE(c.Decide("n2", 3, kT0).lost);
  c.Forget("server");
  EXPECT_EQ(c.Decide("n2", 3, kT0).confirmations, 0);
}

TEST(LossConfirmationTest, AStreamResetIsALossAlone) {
  LossConfirmation c{ConfirmationRule{}};
  c.Suspect("server", "n2", Evidence::kStreamReset, kT0);
  const LossDecision d = c.Decide("n2", 3, kT0);
  EXPECT_TRUE(d.lost);
  EXPECT_TRUE(d.decisive);
  ConfirmationRule nothing_decisive;
  nothing_decisive.decisive.clear();
  LossConfirmation strict{nothing_decisive};
  strict.Suspect("server", "n2", Evidence::kStreamReset, kT0);
  EXPECT_FALSE(strict.Decide("n2", 3, kT0).lost);
}

TEST(LossConfirmationTest, ANodeCannotConfirmItsOwnLoss) {
  LossConfirmation c{ConfirmationRule{}};
  c.Suspect("server", "n2", Evidence::kSilence, kT0);
  c.Suspect("n2", "n2", Evidence::kSilence, kT0);
  EXPECT_FALSE(c.Decide("n2", 3, kT0).lost);
}

// A two-node job served by one of them: the server's is the only other view, and it decides;
// with no observer at all, silence decides nothing.
TEST(LossConfirmationTest, WithFewerObserversThanTheRuleAllOfThemDecide) {
  LossConfirmation c{ConfirmationRule{}};
  c.Suspect("server", "n2", Evidence::kSilence, kT0);
  EXPECT_TRUE(c.Decide("n2", 1, kT0).lost);
  EXPECT_FALSE(c.Decide("n2", 0, kT0).lost);
}

TEST(LossConfirmationTest, BadRulesAreRefusedNamingTheField) {
  EXPECT_TRUE(ValidateConfirmationRule(ConfirmationRule{}).ok());
  ConfirmationRule r;
  r.observers_required = 0;
  EXPECT_NE(ValidateConfirmationRule(r).message().find("observers_required"), std::string::npos);
  r = ConfirmationRule{};
  r.suspicion_ttl = Duration::zero();
  EXPECT_NE(ValidateConfirmationRule(r).message().find("suspicion_ttl"), std::string::npos);
}

}  // namespace
}  // namespace ddprun::rendezvous
