// Young's and Daly's checkpoint model (rendezvous/checkpoints/daly_model.h) against figures
// worked out by hand from the papers' formulas.
#include "rendezvous/checkpoints/daly_model.h"

#include <gtest/gtest.h>

namespace ddprun::rendezvous {
namespace {

// A one-minute save on a job that fails once a day.
constexpr double kSave = 60, kDay = 86400;

TEST(DalyModelTest, YoungIsTheSquareRootOfTwiceSaveTimesMtbf) {
  EXPECT_NEAR(YoungInterval(kSave, kDay), 3219.94, 0.01);
}

TEST(DalyModelTest, DalysOptimumCorrectsYoungByHigherOrderTermsLessTheSave) {
  // sqrt(2 δ M) [1 + (1/3) sqrt(δ/2M) + (1/9) δ/2M] − δ
  EXPECT_NEAR(DalyInterval(kSave, kDay), 3180.06, 0.01);
}

TEST(DalyModelTest, ASaveLongerThanTwiceTheMtbfCheckpointsEveryMtbf) {
  EXPECT_DOUBLE_EQ(DalyInterval(300, 100), 300) << "never below the save itself";
  EXPECT_DOUBLE_EQ(DalyInterval(250, 120), 250);
  EXPECT_DOUBLE_EQ(DalyInterval(90, 40), 90);
}

TEST(DalyModelTest, TheOptimumBeatsIntervalsAFifthShorterOrLonger) {
  const double tau = DalyInterval(kSave, kDay);
  const double best = DalyEfficiency(tau, kSave, 120, kDay);
  EXPECT_NEAR(best, 0.96186, 0.00001);
  EXPECT_GT(best, DalyEfficiency(0.8 * tau, kSave, 120, kDay));
  EXPECT_GT(best, DalyEfficiency(1.2 * tau, kSave, 120, kDay));
}

TEST(DalyModelTest, WithoutFailuresOnlyTheSavesCost) {
  // M far beyond τ + δ: T_s / T_w tends to τ / (τ + δ).
  EXPECT_NEAR(DalyEfficiency(100, 1, 0, 1e12), 100.0 / 101.0, 1e-6);
}

TEST(DalyModelTest, ALongerRestartLowersTheRatioNotTheOptimum) {
  const double tau = DalyInterval(kSave, kDay);
  EXPECT_LT(DalyEfficiency(tau, kSave, 3600, kDay), DalyEfficiency(tau, kSave, 60, kDay));
  EXPECT_EQ(DalyEfficiency(0, kSave, 60, kDay), 0) << "no interval, no work";
}

}  // namespace
}  // namespace ddprun::rendezvous
