// launcher/preload/spare_pool: real spares (a native stand-in program, fake_native_spare.cc, and
// shell scripts standing in for a Python interpreter's probe) on a real EventLoop, their exits
// routed back by the test as the agent's SIGCHLD handling does.
#include "launcher/preload/spare_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "launcher/process/proc_info.h"
#include "tests/testing/captured_log.h"
#include "tests/testing/child_exit.h"
#include "tests/testing/loop_runner.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun::launcher {
namespace {

using ::ddprun::testing::CapturedLog;
using ::ddprun::testing::LoopRunner;
using ::ddprun::testing::ReadUntilEof;
using ::ddprun::testing::TempDir;
using ::ddprun::testing::WaitForChild;
using ::ddprun::testing::WaitUntil;
using std::chrono::milliseconds;

constexpr milliseconds kTimeout{10000};

SpawnRequest NativeSpare(const std::string& mode) {
  SpawnRequest r;
  // fake_native_spare, after the emulator in a cross build (tests/launcher/preload/CMakeLists.txt).
  r.argv = absl::StrSplit(FAKE_NATIVE_SPARE, '|');
  r.program = r.argv[0];
  r.argv.push_back("--train");
  r.env = {{"PATH", "/usr/bin:/bin"}, {"FAKE_SPARE", mode}};
  return r;
}

class SparePoolTest : public ::testing::Test {
 protected:
  void SetUp() override { SetLogSink(&log_); }
  void TearDown() override {
    runner_.Call([this] { pool_.reset(); });
    runner_.Stop();
    SetLogSink(nullptr);
    while (WaitForChild(-1, milliseconds(0)).has_value()) {
    }
  }

  void MakePool(SpareHook hook, std::vector<std::string> modules = {}) {
    pool_ = std::make_unique<SparePool>(runner_.loop(), nullptr, hook, std::move(modules));
  }
  absl::Status Start(std::vector<SpawnRequest> templates) {
    return runner_.Call([&] { return pool_->Start(std::move(templates)); });
  }
  pid_t SparePid(int lr) {
    return runner_.Call([&] { return pool_->SparePid(lr); });
  }
  bool SpareReady(int lr) {
    return runner_.Call([&] { return pool_->SpareReady(lr); });
  }
  bool Active() {
    return runner_.Call([&] { return pool_->active(); });
  }
  // Waits for local rank `lr`'s spare other than `not_this`; -1 when none comes.
  pid_t WaitForSpare(int lr, pid_t not_this = -1) {
    pid_t pid = -1;
    WaitUntil(
        [&] {
          pid = SparePid(lr);
          return pid > 0 && pid != not_this;
        },
        kTimeout);
    return pid > 0 && pid != not_this ? pid : -1;
  }
  // A native pool whose one spare (local rank 0) has said "ready"; its pid, -1 when it did not.
  pid_t StartReadySpare() {
    MakePool(SpareHook::kNativeProgram);
    if (!Start({NativeSpare("ready")}).ok()) return -1;
    const pid_t spare = WaitForSpare(0);
    return spare > 0 && WaitUntil([&] { return SpareReady(0); }, kTimeout) ? spare : -1;
  }
  // Reaps `pid` and hands its exit to the pool; what HandleChildExit returned.
  bool Reap(pid_t pid, int* wait_status = nullptr) {
    std::optional<int> status = WaitForChild(pid, kTimeout);
    EXPECT_TRUE(status.has_value()) << "pid " << pid << " did not exit";
    if (wait_status != nullptr) *wait_status = status.value_or(0);
    return runner_.Call([&] { return pool_->HandleChildExit(pid, status.value_or(0)); });
  }

