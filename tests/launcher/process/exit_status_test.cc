// launcher/process/exit_status: DescribeExit of the wait statuses of real processes.
#include "launcher/process/exit_status.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>

#include "gtest/gtest.h"
#include "tests/testing/child_exit.h"

namespace ddprun::launcher {
namespace {

// The wait status of a child that runs `body` (which must not return).
template <typename Body>
int WaitStatusOf(Body body) {
  const pid_t pid = fork();
  if (pid == 0) {
    const rlimit no_core{0, 0};  // a signal that dumps core leaves no file behind
    setrlimit(RLIMIT_CORE, &no_core);
    body();
    _exit(99);
  }
  std::optional<int> status = ddprun::testing::WaitForChild(pid, std::chrono::seconds(10));
  EXPECT_TRUE(status.has_value());
  return status.value_or(-1);
}

TEST(ExitStatusTest, ExitCodes) {
  EXPECT_EQ(DescribeExit(WaitStatusOf([] { _exit(0); })), "exit code 0");
  EXPECT_EQ(DescribeExit(WaitStatusOf([] { _exit(3); })), "exit code 3");
  EXPECT_EQ(DescribeExit(WaitStatusOf([] { _exit(255); })), "exit code 255");
  EXPECT_EQ(DescribeExit(WaitStatusOf([] { _exit(256 + 4); })), "exit code 4");  // 8 bits
}

TEST(ExitStatusTest, Signals) {
  EXPECT_EQ(DescribeExit(WaitStatusOf([] { raise(SIGKILL); })), "killed by signal 9");
  EXPECT_EQ(DescribeExit(WaitStatusOf([] { raise(SIGTERM); })), "killed by signal 15");
  // Signals whose default action dumps core (not SIGSEGV, which the sanitizers' runtimes catch):
  // the core flag does not change the text.
  EXPECT_EQ(DescribeExit(WaitStatusOf([] { raise(SIGABRT); })), "killed by signal 6");
  EXPECT_EQ(DescribeExit(WaitStatusOf([] { raise(SIGQUIT); })), "killed by signal 3");
}

}  // namespace
}  // namespace ddprun::launcher
