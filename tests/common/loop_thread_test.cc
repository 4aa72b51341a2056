#include "common/loop_thread.h"

#include <atomic>
#include <chrono>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun {
namespace {

using std::chrono::milliseconds;

TEST(LoopThreadTest, RunsPostedTasksInOrderOnItsThread) {
  LoopThread loop;
  std::vector<int> order;
  absl::Notification done;
  bool on_loop = true;
  for (int i = 0; i < 100; ++i) {
    loop.Post([&, i] {
      on_loop = on_loop && loop.InLoopThread();
      order.push_back(i);
      if (i == 99) done.Notify();
    });
  }
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(on_loop);
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_FALSE(loop.InLoopThread());
}

TEST(LoopThreadTest, TimersFireInDeadlineOrderAndNotEarly) {
  LoopThread loop;
  std::vector<int> fired;
  absl::Notification done;
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration first_at{};
  loop.PostAt(start + milliseconds(80), [&] {
    fired.push_back(2);
    done.Notify();
  });
  loop.PostAt(start + milliseconds(40), [&] {
    first_at = std::chrono::steady_clock::now() - start;
    fired.push_back(1);
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_THAT(fired, ::testing::ElementsAre(1, 2));
  EXPECT_GE(first_at, milliseconds(40));
}

TEST(LoopThreadTest, CancelledTimerNeverRuns) {
  LoopThread loop;
  std::atomic<bool> ran{false};
  absl::Notification later;
  const auto now = std::chrono::steady_clock::now();
  LoopThread::TimerId id = loop.PostAt(now + milliseconds(20), [&] { ran = true; });
  loop.Cancel(id);
  loop.PostAt(now + milliseconds(60), [&] { later.Notify(); });
  ASSERT_TRUE(later.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(ran);
  loop.Cancel(id);  // again: a no-op
}

TEST(LoopThreadTest, BusyLoopStillRunsDueTimers) {
  LoopThread loop;
  std::atomic<bool> stop_spinning{false};
  // A task that keeps re-posting itself: the queue is never empty.
  std::function<void()> spin = [&] {
    if (!stop_spinning) loop.Post(spin);
  };
  loop.Post(spin);
  absl::Notification fired;
  loop.PostAt(std::chrono::steady_clock::now() + milliseconds(20), [&] { fired.Notify(); });
  EXPECT_TRUE(fired.WaitForNotificationWithTimeout(absl::Seconds(10)));
  stop_spinning = true;
  loop.Stop();  // while `spin` and `stop_spinning`, which queued tasks use, still exist
}

TEST(LoopThreadTest, StopRunsWhatWasPostedAndDropsLaterPosts) {
  std::atomic<int> ran{0};
  LoopThread loop;
  for (int i = 0; i < 10; ++i) loop.Post([&] { ++ran; });
  loop.Stop();
  EXPECT_EQ(ran, 10);
  loop.Post([&] { ++ran; });
  loop.Stop();  // idempotent
  EXPECT_EQ(ran, 10);
}

}  // namespace
}  // namespace ddprun
