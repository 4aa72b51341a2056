// Issue 25: why a worker died, from the kernel's own evidence, said by the real ddprun about
// real workers: one killed by the OOM killer in a memory cgroup the test makes, one that
// segfaults in a library, one SIGKILLed from outside, and the same kill when the kernel log
// cannot be read (said, not guessed). Runs as root (the kernel log needs CAP_SYSLOG where
// kernel.dmesg_restrict=1, and cgroups are made by root).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_text.h"
#include "tests/testing/reserved_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_cgroup.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using testing::BinPath;
using ::testing::HasSubstr;
using testing::ReservedPort;
using testing::Subprocess;
using testing::TempDir;

// Python's faulthandler would catch a fault first (the kernel logs only unhandled ones).
std::string ShellWorker(const TempDir& dir, const std::string& name, const std::string& body) {
  return testing::WriteShellScript(dir, name, "unset PYTHONFAULTHANDLER\n" + body);
}

// A memory cgroup with a limit, made by the test and removed with it. No swap here, but where
// there is, the worker must not swap its way out of the limit.
std::unique_ptr<testing::TestCgroup> MemoryCgroup(const std::string& limit) {
  auto cgroup = std::make_unique<testing::TestCgroup>(
      testing::TestCgroup::Controller::kMemory, absl::StrCat("ddprun-causes-test-", getpid()));
  if (cgroup->Set("memory.limit_in_bytes", "memory.max", limit)) {
    cgroup->SetIfPresent("memory.memsw.limit_in_bytes", "memory.swap.max", limit, "0");
  }
  return cgroup;
}

std::vector<std::string> Ddprun(const std::string& worker) {
  return {BinPath("ddprun"),  "--standalone", "--nproc-per-node=1",
          "--max-restarts=0", "--no-python",  worker};
}

// ddprun (moved into a 100 MiB memory cgroup first, so that its worker is born there) with a
// worker that allocates 400 MiB. ddprun's stderr; `exit_code` -1 when it did not finish.
struct OomRun {
  std::string err;
  int exit_code = -1;
  std::string cgroup;  // the cgroup's path within its hierarchy, without the leading '/'
};
OomRun RunAHogInAMemoryCgroup(const TempDir& dir, std::map<std::string, std::string> env = {}) {
  OomRun run;
  const std::unique_ptr<testing::TestCgroup> cgroup = MemoryCgroup("100M");
  if (!cgroup->error().empty()) {
    run.err = cgroup->error();
    return run;
  }
  run.cgroup = cgroup->name();
  const std::string worker = ShellWorker(
      dir, "hog.sh", "exec python3 -c \"x = b'a' * (400 << 20); import time; time.sleep(30)\"\n");
  std::string command = absl::StrCat("echo $$ > ", cgroup->procs(), " && exec");
  for (const std::string& arg : Ddprun(worker)) absl::StrAppend(&command, " '", arg, "'");
  Subprocess p({"/bin/sh", "-c", command}, std::move(env));
  auto st = p.Wait(60s);
  run.err = p.err();
  if (st.has_value()) run.exit_code = st->exit_code;
  if (getenv("DDPRUN_TEST_SHOW_LOGS") != nullptr) std::cout << run.err;
  return run;
}

TEST(CausesTest, AWorkerKilledByTheOomKillerInAMemoryCgroupIsNamed) {
  TempDir dir;
  const OomRun r = RunAHogInAMemoryCgroup(dir);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err,
              HasSubstr("failed with signal SIGKILL (9): killed by the OOM killer: memory cgroup "
                        "limit 100.0 MiB reached (anon-rss "));
  EXPECT_THAT(r.err, HasSubstr("exit:        signal SIGKILL (9): killed by the OOM killer"));
}

// The same OOM kill where the kernel log cannot be read (an agent that is not root where
// kernel.dmesg_restrict=1): the memory cgroup's own OOM kill count names it.
TEST(CausesTest, WithoutTheKernelLogTheMemoryCgroupsCountNamesTheOomKill) {
  TempDir dir;
  const OomRun r = RunAHogInAMemoryCgroup(dir, {{"DDPRUN_KERNEL_LOG", dir.File("no-kmsg")}});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("failed with signal SIGKILL (9): killed by the OOM "
                                            "killer: its memory cgroup /",
                                            r.cgroup,
                                            " (limit 100.0 MiB) counted 1 OOM kill while it "
                                            "lived (kernel log ",
                                            dir.File("no-kmsg"), " not readable")));
}

