// launcher/process/orphan_guard: a real guard process told of real process groups. The test
// plays the agent: destroying the guard closes its pipe, as the agent's death would.
#include "launcher/process/orphan_guard.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>

#include "gtest/gtest.h"
#include "tests/testing/child_exit.h"

namespace ddprun::launcher {
namespace {

using ::ddprun::testing::WaitForChild;
using std::chrono::milliseconds;

constexpr milliseconds kExitTimeout{10000};

// A sleeping child in a process group of its own (its pid).
pid_t SleeperInOwnGroup() {
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);
  return pid;
}

bool KilledBySigkill(std::optional<int> status) {
  return status.has_value() && WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL;
}

TEST(OrphanGuardTest, KillsTheGroupsStillListedWhenTheAgentGoes) {
  const pid_t listed = SleeperInOwnGroup();
  const pid_t removed = SleeperInOwnGroup();
  const pid_t never_added = SleeperInOwnGroup();
  {
    OrphanGuard guard;
    ASSERT_TRUE(guard.Start().ok());
    EXPECT_GT(guard.pid(), 0);
    guard.Add(listed);
    guard.Add(removed);
    guard.Remove(removed);
  }  // the pipe closes; the destructor waits for the guard, which has sent its kills by then
  EXPECT_TRUE(KilledBySigkill(WaitForChild(listed, kExitTimeout)));
  EXPECT_FALSE(WaitForChild(removed, milliseconds(0)).has_value()) << "a removed group was killed";
  EXPECT_FALSE(WaitForChild(never_added, milliseconds(0)).has_value());
  for (pid_t pid : {removed, never_added}) {
    kill(pid, SIGKILL);
    EXPECT_TRUE(WaitForChild(pid, kExitTimeout).has_value());
  }
}

TEST(OrphanGuardTest, KillsTheWholeGroupNotOnlyItsLeader) {
  const pid_t leader = SleeperInOwnGroup();
  const pid_t member = fork();
  if (member == 0) {
    setpgid(0, leader);
    execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(member, leader);  // whichever side runs first
  ASSERT_EQ(getpgid(member), leader);
  {
    OrphanGuard guard;
    ASSERT_TRUE(guard.Start().ok());
    guard.Add(leader);
  }
  EXPECT_TRUE(KilledBySigkill(WaitForChild(leader, kExitTimeout)));
  EXPECT_TRUE(KilledBySigkill(WaitForChild(member, kExitTimeout)));
}

TEST(OrphanGuardTest, IgnoresTheAgentsSignalsThatItKeepsBlocked) {
  // Started with SIGTERM blocked (as the agent does), the guard keeps it blocked: a SIGTERM to
  // the agent's group must not end the guard before the agent has cleaned up.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &old), 0);
  auto guard = std::make_unique<OrphanGuard>();
  ASSERT_TRUE(guard->Start().ok());
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  const pid_t leader = SleeperInOwnGroup();
  guard->Add(leader);
  // A guard that SIGTERM ended would have killed nothing by the time it is reaped.
  ASSERT_EQ(kill(guard->pid(), SIGTERM), 0);
  guard.reset();
  EXPECT_TRUE(KilledBySigkill(WaitForChild(leader, kExitTimeout)));
}

TEST(OrphanGuardTest, NotStartedGuardIgnoresAddAndRemove) {
  OrphanGuard guard;
  guard.Add(12345);
  guard.Remove(12345);
  EXPECT_EQ(guard.pid(), -1);
}

}  // namespace
}  // namespace ddprun::launcher
