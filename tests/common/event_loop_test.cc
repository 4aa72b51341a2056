// EventLoop: timers fire in deadline order and not when cancelled, Post() from other threads
// runs on the loop's thread, descriptors wake it, Stop() ends Run(). Real epoll, real threads.
#include "common/event_loop.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ddprun {
namespace {

using std::chrono::milliseconds;

TEST(EventLoopTest, TimersFireInDeadlineOrderAndCancelledOnesNever) {
  EventLoop loop;
  std::vector<int> order;
  loop.AddTimerAfter(milliseconds(30), [&] { order.push_back(3); });
  loop.AddTimerAfter(milliseconds(10), [&] { order.push_back(1); });
  const EventLoop::TimerId cancelled =
      loop.AddTimerAfter(milliseconds(20), [&] { order.push_back(2); });
  loop.CancelTimer(cancelled);
  loop.AddTimerAfter(milliseconds(40), [&] { loop.Stop(); });
  loop.Run();
  EXPECT_EQ(order, (std::vector<int>{1, 3}));
}

TEST(EventLoopTest, PostFromOtherThreadsRunsOnTheLoopThreadInOrder) {
  EventLoop loop;
  const std::thread::id loop_thread = std::this_thread::get_id();
  std::vector<int> seen;
  std::atomic<bool> all_on_loop_thread{true};
  std::thread poster([&] {
    for (int i = 0; i < 100; ++i) {
      loop.Post([&, i] {
        if (std::this_thread::get_id() != loop_thread) all_on_loop_thread = false;
        seen.push_back(i);
        if (i == 99) loop.Stop();
      });
    }
  });
  loop.Run();
  poster.join();
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[i], i);
  EXPECT_TRUE(all_on_loop_thread);
}

TEST(EventLoopTest, ReadableDescriptorCallsItsCallbackUntilRemoved) {
  EventLoop loop;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::string got;
  loop.AddFd(fds[0], EPOLLIN, [&](uint32_t) {
    char buf[16];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n > 0) got.append(buf, n);
    if (got == "hello") {
      loop.RemoveFd(fds[0]);
      loop.Stop();
    }
  });
  std::thread writer([&] { ASSERT_EQ(write(fds[1], "hello", 5), 5); });
  // A deadline, so a loop that never wakes fails the test instead of hanging it.
  loop.AddTimerAfter(std::chrono::seconds(10), [&] { loop.Stop(); });
  loop.Run();
  writer.join();
  EXPECT_EQ(got, "hello");
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace ddprun
