// SlowNodeJudge (rendezvous/stragglers/): a node persistently slower than the job's median node
// is named, after `windows` reports in a row; noise, one bad report, too few nodes or steps too
// short to time name nobody; the name is withdrawn the same way.
#include "rendezvous/stragglers/slow_node_judge.h"

#include <chrono>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

class SlowNodeJudgeTest : public ::testing::Test {
 protected:
  // One report from each of nodes n0..n<count-1> (5 s after the last round of reports): every
  // node computes `ms`, but node `slow` computes `slow_ms`. The changes it made, in order.
  std::vector<SlowNodeChange> Round(int count, double ms, int slow = -1, double slow_ms = 0) {
    now_ += seconds(5);
    std::vector<SlowNodeChange> changes;
    for (int i = 0; i < count; ++i) {
      const double figure = i == slow ? slow_ms : ms;
      if (auto c = judge_.Report({"n" + std::to_string(i), figure, 100}, now_)) {
        changes.push_back(*c);
      }
    }
    return changes;
  }

  SlowNodeJudge judge_;
  TimePoint now_{};
};

TEST_F(SlowNodeJudgeTest, ANodePersistentlyAboveTheMarginIsNamedAfterThreeReportsInARow) {
  EXPECT_TRUE(Round(4, 30, 2, 95).empty());
  EXPECT_TRUE(Round(4, 30, 2, 95).empty());
  const std::vector<SlowNodeChange> named = Round(4, 30, 2, 95);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].node_id, "n2");
  EXPECT_TRUE(named[0].slow);
  EXPECT_DOUBLE_EQ(named[0].median_ms, 30);
  EXPECT_NEAR(named[0].ratio, 95.0 / 30, 1e-9);
  EXPECT_EQ(named[0].windows, 3);
  EXPECT_THAT(named[0].Describe(), HasSubstr("node n2 is slow: its workers compute 95.0 ms"));
  EXPECT_THAT(named[0].Describe(), HasSubstr("3.17x the job's median node (30.0 ms)"));
  EXPECT_EQ(judge_.SlowNodes(), std::vector<std::string>{"n2"});
  EXPECT_TRUE(judge_.StandingOf("n2")->slow);
  EXPECT_FALSE(judge_.StandingOf("n1")->slow);
  EXPECT_TRUE(Round(4, 30, 2, 95).empty()) << "named once, not at every report";
}

TEST_F(SlowNodeJudgeTest, OneBadReportBetweenGoodOnesNamesNobody) {
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(Round(4, 30, 1, i % 3 == 2 ? 30 : 80).empty()) << "round " << i;
  }
  EXPECT_TRUE(judge_.SlowNodes().empty());
}

TEST_F(SlowNodeJudgeTest, OrdinaryNoiseNamesNobody) {
  // Every node's figure varies by up to 15 % from report to report: within the 20 % margin of
  // the median only when both ends of the noise do not meet, so the streak rule must hold it.
  std::mt19937 random(7);
  std::uniform_real_distribution<double> noise(0.93, 1.07);
  for (int round = 0; round < 200; ++round) {
    now_ += seconds(5);
    for (int i = 0; i < 4; ++i) {
      EXPECT_FALSE(judge_.Report({"n" + std::to_string(i), 30 * noise(random), 100}, now_))
          << "round " << round;
    }
  }
}

TEST_F(SlowNodeJudgeTest, ANameIsWithdrawnAfterThreeReportsWithinTheMargin) {
  // n0 reports first: its first report has no median yet, so the third that counts is the 4th.
  for (int i = 0; i < 4; ++i) Round(3, 30, 0, 60);
  ASSERT_EQ(judge_.SlowNodes().size(), 1u);
  EXPECT_TRUE(Round(3, 30, 0, 31).empty());
  EXPECT_TRUE(Round(3, 30, 0, 31).empty());
  const std::vector<SlowNodeChange> cleared = Round(3, 30, 0, 31);
  ASSERT_EQ(cleared.size(), 1u);
  EXPECT_FALSE(cleared[0].slow);
  EXPECT_THAT(cleared[0].Describe(), HasSubstr("node n0 is no longer slow"));
  EXPECT_TRUE(judge_.SlowNodes().empty());
}

TEST_F(SlowNodeJudgeTest, OfTwoNodesTheSlowerIsMeasuredAgainstTheFaster) {
  for (int i = 0; i < 3; ++i) Round(2, 30, 1, 40);
  EXPECT_EQ(judge_.SlowNodes(), std::vector<std::string>{"n1"});
  EXPECT_DOUBLE_EQ(*judge_.MedianMs(now_), 30);
}

TEST_F(SlowNodeJudgeTest, AloneOrWithStepsTooShortToTimeNobodyIsJudged) {
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Round(1, 30).empty());
  EXPECT_EQ(judge_.StandingOf("n0")->ratio, 0) << "one node: no median";
  judge_.Clear();
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Round(3, 0.2, 2, 0.9).empty());
  EXPECT_TRUE(judge_.SlowNodes().empty());
}

TEST_F(SlowNodeJudgeTest, AStaleReportLeavesTheMedianAndAReportWithoutStepsCountsForNothing) {
  Round(3, 30);
  now_ += seconds(30);  // n0..n2 stale now
  EXPECT_FALSE(judge_.Report({"n9", 90, 100}, now_).has_value());
  EXPECT_FALSE(judge_.MedianMs(now_).has_value()) << "only n9 is fresh";
  EXPECT_FALSE(judge_.Report({"n1", 90, 0}, now_).has_value());
  EXPECT_DOUBLE_EQ(judge_.StandingOf("n1")->compute_ms, 30) << "no steps: the figure stays";
}

TEST_F(SlowNodeJudgeTest, AForgottenNodeIsNoLongerSlowNorCounted) {
  for (int i = 0; i < 3; ++i) Round(3, 30, 2, 90);
  judge_.Forget("n2");
  EXPECT_TRUE(judge_.SlowNodes().empty());
  EXPECT_FALSE(judge_.StandingOf("n2").has_value());
}

}  // namespace
}  // namespace ddprun::rendezvous