  CapturedLog log_;
  LoopRunner runner_;
  std::unique_ptr<SparePool> pool_;
};

TEST_F(SparePoolTest, HandsTheStartToTheReadySpareWithItsEnvironmentAndOutput) {
  const pid_t spare = StartReadySpare();
  ASSERT_GT(spare, 0) << log_.text();
  EXPECT_TRUE(log_.WaitFor("preload: local rank 0 spare (pid ", 1, absl::Seconds(5)));
  EXPECT_EQ(ProcessGroupOf(spare), spare) << "a spare is its own process group";

  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  SpawnRequest start = NativeSpare("ready");
  start.env["MARK"] = "handed-over";
  start.env["EXIT_CODE"] = "5";
  start.stdout_fd = out[1];
  start.stderr_fd = out[1];
  absl::StatusOr<pid_t> worker = runner_.Call([&] { return pool_->Launch(0, start); });
  close(out[1]);
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(*worker, spare) << "the spare became the worker";
  EXPECT_EQ(runner_.Call([&] { return pool_->handed_over(); }), 1);
  EXPECT_EQ(ReadUntilEof(out[0]), "worker MARK=handed-over\n");
  close(out[0]);
  int status = 0;
  EXPECT_FALSE(Reap(spare, &status)) << "a handed-over spare is the worker's, not the pool's";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 5);

  // The next spare waits for the workers' first sign of life.
  EXPECT_EQ(SparePid(0), -1);
  runner_.Call([&] { pool_->WorkersSettled(); });
  const pid_t next = WaitForSpare(0, spare);
  EXPECT_GT(next, 0);
}

// Issue 40: a spare that ends without reading the start handed to it never began that start;
// the receipt says so once it has exited, and lets go of the start's output descriptors.
TEST_F(SparePoolTest, ReceiptTellsAStartTheSpareNeverReadFromOneItTook) {
  for (const std::string mode : {"unread", "ready"}) {
    SCOPED_TRACE(mode);
    if (pool_) runner_.Call([&] { pool_.reset(); });
    MakePool(SpareHook::kNativeProgram);
    ASSERT_TRUE(Start({NativeSpare(mode)}).ok());
    const pid_t spare = WaitForSpare(0);
    ASSERT_GT(spare, 0);
    ASSERT_TRUE(WaitUntil([&] { return SpareReady(0); }, kTimeout)) << log_.text();
    int out[2];
    ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
    SpawnRequest start = NativeSpare(mode);
    start.stdout_fd = start.stderr_fd = out[1];
    HandOverReceipt receipt;
    absl::StatusOr<pid_t> worker = runner_.Call([&] { return pool_->Launch(0, start, &receipt); });
    close(out[1]);
    ASSERT_TRUE(worker.ok()) << worker.status();
    ASSERT_EQ(*worker, spare);
    int status = 0;
    EXPECT_FALSE(Reap(spare, &status));
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_EQ(receipt.Settle(), mode == "unread" ? HandOver::kUnread : HandOver::kTaken);
    EXPECT_EQ(receipt.Settle(), HandOver::kNone) << "settled once";
    EXPECT_EQ(ReadUntilEof(out[0]), mode == "unread" ? "" : "worker MARK=(unset)\n");
    close(out[0]);
  }
  HandOverReceipt cold;
  absl::StatusOr<pid_t> other = runner_.Call([&] {
    SpawnRequest r = NativeSpare("exit:0");
    r.argv.push_back("--other-flag");
    return pool_->Launch(0, r, &cold);
  });
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(Reap(*other));
  EXPECT_EQ(cold.Settle(), HandOver::kNone) << "a cold start";
}

TEST_F(SparePoolTest, DifferentCommandStartsColdAndKeepsTheSpare) {
  MakePool(SpareHook::kNativeProgram);
  ASSERT_TRUE(Start({NativeSpare("ready")}).ok());
  const pid_t spare = WaitForSpare(0);
  ASSERT_GT(spare, 0);
  SpawnRequest other = NativeSpare("exit:0");
  other.argv.push_back("--other-flag");
  absl::StatusOr<pid_t> cold = runner_.Call([&] { return pool_->Launch(0, other); });
  ASSERT_TRUE(cold.ok()) << cold.status();
  EXPECT_NE(*cold, spare);
  EXPECT_EQ(SparePid(0), spare);
  EXPECT_EQ(runner_.Call([&] { return pool_->handed_over(); }), 0);
  EXPECT_FALSE(Reap(*cold));
}

