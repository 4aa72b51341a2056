// ComputeTimes (launcher/stragglers/): each local rank's median compute time over a window, the
// window restarted by every Take; nonsense times ignored.
#include "launcher/stragglers/compute_times.h"

#include <limits>

#include "gtest/gtest.h"

namespace ddprun::launcher {
namespace {

TEST(ComputeTimesTest, EachRankGetsItsMedianOfTheWindowAndTheNextWindowStartsEmpty) {
  ComputeTimes times;
  for (double ms : {30.0, 31.0, 500.0, 29.0, 30.5}) times.Add(0, ms);  // one slow step
  for (double ms : {90.0, 95.0, 93.0}) times.Add(2, ms);
  const std::vector<LocalCompute> window = times.Take();
  ASSERT_EQ(window.size(), 2u);
  EXPECT_EQ(window[0].local_rank, 0);
  EXPECT_DOUBLE_EQ(window[0].median_ms, 30.5) << "one slow step moves nothing";
  EXPECT_EQ(window[0].steps, 5);
  EXPECT_EQ(window[1].local_rank, 2);
  EXPECT_DOUBLE_EQ(window[1].median_ms, 93);
  EXPECT_TRUE(times.Take().empty());
}

TEST(ComputeTimesTest, NegativeOrNonFiniteTimesAreIgnoredAndAWindowIsBounded) {
  ComputeTimes times;
  times.Add(0, -1);
  times.Add(0, std::numeric_limits<double>::quiet_NaN());
  times.Add(0, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(times.Take().empty());
  for (size_t i = 0; i < ComputeTimes::kMaxPerWindow + 50; ++i) times.Add(1, 1.0);
  EXPECT_EQ(times.Take()[0].steps, static_cast<int64_t>(ComputeTimes::kMaxPerWindow));
  times.Add(1, 5);
  times.Clear();
  EXPECT_TRUE(times.Take().empty());
}

}  // namespace
}  // namespace ddprun::launcher
