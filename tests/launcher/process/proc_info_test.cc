// launcher/process/proc_info: what /proc says about real processes in known states (running,
// stopped, zombie, gone), including a command name that contains ") " and spaces.
#include "launcher/process/proc_info.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/child_exit.h"

namespace ddprun::launcher {
namespace {

using ::ddprun::testing::WaitForChild;
using std::chrono::milliseconds;

// A child that names itself `name` (PR_SET_NAME, as a thread name or a program name would be)
// and stops itself; returns once it has stopped.
pid_t StoppedChildNamed(const char* name) {
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_NAME, name);
    raise(SIGSTOP);
    _exit(0);
  }
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, WUNTRACED), pid);
  EXPECT_TRUE(WIFSTOPPED(status));
  return pid;
}

void KillAndReap(pid_t pid) {
  kill(pid, SIGKILL);
  EXPECT_TRUE(WaitForChild(pid, milliseconds(10000)).has_value());
}

TEST(ProcInfoTest, ReadsStateParentAndGroupOfAStoppedChild) {
  const pid_t pid = StoppedChildNamed("plain");
  EXPECT_EQ(ProcessState(pid), 'T');
  EXPECT_EQ(ParentOf(pid), getpid());
  EXPECT_EQ(ProcessGroupOf(pid), getpgrp());
  KillAndReap(pid);
}

TEST(ProcInfoTest, CommandNameWithParenthesesAndSpacesDoesNotShiftTheFields) {
  // /proc/PID/stat is "PID (COMM) STATE PPID PGRP ...": a name holding ") R 1 1" would read as
  // state R, parent 1, group 1 to a parser that stops at the first ')'.
  const pid_t pid = StoppedChildNamed("x) R 1 1 (y");
  EXPECT_EQ(ProcessState(pid), 'T');
  EXPECT_EQ(ParentOf(pid), getpid());
  EXPECT_EQ(ProcessGroupOf(pid), getpgrp());
  KillAndReap(pid);
}

TEST(ProcInfoTest, ExitedUnreapedChildIsAZombie) {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);
  EXPECT_EQ(ProcessState(pid), 'Z');
  ASSERT_TRUE(WaitForChild(pid, milliseconds(10000)).has_value());
}

TEST(ProcInfoTest, GoneProcessReadsAsUnknown) {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  ASSERT_TRUE(WaitForChild(pid, milliseconds(10000)).has_value());
  EXPECT_EQ(ProcessState(pid), '?');
  EXPECT_EQ(ProcessGroupOf(pid), 0);
  EXPECT_EQ(ParentOf(pid), 0);
  EXPECT_TRUE(ThreadsOf(pid).empty());
  EXPECT_EQ(KernelSideOf(pid), "== kernel side ==\n");
  EXPECT_EQ(ProcessState(-1), '?');
  EXPECT_EQ(ProcessGroupOf(0), 0);
}

TEST(ProcInfoTest, ThreadsOfListsEveryThread) {
  std::atomic<pid_t> tid{0};
  std::atomic<bool> done{false};
  std::thread extra([&] {
    tid = gettid();
    while (!done) std::this_thread::yield();
  });
  while (tid == 0) std::this_thread::yield();
  const std::vector<pid_t> threads = ThreadsOf(getpid());
  done = true;
  extra.join();
  EXPECT_NE(std::find(threads.begin(), threads.end(), getpid()), threads.end());
  EXPECT_NE(std::find(threads.begin(), threads.end(), tid.load()), threads.end());
}

TEST(ProcInfoTest, KernelSideNamesEveryThreadWithItsState) {
  const pid_t pid = StoppedChildNamed("kside");
  const std::string text = KernelSideOf(pid);
  EXPECT_TRUE(absl::StartsWith(text, "== kernel side ==\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, absl::StrCat("TID ", pid, ": state T, wchan "))) << text;
  KillAndReap(pid);
}

}  // namespace
}  // namespace ddprun::launcher
