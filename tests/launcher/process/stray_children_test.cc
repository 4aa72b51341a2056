// launcher/process/stray_children: children of this process that are not "ours" are killed with
// their groups; ours are left alone; a detached grandchild re-parented to us (we are a subreaper,
// as ddprun is) is found and killed in a later round.
#include "launcher/process/stray_children.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/process/proc_info.h"
#include "tests/testing/child_exit.h"

namespace ddprun::launcher {
namespace {

using ::ddprun::testing::WaitForChild;
using std::chrono::milliseconds;
using ::testing::Contains;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

// A sleeping child; in process group `pgid` when given (0: its own), set on both sides of the
// fork so that it holds before either runs on.
pid_t Sleeper(pid_t pgid = -1) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (pgid >= 0) setpgid(0, pgid);
    execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  if (pgid >= 0) setpgid(pid, pgid == 0 ? pid : pgid);
  return pid;
}

class StrayChildrenTest : public ::testing::Test {
 protected:
  // A subreaper, as ddprun is; qemu-user refuses PR_SET_CHILD_SUBREAPER (make test-aarch64).
  void SetUp() override { subreaper_ = prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }
  void TearDown() override {
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    for (pid_t pid : ChildrenOfThisProcess()) kill(pid, SIGKILL);
    while (WaitForChild(-1, milliseconds(1000)).has_value()) {
    }
  }

  bool subreaper_ = false;
};

TEST_F(StrayChildrenTest, ChildrenOfThisProcessListsEveryChild) {
  const pid_t a = Sleeper();
  const pid_t b = Sleeper();
  EXPECT_THAT(ChildrenOfThisProcess(), UnorderedElementsAre(a, b));
}

TEST_F(StrayChildrenTest, KillsStraysAndTheirGroupsButNotOurs) {
  const pid_t ours = Sleeper();
  const pid_t stray = Sleeper(0);
  const pid_t stray_group_member = Sleeper(stray);
  ASSERT_EQ(getpgid(stray_group_member), stray);

  const std::vector<pid_t> killed = KillStrayChildren({ours});
  EXPECT_THAT(killed, UnorderedElementsAre(stray, stray_group_member));
  EXPECT_THAT(ChildrenOfThisProcess(), UnorderedElementsAre(ours));
  EXPECT_FALSE(ddprun::testing::ExitedOrGone(ours));
  EXPECT_EQ(ProcessState(stray), '?') << "killed and reaped";
}

TEST_F(StrayChildrenTest, DetachedGrandchildReparentedHereIsKilledToo) {
  if (!subreaper_) GTEST_SKIP() << "PR_SET_CHILD_SUBREAPER refused: the orphan would go to init";
  // A worker-like child double-forks a daemon into its own session and exits: the daemon is
  // re-parented to this subreaper, outside every group we know.
  const auto [parent, daemon] = ddprun::testing::ForkMiddle([] {
    const pid_t pid = fork();
    if (pid == 0) {
      setsid();
      execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
      _exit(127);
    }
    return pid;
  });
  ASSERT_GT(daemon, 0);
  ASSERT_TRUE(WaitForChild(parent, milliseconds(10000)).has_value());
  ASSERT_EQ(ParentOf(daemon), getpid());

  EXPECT_THAT(KillStrayChildren({}), Contains(daemon));
  EXPECT_THAT(ChildrenOfThisProcess(), Not(Contains(daemon)));
}

TEST_F(StrayChildrenTest, NothingToKillReturnsAtOnce) {
  const pid_t ours = Sleeper();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(KillStrayChildren({ours}).empty());
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(500));
}

}  // namespace
}  // namespace ddprun::launcher
