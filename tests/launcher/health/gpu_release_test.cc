// The GPU memory wait before a cold restart: nvidia-smi's list parsed, the previous workers'
// processes picked out of it (their pids and process groups), and GpuReleaseWait asking a fake
// nvidia-smi (a script that lists a held process for its first answers) on a real EventLoop.
#include "launcher/health/gpu_release.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/file_text.h"
#include "tests/launcher/health/reaping_loop.h"
#include "tests/testing/test_env.h"

namespace ddprun::launcher {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

TEST(GpuReleaseTest, ParsesTheDriversListAndSkipsWhatIsNotAPair) {
  const std::vector<GpuProcess> listed = ParseComputeApps(
      "4242, 7680\n"
      "4243, [N/A]\n"
      "No running processes found\n"
      "\n"
      "abc, 12\n"
      " 77 , 512 \n");
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[0].pid, 4242);
  EXPECT_EQ(listed[0].used_mib, 7680);
  EXPECT_EQ(listed[1].pid, 4243);
  EXPECT_EQ(listed[1].used_mib, 0);
  EXPECT_EQ(listed[2].pid, 77);
  EXPECT_EQ(DescribeHeld(listed), "pid 4242 (7.5 GiB), pid 4243 (0 MiB), pid 77 (512 MiB)");
}

TEST(GpuReleaseTest, TheWorkersProcessesAreTheirPidsAndTheirProcessGroups) {
  // 4242 was a worker (gone now: no group); 5000 is its DataLoader child, in its group; 6000
  // is another job's process.
  const std::map<pid_t, pid_t> groups = {{5000, 4242}, {6000, 6000}};
  auto group_of = [&](pid_t pid) {
    auto it = groups.find(pid);
    return it == groups.end() ? 0 : it->second;
  };
  const std::vector<GpuProcess> held =
      HeldByWorkers({{4242, 100}, {5000, 200}, {6000, 300}}, {4242, 4243}, group_of);
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].pid, 4242);
  EXPECT_EQ(held[1].pid, 5000);
}

// A fake nvidia-smi that lists `pid` with 4 GiB for its first `held_answers` answers (counted
// in DIR/asked), then nothing; `exit_code` other than 0 makes it fail instead.
std::string FakeNvidiaSmi(const testing::TempDir& dir, pid_t pid, int held_answers,
                          int exit_code = 0) {
  return testing::WriteShellScript(
      dir, "nvidia-smi",
      absl::StrCat("n=$(cat ", dir.File("asked"), " 2>/dev/null || echo 0); n=$((n+1)); echo $n > ",
                   dir.File("asked"), "\n",
                   exit_code != 0
                       ? absl::StrCat("echo 'NVIDIA-SMI has failed' >&2; exit ", exit_code, "\n")
                       : "",
                   "[ $n -le ", held_answers, " ] && echo '", pid, ", 4096'\nexit 0\n"));
}

std::optional<GpuReleaseResult> WaitForRelease(const std::string& nvidia_smi, pid_t worker,
                                               Duration timeout) {
  EventLoop loop;
  GpuReleaseOptions options;
  options.nvidia_smi = nvidia_smi;
  options.timeout = timeout;
  options.env = {{"PATH", "/usr/bin:/bin"}};
  GpuReleaseWait wait(&loop, options);
  std::optional<GpuReleaseResult> result;
  wait.Wait({worker}, [&](const GpuReleaseResult& r) {
    result = r;
    loop.Stop();
  });
  RunReaping(
      &loop, [&](pid_t pid, int status) { wait.HandleChildExit(pid, status); }, 30s);
  return result;
}

int Asked(const testing::TempDir& dir) { return std::stoi(ReadTextFile(dir.File("asked"))); }

TEST(GpuReleaseTest, WaitsUntilTheDriverNoLongerListsTheWorker) {
  testing::TempDir dir;
  auto r = WaitForRelease(FakeNvidiaSmi(dir, 4242, 3), 4242, 30s);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->released);
  EXPECT_TRUE(r->query_failed.empty());
  EXPECT_EQ(Asked(dir), 4);
  EXPECT_GE(r->waited, 3 * GpuReleaseWait::kPoll);
}

TEST(GpuReleaseTest, AnotherJobsProcessIsNotWaitedFor) {
  testing::TempDir dir;
  auto r = WaitForRelease(FakeNvidiaSmi(dir, 999999, 100), 4242, 30s);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->released);
  EXPECT_EQ(Asked(dir), 1);
}

TEST(GpuReleaseTest, GivesUpAtItsTimeoutNamingWhatIsStillHeld) {
  testing::TempDir dir;
  const auto started = std::chrono::steady_clock::now();
  auto r = WaitForRelease(FakeNvidiaSmi(dir, 4242, 1000), 4242, 700ms);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->released);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
  EXPECT_EQ(DescribeHeld(r->held), "pid 4242 (4.0 GiB)");
}

TEST(GpuReleaseTest, ABrokenNvidiaSmiIsSaidAndNotWaitedOn) {
  testing::TempDir dir;
  auto r = WaitForRelease(FakeNvidiaSmi(dir, 4242, 1000, 9), 4242, 30s);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->released);
  EXPECT_THAT(r->query_failed, HasSubstr("exit code 9"));
  EXPECT_THAT(r->query_failed, HasSubstr("NVIDIA-SMI has failed"));
  EXPECT_EQ(Asked(dir), 1);
}

}  // namespace
}  // namespace ddprun::launcher
