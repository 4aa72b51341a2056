// HealthCheck with real shells on a real EventLoop: a pass, a failure with its last lines, a
// check that prints tens of megabytes, one that hangs (killed at its timeout with what it
// started) and one the shell cannot find. Children are reaped as the agent does (waitpid(-1)
// routed to HandleChildExit), here on a short timer instead of SIGCHLD.
#include "launcher/health/health_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/file_text.h"
#include "tests/launcher/health/reaping_loop.h"
#include "tests/testing/test_env.h"

namespace ddprun::launcher {
namespace {

using namespace std::chrono_literals;
using Outcome = HealthVerdict::Outcome;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Runs `command` once and returns its verdict (nullopt: no verdict within `deadline`).
std::optional<HealthVerdict> RunCheck(const std::string& command, Duration timeout = 10s,
                                      Duration deadline = 30s) {
  EventLoop loop;
  HealthCheckOptions options;
  options.command = command;
  options.timeout = timeout;
  options.env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"}};
  HealthCheck check(&loop, options);
  std::optional<HealthVerdict> verdict;
  EXPECT_TRUE(check.Run([&](const HealthVerdict& v) {
    verdict = v;
    loop.Stop();
  }));
  EXPECT_FALSE(check.Run([](const HealthVerdict&) {}));  // one at a time
  RunReaping(
      &loop, [&](pid_t pid, int status) { check.HandleChildExit(pid, status); }, deadline);
  return verdict;
}

TEST(HealthCheckTest, ACommandThatExitsZeroPasses) {
  auto v = RunCheck("true");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->outcome, Outcome::kPassed);
  EXPECT_TRUE(v->passed());
}

TEST(HealthCheckTest, AFailureKeepsItsExitCodeAndLastLinesOfStdoutAndStderr) {
  auto v = RunCheck("seq 1 20; echo 'GPU 2: 17 uncorrectable ECC errors' >&2; exit 3");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->outcome, Outcome::kFailed);
  EXPECT_EQ(v->exit_code, 3);
  EXPECT_THAT(v->tail, ElementsAre("17", "18", "19", "20", "GPU 2: 17 uncorrectable ECC errors"));
}

TEST(HealthCheckTest, MegabytesOfOutputCostOnlyTheirLastLinesCut) {
  // 40 MB on one line, then a last line: the tail holds two lines, the long one cut.
  auto v = RunCheck("head -c 40000000 /dev/zero | tr '\\0' x; echo; echo done; exit 1");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->outcome, Outcome::kFailed);
  ASSERT_FALSE(v->tail.empty());
  EXPECT_EQ(v->tail.back(), "done");
  for (const std::string& line : v->tail) {
    EXPECT_LE(line.size(), HealthVerdict::kMaxLineBytes + 3);
  }
  EXPECT_EQ(v->tail.front(), std::string(HealthVerdict::kMaxLineBytes, 'x') + "...");
}

TEST(HealthCheckTest, AHangingCheckIsKilledAtItsTimeoutWithWhatItStarted) {
  testing::TempDir dir;
  const std::string pid_file = dir.File("child");
  const auto started = std::chrono::steady_clock::now();
  auto v =
      RunCheck(absl::StrCat("sleep 300 & echo $! > ", pid_file, "; echo probing; wait"), 300ms);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->outcome, Outcome::kTimedOut);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
  EXPECT_THAT(v->Describe(), HasSubstr("timed out after 0."));
  EXPECT_THAT(v->tail, ElementsAre("probing"));
  // The background sleep was in the check's process group: gone (or a zombie of init's).
  const int child = std::stoi(ReadTextFile(pid_file));
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    const std::string stat = ReadTextFile(absl::StrCat("/proc/", child, "/stat"));
    gone = stat.empty() || stat.find(") Z ") != std::string::npos;
    if (!gone) usleep(10 * 1000);
  }
  EXPECT_TRUE(gone) << "pid " << child << " outlived the check";
}

TEST(HealthCheckTest, ACommandTheShellCannotFindCannotRun) {
  auto v = RunCheck("ddprun-test-no-such-health-check --all");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->outcome, Outcome::kCannotRun);
  EXPECT_EQ(v->exit_code, 127);
  ASSERT_EQ(v->tail.size(), 1u);
  EXPECT_THAT(v->tail[0], HasSubstr("not found"));
}

}  // namespace
}  // namespace ddprun::launcher
