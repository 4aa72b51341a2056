// CheckpointAdvisor (rendezvous/checkpoints/checkpoint_advisor.h) on hand-fed reports: the MTBF
// estimate from the run's failures and the prior, the medians of its costs, and the advice
// recomputed as failures happen.
#include "rendezvous/checkpoints/checkpoint_advisor.h"

#include <gtest/gtest.h>

#include "rendezvous/checkpoints/daly_model.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::seconds;

const TimePoint kStart{seconds(1000)};

CheckpointReport Save(double s) {
  CheckpointReport r;
  r.save_s = s;
  return r;
}

TEST(CheckpointAdvisorTest, NoAdviceBeforeASaveTimeIsKnown) {
  CheckpointAdvisor advisor(seconds(3600));
  advisor.Started(kStart);
  EXPECT_FALSE(advisor.Advise(kStart + seconds(600)).has_value());
  advisor.Report("a", Save(2));
  EXPECT_TRUE(advisor.Advise(kStart + seconds(600)).has_value());
}

TEST(CheckpointAdvisorTest, WithNoHistoryThePriorIsTheMtbf) {
  CheckpointAdvisor advisor(seconds(7200));
  advisor.Report("a", Save(2));
  const auto a = advisor.Advise(kStart);  // never trained yet
  ASSERT_TRUE(a.has_value());
  EXPECT_DOUBLE_EQ(a->mtbf_s, 7200);
  EXPECT_TRUE(a->prior);
  EXPECT_DOUBLE_EQ(a->interval_s, DalyInterval(2, 7200));
  EXPECT_DOUBLE_EQ(a->predicted_ratio, DalyEfficiency(a->interval_s, 2, 0, 7200));
}

TEST(CheckpointAdvisorTest, WithoutAPriorNothingIsAdvisedBeforeTheRunTrains) {
  CheckpointAdvisor advisor;
  advisor.Report("a", Save(2));
  EXPECT_FALSE(advisor.Advise(kStart).has_value());
  advisor.Started(kStart);
  const auto a = advisor.Advise(kStart + seconds(100));
  ASSERT_TRUE(a.has_value());
  EXPECT_DOUBLE_EQ(a->mtbf_s, 100) << "trained 100 s, as if a failure were due";
  EXPECT_FALSE(a->prior);
}

// The acceptance's "advice recomputed as failures happen": each failure shortens the MTBF
// estimate, and with it the interval; training on without one lengthens both.
TEST(CheckpointAdvisorTest, EachFailureShortensTheAdvisedInterval) {
  CheckpointAdvisor advisor(seconds(3600));
  advisor.Started(kStart);
  advisor.Report("a", Save(5));
  const TimePoint hour = kStart + seconds(3600);
  const auto before = advisor.Advise(hour);
  ASSERT_TRUE(before.has_value());
  EXPECT_DOUBLE_EQ(before->mtbf_s, 7200);  // (3600 trained + 3600 prior) / 1
  advisor.Failure();
  const auto one = advisor.Advise(hour);
  advisor.Failure();
  advisor.Failure();
  const auto three = advisor.Advise(hour);
  ASSERT_TRUE(one.has_value() && three.has_value());
  EXPECT_DOUBLE_EQ(one->mtbf_s, 3600);
  EXPECT_DOUBLE_EQ(three->mtbf_s, 1800);
  EXPECT_EQ(three->failures, 3);
  EXPECT_LT(one->interval_s, before->interval_s);
  EXPECT_LT(three->interval_s, one->interval_s);
  EXPECT_GT(advisor.Advise(hour + seconds(7200))->interval_s, three->interval_s);
}

TEST(CheckpointAdvisorTest, CostsAreTheMediansOfTheLatestReports) {
  CheckpointAdvisor advisor(seconds(3600));
  for (double s : {100.0, 1.0, 2.0, 3.0, 9.0, 4.0}) advisor.Report("a", Save(s));  // 100 aged out
  CheckpointReport r;
  r.recovery_s = 2;
  advisor.Report("a", r);
  r.recovery_s = 30;
  advisor.Report("b", r);
  const auto a = advisor.Advise(kStart);
  ASSERT_TRUE(a.has_value());
  EXPECT_DOUBLE_EQ(a->save_s, 3);  // of 1, 2, 3, 9, 4
  EXPECT_DOUBLE_EQ(a->recovery_s, 16);
}

TEST(CheckpointAdvisorTest, TheMeasuredRatioIsTheMedianNodesAndForgetsLeftNodes) {
  CheckpointAdvisor advisor(seconds(3600));
  advisor.Report("a", Save(1));
  EXPECT_FALSE(advisor.Advise(kStart)->measured_ratio.has_value());
  for (const auto& [node, ratio] : {std::pair{"a", 0.91}, {"b", 0.95}, {"c", 0.97}}) {
    CheckpointReport r;
    r.effective_ratio = ratio;
    advisor.Report(node, r);
  }
  EXPECT_DOUBLE_EQ(*advisor.Advise(kStart)->measured_ratio, 0.95);
  advisor.Forget("b");
  EXPECT_DOUBLE_EQ(*advisor.Advise(kStart)->measured_ratio, 0.94);
}

}  // namespace
}  // namespace ddprun::rendezvous
