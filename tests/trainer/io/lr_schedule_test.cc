#include "trainer/io/lr_schedule.h"

#include "gtest/gtest.h"

namespace ddprun::trainer {
namespace {

TEST(LrScheduleTest, StepDecaysTenfoldEveryStepEpochs) {
  LrSchedule s;  // 0.1, x0.1 every 30
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 0), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 29.99), 0.1);
  EXPECT_NEAR(LearningRateAt(s, 30), 0.01, 1e-12);
  EXPECT_NEAR(LearningRateAt(s, 89.5), 0.001, 1e-12);
  EXPECT_NEAR(LearningRateAt(s, 90), 0.0001, 1e-12);
}

TEST(LrScheduleTest, WarmupIsLinearFromZeroThenCosineToZero) {
  LrSchedule s{LrSchedule::Kind::kCosine, /*base_lr=*/0.4, 30, /*warmup=*/2, /*total=*/10};
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 0), 0);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 1), 0.2);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 2), 0.4);    // warm-up ends at the peak
  EXPECT_NEAR(LearningRateAt(s, 6), 0.2, 1e-12);  // halfway through the cosine
  EXPECT_NEAR(LearningRateAt(s, 10), 0, 1e-12);
  EXPECT_NEAR(LearningRateAt(s, 12), 0, 1e-12);  // past the end: stays at 0
  double prev = 1;
  for (double e = 2; e <= 10; e += 0.25) {
    EXPECT_LE(LearningRateAt(s, e), prev);
    prev = LearningRateAt(s, e);
  }
}

}  // namespace
}  // namespace ddprun::trainer