TEST_F(SparePoolTest, LocalRankWithoutASpareStartsCold) {
  MakePool(SpareHook::kNativeProgram);
  ASSERT_TRUE(Start({NativeSpare("ready")}).ok());
  ASSERT_GT(WaitForSpare(0), 0);
  for (int lr : {-1, 1, 7}) {
    absl::StatusOr<pid_t> cold =
        runner_.Call([&] { return pool_->Launch(lr, NativeSpare("exit:0")); });
    ASSERT_TRUE(cold.ok()) << cold.status();
    EXPECT_FALSE(Reap(*cold));
  }
  EXPECT_EQ(runner_.Call([&] { return pool_->handed_over(); }), 0);
  EXPECT_EQ(SparePid(-1), -1);
  EXPECT_EQ(SparePid(1), -1);
  EXPECT_FALSE(SpareReady(1));
}

TEST_F(SparePoolTest, SpareKilledBySignalIsDescribedAndReplaced) {
  const pid_t spare = StartReadySpare();
  ASSERT_GT(spare, 0) << log_.text();
  ASSERT_EQ(kill(spare, SIGKILL), 0);
  EXPECT_TRUE(Reap(spare));
  EXPECT_TRUE(absl::StrContains(log_.text(),
                                absl::StrCat("preload: the spare of local rank 0 (pid ", spare,
                                             ") ended (killed by signal 9); starting another")))
      << log_.text();
  EXPECT_GT(WaitForSpare(0, spare), 0);
  EXPECT_TRUE(Active());
}

TEST_F(SparePoolTest, SpareThatDiedUnreapedIsNotHandedTheStart) {
  // The spare dies just before a start, its SIGCHLD not yet handled: Launch must see that it
  // is gone and start the worker cold rather than hand a start to a corpse.
  const pid_t spare = StartReadySpare();
  ASSERT_GT(spare, 0) << log_.text();
  ASSERT_EQ(kill(spare, SIGKILL), 0);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(spare), &info, WEXITED | WNOWAIT), 0);
  absl::StatusOr<pid_t> worker =
      runner_.Call([&] { return pool_->Launch(0, NativeSpare("exit:0")); });
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_NE(*worker, spare);
  EXPECT_EQ(runner_.Call([&] { return pool_->handed_over(); }), 0);
  EXPECT_TRUE(
      absl::StrContains(log_.text(), absl::StrCat("(pid ", spare, ") ended (killed by signal 9)")))
      << log_.text();
  EXPECT_EQ(ProcessState(spare), '?') << "reaped by Launch";
  EXPECT_FALSE(Reap(*worker));
}

TEST_F(SparePoolTest, ThreeEarlyDeathsInARowTurnPreloadingOff) {
  MakePool(SpareHook::kNativeProgram);
  ASSERT_TRUE(Start({NativeSpare("exit:7")}).ok());
  pid_t previous = -1;
  for (int death = 1; death <= 3; ++death) {
    const pid_t spare = WaitForSpare(0, previous);
    ASSERT_GT(spare, 0) << "death " << death;
    EXPECT_TRUE(Reap(spare));
    previous = spare;
  }
  EXPECT_EQ(log_.Count("ended (exit code 7); starting another"), 2) << log_.text();
  EXPECT_TRUE(absl::StrContains(
      log_.text(),
      "--preload=native: 3 spares in a row died before they were ready (the last: local rank 0, "
      "exit code 7); workers start cold from now on"))
      << log_.text();
  EXPECT_FALSE(Active());
  EXPECT_EQ(SparePid(0), -1);
  absl::StatusOr<pid_t> cold =
      runner_.Call([&] { return pool_->Launch(0, NativeSpare("exit:0")); });
  ASSERT_TRUE(cold.ok());
  EXPECT_FALSE(Reap(*cold));
}

