// HealthVerdict from exit statuses, its one-line description and the retry backoff. Pure.
#include "launcher/health/health_verdict.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

namespace ddprun::launcher {
namespace {

using namespace std::chrono_literals;
using Outcome = HealthVerdict::Outcome;

// A waitpid status as the kernel makes it.
int Exited(int code) { return (code & 0xff) << 8; }
int Signalled(int sig) { return sig & 0x7f; }

TEST(HealthVerdictTest, ExitStatusesMakeOutcomes) {
  EXPECT_EQ(VerdictFromStatus(Exited(0), 1ms).outcome, Outcome::kPassed);
  EXPECT_EQ(VerdictFromStatus(Exited(1), 1ms).outcome, Outcome::kFailed);
  EXPECT_EQ(VerdictFromStatus(Exited(127), 1ms).outcome, Outcome::kCannotRun);
  EXPECT_EQ(VerdictFromStatus(Exited(126), 1ms).outcome, Outcome::kCannotRun);
  const HealthVerdict killed = VerdictFromStatus(Signalled(9), 1ms);
  EXPECT_EQ(killed.outcome, Outcome::kFailed);
  EXPECT_EQ(killed.signal, 9);
  ASSERT_TRUE(WIFSIGNALED(Signalled(9)));
}

TEST(HealthVerdictTest, DescribeSaysHowItEndedThenItsLastLines) {
  HealthVerdict v = VerdictFromStatus(Exited(3), 20ms);
  EXPECT_EQ(v.Describe(), "exit code 3 after 0.02 s");
  v.tail = {"GPU 2: 17 uncorrectable ECC errors", "unhealthy"};
  EXPECT_EQ(v.Describe(),
            "exit code 3 after 0.02 s: GPU 2: 17 uncorrectable ECC errors | unhealthy");
  HealthVerdict slow;
  slow.outcome = Outcome::kTimedOut;
  slow.took = 1500ms;
  EXPECT_EQ(slow.Describe(), "timed out after 1.50 s (killed)");
  HealthVerdict missing = VerdictFromStatus(Exited(127), 0ms);
  missing.tail = {"sh: 1: gpu-burn: not found"};
  EXPECT_EQ(missing.Describe(),
            "cannot run it: exit code 127 after 0.00 s: sh: 1: gpu-burn: not found");
}

TEST(HealthVerdictTest, RetriesBackOffFromOneSecondToThirty) {
  std::vector<int64_t> seconds;
  for (int failures = 1; failures <= 8; ++failures) {
    seconds.push_back(
        std::chrono::duration_cast<std::chrono::seconds>(HealthRetryDelay(failures)).count());
  }
  EXPECT_EQ(seconds, (std::vector<int64_t>{1, 2, 4, 8, 16, 30, 30, 30}));
  EXPECT_EQ(HealthRetryDelay(0), 1s);
  EXPECT_EQ(HealthRetryDelay(1000), 30s);
}

}  // namespace
}  // namespace ddprun::launcher
