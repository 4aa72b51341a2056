// launcher/process/stack_collector: real tool processes (shell scripts standing in for eu-stack
// and gdb) run against a real target, their exits routed back as the agent does, and the
// deadline that kills a tool that hangs.
#include "launcher/process/stack_collector.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/captured_log.h"
#include "tests/testing/child_exit.h"
#include "tests/testing/loop_runner.h"
#include "tests/testing/test_env.h"

namespace ddprun::launcher {
namespace {

using ::ddprun::testing::CapturedLog;
using ::ddprun::testing::LoopRunner;
using ::ddprun::testing::TempDir;
using ::ddprun::testing::WaitForChild;
using std::chrono::milliseconds;
using ::testing::ElementsAre;

TEST(StackToolTest, ArgvForEachTool) {
  EXPECT_THAT((StackTool{"eu-stack", "/x/eu-stack"}.ArgvFor(42)),
              ElementsAre("/x/eu-stack", "-p", "42"));
  EXPECT_THAT((StackTool{"gdb", "/x/gdb"}.ArgvFor(42)),
              ElementsAre("/x/gdb", "-p", "42", "-batch", "-nx", "-ex", "thread apply all bt"));
}

TEST(StackToolTest, PrefersEuStackAndSkipsFilesThatAreNotExecutable) {
  TempDir first, second;
  ddprun::testing::WriteFile(first.File("eu-stack"), "not executable\n", 0644);
  ddprun::testing::WriteShellScript(first, "gdb", "exit 0");
  ddprun::testing::WriteShellScript(second, "eu-stack", "exit 0");
  const std::string path = absl::StrCat(first.path(), ":", second.path());

  std::optional<StackTool> tool = FindStackTool({{"PATH", path}});
  ASSERT_TRUE(tool.has_value());
  EXPECT_EQ(tool->name, "eu-stack");
  EXPECT_EQ(tool->path, second.File("eu-stack"));

  tool = FindStackTool({{"PATH", first.path()}});
  ASSERT_TRUE(tool.has_value());
  EXPECT_EQ(tool->name, "gdb");

  TempDir empty;
  EXPECT_FALSE(FindStackTool({{"PATH", empty.path()}}).has_value());
}

class StackCollectorTest : public ::testing::Test {
 protected:
  void SetUp() override { SetLogSink(&log_); }
  void TearDown() override {
    runner_.Stop();
    SetLogSink(nullptr);
  }

  // Reaps the collector's tools as the agent's SIGCHLD handling would, until `done` is set or
  // `timeout` passes.
  void RouteExitsUntilDone(StackCollector* collector, milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done_ && std::chrono::steady_clock::now() < deadline) {
      pid_t pid = 0;
      if (WaitForChild(-1, milliseconds(10), &pid).has_value()) {
        EXPECT_TRUE(runner_.Call([&] { return collector->HandleChildExit(pid); }));
      }
    }
  }

  CapturedLog log_;
  LoopRunner runner_;
  std::atomic<bool> done_{false};
};

TEST_F(StackCollectorTest, EachToolWritesIntoItsTargetsFileAndDoneRunsOnce) {
  TempDir dir;
  // "eu-stack -p PID": prints a frame naming the pid it was asked for.
  const std::string tool = ddprun::testing::WriteShellScript(
      dir, "eu-stack", "echo \"TID $2:\"; echo \"#0  0x1 pause_of_$2\"; echo oops >&2");
  const int a = open(dir.File("a.txt").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  const int b = open(dir.File("b.txt").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  std::atomic<int> calls{0};
  StackCollector collector(runner_.loop(), StackTool{"eu-stack", tool}, std::chrono::seconds(30));
  runner_.Call([&] {
    collector.Collect({{1111, a}, {2222, b}}, [&] {
      ++calls;
      done_ = true;
    });
  });
  RouteExitsUntilDone(&collector, milliseconds(10000));
  close(a);
  close(b);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(ddprun::testing::ReadFile(dir.File("a.txt")),
            "TID 1111:\n#0  0x1 pause_of_1111\noops\n");
  EXPECT_EQ(ddprun::testing::ReadFile(dir.File("b.txt")),
            "TID 2222:\n#0  0x1 pause_of_2222\noops\n");
  EXPECT_EQ(log_.Count("still going"), 0) << log_.text();
}

TEST_F(StackCollectorTest, ToolThatHangsIsKilledAtTheDeadline) {
  TempDir dir;
  const std::string tool =
      ddprun::testing::WriteShellScript(dir, "gdb", "echo partial; exec sleep 60");
  const int out = open(dir.File("s.txt").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  StackCollector collector(runner_.loop(), StackTool{"gdb", tool}, milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  runner_.Call([&] { collector.Collect({{3333, out}}, [&] { done_ = true; }); });
  RouteExitsUntilDone(&collector, milliseconds(10000));
  close(out);
  ASSERT_TRUE(done_);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(log_.WaitFor("1 gdb run(s) still going after 200 ms; killed", 1, absl::Seconds(5)))
      << log_.text();
  // The killed tool, whenever it is reaped, is still one of ours.
  pid_t pid = 0;
  while (WaitForChild(-1, milliseconds(10000), &pid).has_value()) {
    EXPECT_TRUE(runner_.Call([&] { return collector.HandleChildExit(pid); }));
  }
  EXPECT_EQ(errno, ECHILD) << "every tool reaped";
}

TEST_F(StackCollectorTest, WithoutAToolDoneRunsBeforeCollectReturns) {
  StackCollector collector(runner_.loop(), std::nullopt, std::chrono::seconds(1));
  bool ran_inside = false;
  runner_.Call([&] {
    collector.Collect({{1, -1}}, [&] { done_ = true; });
    ran_inside = done_;
  });
  EXPECT_TRUE(ran_inside);
  EXPECT_FALSE(collector.tool().has_value());
}

TEST_F(StackCollectorTest, ToolThatCannotStartIsLoggedAndDoneStillRuns) {
  StackCollector collector(runner_.loop(), StackTool{"eu-stack", "/nonexistent/eu-stack"},
                           std::chrono::seconds(1));
  runner_.Call([&] { collector.Collect({{1, -1}}, [&] { done_ = true; }); });
  EXPECT_TRUE(done_);
  EXPECT_TRUE(
      absl::StrContains(log_.text(), "cannot run eu-stack: cannot execute /nonexistent/eu-stack"))
      << log_.text();
}

TEST_F(StackCollectorTest, ExitOfAnotherChildIsNotOurs) {
  StackCollector collector(runner_.loop(), std::nullopt, std::chrono::seconds(1));
  EXPECT_FALSE(runner_.Call([&] { return collector.HandleChildExit(getpid()); }));
}

TEST_F(StackCollectorTest, DestructorKillsToolsStillRunning) {
  TempDir dir;
  const std::string tool = ddprun::testing::WriteShellScript(dir, "eu-stack", "exec sleep 60");
  auto collector = std::make_unique<StackCollector>(runner_.loop(), StackTool{"eu-stack", tool},
                                                    std::chrono::seconds(60));
  runner_.Call([&] { collector->Collect({{1, -1}}, [&] { done_ = true; }); });
  runner_.Call([&] { collector.reset(); });
  std::optional<int> status = WaitForChild(-1, milliseconds(10000));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFSIGNALED(*status));
  EXPECT_EQ(WTERMSIG(*status), SIGKILL);
  EXPECT_FALSE(done_);
}

}  // namespace
}  // namespace ddprun::launcher