TEST_F(SparePoolTest, FailedWarmUpTurnsPreloadingOffAndKillsTheSpare) {
  MakePool(SpareHook::kNativeProgram);
  // The spare's pid, read in the same loop task as Start: its message cannot have come yet.
  const pid_t spare = runner_.Call([&] {
    EXPECT_TRUE(pool_->Start({NativeSpare("failed")}).ok());
    return pool_->SparePid(0);
  });
  ASSERT_GT(spare, 0);
  ASSERT_TRUE(WaitUntil([&] { return !Active(); }, kTimeout)) << log_.text();
  EXPECT_TRUE(absl::StrContains(log_.text(),
                                "--preload=native: the spare's warm-up failed (numpy): No module "
                                "named 'numpy'; workers start cold from now on"))
      << log_.text();
  EXPECT_EQ(SparePid(0), -1);
  EXPECT_EQ(ProcessState(spare), '?') << "killed and reaped by the pool";
  EXPECT_EQ(log_.Count("workers start cold from now on"), 1);
}

TEST_F(SparePoolTest, DestructorKillsEverySpare) {
  MakePool(SpareHook::kNativeProgram);
  ASSERT_TRUE(Start({NativeSpare("silent"), NativeSpare("silent")}).ok());
  const pid_t a = WaitForSpare(0);
  const pid_t b = WaitForSpare(1);
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  EXPECT_EQ(runner_.Call([&] { return pool_->OwnPids(); }), (std::set<pid_t>{a, b}));
  runner_.Call([&] { pool_.reset(); });
  EXPECT_EQ(ProcessState(a), '?');
  EXPECT_EQ(ProcessState(b), '?');
}

// A shell script standing in for `python3`: as the probe (`python3 -c CODE`) it writes its
// environment to $ENV_OUT and exits $PROBE (or kills itself when $PROBE is "signal"); as a
// spare it waits.
std::string FakePython(const TempDir& dir) {
  return ddprun::testing::WriteShellScript(dir, "python3",
                                           "if [ \"$1\" = -c ]; then\n"
                                           "  env > \"$ENV_OUT\"\n"
                                           "  [ \"$PROBE\" = signal ] && kill -9 $$\n"
                                           "  exit \"$PROBE\"\n"
                                           "fi\n"
                                           "exec sleep 30\n");
}

SpawnRequest PythonTemplate(const TempDir& dir, const std::string& probe) {
  SpawnRequest r;
  r.program = FakePython(dir);
  r.argv = {"python3", "-u", "train.py"};
  r.env = {{"PATH", "/usr/bin:/bin"},
           {"PYTHONPATH", "/user/lib"},
           {"PROBE", probe},
           {"ENV_OUT", dir.File("probe.env")}};
  return r;
}

// How the fake interpreter's probe ends ($PROBE), and the warning that follows: `before` and
// `after` the interpreter's path.
struct ProbeOutcome {
  const char* probe;
  const char* before;
  const char* after;
};

void PrintTo(const ProbeOutcome& outcome, std::ostream* os) { *os << outcome.probe; }

class ProbeTest : public SparePoolTest, public ::testing::WithParamInterface<ProbeOutcome> {};