TEST(CausesTest, ASegfaultingWorkerIsNamedWithTheLibrary) {
  TempDir dir;
  const std::string worker =
      ShellWorker(dir, "segv.sh", "exec python3 -c 'import ctypes; ctypes.string_at(0)'\n");
  Subprocess p(Ddprun(worker));
  auto st = p.Wait(60s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 1) << p.err();
  EXPECT_THAT(p.err(), HasSubstr("failed with signal SIGSEGV (11): segfault at 0 in libc.so"))
      << p.err();
}

// ddprun with one worker that records its pid and waits; the test SIGKILLs the worker as Slurm
// or an administrator would. ddprun's stderr, and the worker's pid (0: it never started).
struct Killed {
  std::string err;
  int pid = 0;
};
Killed KillTheWorkerFromOutside(const TempDir& dir, std::map<std::string, std::string> env = {}) {
  const std::string worker =
      ShellWorker(dir, "wait.sh",
                  absl::StrCat("echo $$ > ", dir.File("pid.tmp"), " && mv ", dir.File("pid.tmp"),
                               " ", dir.File("pid"), "\nexec sleep 60\n"));
  Subprocess p(Ddprun(worker), std::move(env));
  Killed killed;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (killed.pid == 0 && std::chrono::steady_clock::now() < deadline) {
    const std::string pid = ReadTextFile(dir.File("pid"));
    if (!pid.empty()) killed.pid = std::stoi(pid);
    usleep(20 * 1000);  // no event for "a file appeared" that is simpler than polling
  }
  if (killed.pid > 0) kill(killed.pid, SIGKILL);
  auto st = p.Wait(30s);
  killed.err = p.err();
  if (!st.has_value() || st->exit_code != 1) killed.pid = 0;
  return killed;
}

TEST(CausesTest, AWorkerSigkilledFromOutsideIsNamedAsSuch) {
  TempDir dir;
  const Killed killed = KillTheWorkerFromOutside(dir);
  ASSERT_GT(killed.pid, 0) << killed.err;
  EXPECT_THAT(killed.err, HasSubstr(absl::StrCat("(local rank 0, pid ", killed.pid,
                                                 ") failed with signal SIGKILL (9): sent from "
                                                 "outside ddprun (no kernel record")));
}

TEST(CausesTest, AnUnreadableKernelLogIsSaidAndNothingIsGuessed) {
  TempDir dir;
  const Killed killed = KillTheWorkerFromOutside(dir, {{"DDPRUN_KERNEL_LOG", dir.File("no-kmsg")}});
  ASSERT_GT(killed.pid, 0) << killed.err;
  EXPECT_THAT(killed.err, HasSubstr(absl::StrCat("failed with signal SIGKILL (9): cause unknown: "
                                                 "kernel log ",
                                                 dir.File("no-kmsg"), " not readable")));
  EXPECT_THAT(killed.err, ::testing::Not(HasSubstr("from outside")));
}

