// StopSignal's watcher: a stop signal that arrives in a step that never ends (blocked in a
// collective with a rank that is gone) ends the process after the grace with 128 + the signal;
// between steps, or in a step that ends in time, the signal stays a request the loop honours.
// Each case runs in a child process (a death test): the watcher may end the process.
#include "trainer/io/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace ddprun::trainer {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kLeftAlone = 7;  // the child's own exit: the watcher did not end it

// Waits (bounded) until the watcher took the signal.
bool Received(const StopSignal& s) {
  const auto deadline = Clock::now() + 5s;
  while (s.received() == 0 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  return s.received() == SIGTERM;
}

class StopSignalTest : public ::testing::Test {
 protected:
  // "fast" (fork, no exec): the StopSignal and its thread are made in the child, so the parent
  // forks with its one thread; and qemu-user (make test-aarch64) cannot exec the test again.
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "fast"); }
};

TEST_F(StopSignalTest, ASignalInAStepThatNeverEndsEndsTheProcessAfterTheGrace) {
  const auto began = Clock::now();
  EXPECT_EXIT(
      {
        StopSignal s;
        s.StepBegan();
        kill(getpid(), SIGTERM);
        std::this_thread::sleep_for(30s);  // the collective that never returns
        _exit(kLeftAlone);
      },
      ::testing::ExitedWithCode(128 + SIGTERM), "signal 15 arrived in a step that has not ended");
  EXPECT_LT(Clock::now() - began, 10s) << "the grace is 1 s; the child waited for its own end";
}

TEST_F(StopSignalTest, ASignalBetweenStepsIsOnlyARequest) {
  EXPECT_EXIT(
      {
        StopSignal s;
        s.StepBegan();
        s.StepEnded();
        kill(getpid(), SIGTERM);
        if (!Received(s)) _exit(1);
        // Longer than the grace: the time the watcher would have ended the process in.
        std::this_thread::sleep_for(kMinStuckGrace + 500ms);
        s.StepBegan();  // the loop's stop-vote step, begun after the signal
        std::this_thread::sleep_for(kMinStuckGrace + 500ms);
        _exit(kLeftAlone);
      },
      ::testing::ExitedWithCode(kLeftAlone), "");
}

TEST_F(StopSignalTest, AStepThatEndsWithinTheGraceIsLeftToFinish) {
  EXPECT_EXIT(
      {
        StopSignal s;
        s.StepBegan();
        kill(getpid(), SIGTERM);
        if (!Received(s)) _exit(1);
        std::this_thread::sleep_for(300ms);  // a slow collective of a live world
        s.StepEnded();
        std::this_thread::sleep_for(kMinStuckGrace + 500ms);
        _exit(kLeftAlone);
      },
      ::testing::ExitedWithCode(kLeftAlone), "");
}

TEST_F(StopSignalTest, TheGraceIsSeveralOfTheLongestStepsAndAtLeastASecond) {
  EXPECT_EXIT(
      {
        StopSignal s;
        if (s.StuckGrace() != kMinStuckGrace) _exit(1);
        s.StepBegan();
        std::this_thread::sleep_for(400ms);
        s.StepEnded();
        _exit(s.StuckGrace() >= kStepsOfGrace * 400ms ? kLeftAlone : 2);
      },
      ::testing::ExitedWithCode(kLeftAlone), "");
}

}  // namespace
}  // namespace ddprun::trainer