TEST_F(SparePoolTest, ProbeRunsWithTheHookFirstOnPythonPathThenSparesStart) {
  TempDir dir;
  MakePool(SpareHook::kPythonSitecustomize, {"numpy", "torch"});
  ASSERT_TRUE(Start({PythonTemplate(dir, "0")}).ok());
  const std::set<pid_t> own = runner_.Call([&] { return pool_->OwnPids(); });
  ASSERT_EQ(own.size(), 1u) << "the probe";
  const pid_t probe = *own.begin();
  EXPECT_FALSE(Active()) << "no spare before the probe has passed";
  EXPECT_TRUE(Reap(probe));

  const std::string env = ddprun::testing::ReadFile(dir.File("probe.env"));
  const size_t at = env.find("\nPYTHONPATH=");
  ASSERT_NE(at, std::string::npos) << env;
  const std::string pythonpath = env.substr(at + 12, env.find('\n', at + 1) - at - 12);
  ASSERT_TRUE(absl::EndsWith(pythonpath, ":/user/lib")) << pythonpath;
  const std::string hook_dir = pythonpath.substr(0, pythonpath.size() - 10);
  EXPECT_TRUE(absl::StrContains(env, "\nDDPRUN_PRELOAD_PYTHONPATH=/user/lib\n")) << env;
  EXPECT_TRUE(absl::StrContains(env, "\nDDPRUN_PRELOAD_PROBE=1\n")) << env;
  EXPECT_TRUE(absl::StrContains(ddprun::testing::ReadFile(hook_dir + "/sitecustomize.py"),
                                "DDPRUN_PRELOAD_FD"));

  EXPECT_TRUE(Active());
  EXPECT_GT(WaitForSpare(0), 0);
  runner_.Call([&] { pool_.reset(); });
  EXPECT_FALSE(std::filesystem::exists(hook_dir)) << "the destructor removes the hook's folder";
}

TEST_P(ProbeTest, FailedProbeMeansColdStartsWithOneWarningSayingWhy) {
  TempDir dir;
  MakePool(SpareHook::kPythonSitecustomize, {"numpy"});
  ASSERT_TRUE(Start({PythonTemplate(dir, GetParam().probe)}).ok());
  const std::set<pid_t> own = runner_.Call([&] { return pool_->OwnPids(); });
  ASSERT_EQ(own.size(), 1u);
  EXPECT_TRUE(Reap(*own.begin()));
  EXPECT_FALSE(Active());
  EXPECT_EQ(SparePid(0), -1);
  const std::string expected = absl::StrCat(GetParam().before, dir.File("python3"),
                                            GetParam().after, "; workers start cold");
  EXPECT_TRUE(absl::StrContains(log_.text(), expected)) << log_.text() << "\nwanted: " << expected;
  EXPECT_EQ(log_.Count("workers start cold"), 1);
}

INSTANTIATE_TEST_SUITE_P(
    Outcomes, ProbeTest,
    ::testing::Values(ProbeOutcome{"3", "--preload: ",
                                   " does not run sitecustomize (started with -E, -I or -S?)"},
                      ProbeOutcome{"4", "--preload: ", " is older than Python 3.9"},
                      ProbeOutcome{"1", "--preload: the probe of ", " ended with exit code 1"},
                      ProbeOutcome{"signal", "--preload: the probe of ",
                                   " ended with killed by signal 9"}));

TEST_F(SparePoolTest, ProbeThatCannotStartMeansColdStartsNotAnError) {
  MakePool(SpareHook::kPythonSitecustomize, {"numpy"});
  SpawnRequest missing;
  missing.program = "/nonexistent/python3";
  missing.argv = {"python3", "train.py"};
  ASSERT_TRUE(Start({missing}).ok());
  EXPECT_TRUE(absl::StrContains(log_.text(), "--preload: cannot start /nonexistent/python3: "))
      << log_.text();
  EXPECT_TRUE(runner_.Call([&] { return pool_->OwnPids(); }).empty());
  EXPECT_FALSE(Active());
}

TEST_F(SparePoolTest, ExitOfAnotherChildIsNotThePools) {
  MakePool(SpareHook::kNativeProgram);
  ASSERT_TRUE(Start({}).ok());
  EXPECT_FALSE(runner_.Call([&] { return pool_->HandleChildExit(getpid(), 0); }));
}

}  // namespace
}  // namespace ddprun::launcher