// Item 2, the crash-loop breaker. A worker that fails the same way at its first line (as
// pytorch issue 60910's ImportError) is started twice, not --max-restarts + 1 times; each start
// is counted in a file (not on stdout, which would be progress). `extra`: ddprun's flags.
struct Starts {
  std::string err;
  int exit_code = -1;
  int starts = 0;
};
Starts RunFailingWorker(const TempDir& dir, const std::string& before_failing,
                        std::vector<std::string> flags) {
  const std::string worker =
      ShellWorker(dir, "import_error.sh",
                  absl::StrCat("echo start >> ", dir.File("starts"), "\n", before_failing,
                               "exec python3 -c 'import ddprun_test_no_such_module'\n"));
  std::vector<std::string> argv = {BinPath("ddprun"), "--nproc-per-node=1", "--no-python"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back(worker);
  Subprocess p(argv);
  auto st = p.Wait(120s);
  Starts out;
  out.err = p.err();
  if (st.has_value()) out.exit_code = st->exit_code;
  const std::string starts = ReadTextFile(dir.File("starts"));
  out.starts = static_cast<int>(std::count(starts.begin(), starts.end(), '\n'));
  return out;
}

TEST(CrashLoopTest, TheSameFailureTwiceBeforeAnyProgressStopsTheJobWithExitFour) {
  TempDir dir;
  const Starts r = RunFailingWorker(dir, "", {"--standalone", "--max-restarts=10"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_EQ(r.starts, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("the same failure twice before any progress: not restarting"));
  EXPECT_THAT(r.err,
              HasSubstr("ModuleNotFoundError: No module named 'ddprun_test_no_such_module'"));
}

// The same through the c10d rendezvous (the server decides restarts job-wide).
TEST(CrashLoopTest, TheRendezvousServerStopsTheLoopJobWide) {
  TempDir dir;
  // A free port, released for the agent to host on (it joins whatever else listens there).
  const int port = ReservedPort().port();
  ASSERT_GT(port, 0);
  const Starts r =
      RunFailingWorker(dir, "",
                       {"--rdzv-backend=c10d", absl::StrCat("--rdzv-endpoint=127.0.0.1:", port),
                        "--rdzv-id=crashloop", "--nnodes=1", "--max-restarts=10"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_EQ(r.starts, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("the same failure twice before any progress: not restarting"));
}

// A worker that made progress (a line on stdout) before failing keeps today's behaviour: the
// budget decides.
TEST(CrashLoopTest, AFailureAfterProgressIsRestartedUntilTheBudgetIsSpent) {
  TempDir dir;
  const Starts r =
      RunFailingWorker(dir, "echo 'epoch 0 step 1'\n", {"--standalone", "--max-restarts=2"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.starts, 3) << r.err;
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("before any progress")));
}

TEST(CrashLoopTest, CrashLoopRetryRestartsUntilTheBudgetIsSpent) {
  TempDir dir;
  const Starts r =
      RunFailingWorker(dir, "", {"--standalone", "--max-restarts=2", "--crash-loop=retry"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.starts, 3) << r.err;
}

// issue 43, D7: kills from outside (an admin's kill -9, Slurm's) before any output are no crash
// loop: the job goes on restarting within its budget instead of ending with exit 4, which tells
// Slurm not to requeue it.
TEST(CrashLoopTest, KillsFromOutsideAreNotACrashLoop) {
  TempDir dir;
  // Attempts 0 and 1 wait to be killed, each under a pid file of its attempt; attempt 2 ends.
  const std::string worker =
      ShellWorker(dir, "wait.sh",
                  absl::StrCat("echo start >> ", dir.File("starts"), "\n",
                               "[ \"$TORCHELASTIC_RESTART_COUNT\" = 2 ] && exit 0\n", "echo $$ > ",
                               dir.File("pid.tmp"), " && mv ", dir.File("pid.tmp"), " ",
                               dir.File("pid-$TORCHELASTIC_RESTART_COUNT"), "\nexec sleep 60\n"));
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=1", "--max-restarts=5",
                "--no-python", worker});
  for (int attempt = 0; attempt < 2; ++attempt) {
    const std::string pid_file = dir.File(absl::StrCat("pid-", attempt));
    ASSERT_TRUE(testing::WaitUntil([&] { return !ReadTextFile(pid_file).empty(); }, 30s))
        << p.err();
    ASSERT_EQ(kill(std::stoi(ReadTextFile(pid_file)), SIGKILL), 0);
  }
  auto st = p.Wait(60s);
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 0) << p.err();
  const std::string starts = ReadTextFile(dir.File("starts"));
  EXPECT_EQ(std::count(starts.begin(), starts.end(), '\n'), 3) << p.err();
  EXPECT_THAT(p.err(), HasSubstr("sent from outside ddprun"));
  EXPECT_THAT(p.err(), ::testing::Not(HasSubstr("before any progress")));
}

// issue 43, S5: DDPRUN_KERNEL_LOG naming an endless source of no records (/dev/zero) hung the
// agent at 100 % CPU before its worker started. Now it is read a bounded while, dropped with a
// warning naming it, and the job runs; a worker's signal death says why there is no evidence.
TEST(CausesTest, AKernelLogThatIsNotOneIsDroppedAndTheJobRuns) {
  TempDir dir;
  const Killed killed = KillTheWorkerFromOutside(dir, {{"DDPRUN_KERNEL_LOG", "/dev/zero"}});
  ASSERT_GT(killed.pid, 0) << killed.err;
  EXPECT_THAT(killed.err, HasSubstr("kernel log /dev/zero is not a kernel log"));
  EXPECT_THAT(killed.err, HasSubstr("failed with signal SIGKILL (9): cause unknown: kernel log "
                                    "/dev/zero is not a kernel log"));
}

}  // namespace
}  // namespace ddprun
