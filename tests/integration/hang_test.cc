// Hangs end to end on one node: real ddprun, real workers (Python with Debian's torch 1.13 and
// its FileTimerClient, a C program blocked in the kernel), real stack tools (eu-stack or gdb).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>

#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using testing::BinPath;
using testing::CountOccurrences;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadFile;
using testing::SourcePath;
using testing::Subprocess;
using testing::TempDir;
using namespace std::chrono_literals;

std::string Script(const std::string& name) { return testing::IntegrationScript(name); }

std::map<std::string, std::string> Env(std::map<std::string, std::string> extra = {}) {
  extra.emplace("PYTHON_EXEC", testing::SystemPython());
  return extra;
}

std::string RunDir(const TempDir& logs) { return testing::RunDir(logs.path()); }

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(HangTest, TorchFileTimerExpiryTakesStacksRestartsAndNamesTheScope) {
  TempDir logs;
  const auto t0 = std::chrono::steady_clock::now();
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--max-restarts=1",
                "--log-dir=" + logs.path(), Script("file_timer_worker.py")},
               Env({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}}));
  auto st = p.Wait(90s);
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 0) << p.out() << p.err();
  EXPECT_THAT(p.out(), HasSubstr("rank 1 attempt 1"));
  EXPECT_THAT(p.out(), HasSubstr("rank 0 done"));
  // Without scope=, torch names a scope FILE#LINE after the caller of expires(); torch 1.13's
  // caller is contextlib's __enter__ (its own quirk), and ddprun names what the client sent.
  EXPECT_THAT(p.err(), HasSubstr("worker rank 1 (local rank 1, pid"));
  EXPECT_THAT(p.err(), HasSubstr(") is hung: FileTimer scope "));
  EXPECT_THAT(p.err(), HasSubstr("contextlib.py#"));
  EXPECT_THAT(p.err(), HasSubstr("stacks of the hung attempt: "));
  EXPECT_THAT(p.err(), HasSubstr("rank 1 was at File \"" + Script("file_timer_worker.py") +
                                 "\", line 19 in load_batch_forever"));
  // Stacks of every worker of the group, Python and native.
  const std::string run = RunDir(logs);
  for (int lr : {0, 1}) {
    const std::string stacks = ReadFile(run + "/attempt_0/" + std::to_string(lr) + "/stacks.txt");
    EXPECT_THAT(stacks, HasSubstr("== native stacks, all threads")) << lr;
    EXPECT_THAT(stacks, HasSubstr("#0 ")) << stacks;
    EXPECT_THAT(stacks, HasSubstr("== Python stacks, all threads (faulthandler")) << lr;
    EXPECT_THAT(stacks, HasSubstr("file_timer_worker.py\", line")) << stacks;
  }
  EXPECT_FALSE(std::filesystem::exists(run + "/attempt_1/0/stacks.txt"));
  // 2 s scope + torch's import + stacks + restart; generous for a loaded CI machine.
  EXPECT_LT(SecondsSince(t0), 30);
}

// The same hang in a worker started from a --preload spare: the FileTimer client, the SIGABRT
// that makes faulthandler print the Python stacks, the stacks file: all as for a cold start.
TEST(HangTest, FileTimerExpiryInAWorkerStartedFromASpareTakesItsPythonStacks) {
  TempDir logs;
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--max-restarts=2",
                "--preload=torch", "--log-dir=" + logs.path(), Script("file_timer_worker.py")},
               Env({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"HANG_ATTEMPT", "1"}}));
  auto st = p.Wait(120s);
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 0) << p.out() << p.err();
  // Attempt 1 (the hung one) and 2 came from spares.
  EXPECT_EQ(CountOccurrences(p.err(), "preload: 2 of 2 worker(s) started from spares"), 2)
      << p.err();
  EXPECT_THAT(p.err(), HasSubstr(") is hung: FileTimer scope "));
  EXPECT_THAT(p.err(), HasSubstr("rank 1 was at File \"" + Script("file_timer_worker.py") +
                                 "\", line 19 in load_batch_forever"));
  const std::string stacks = ReadFile(RunDir(logs) + "/attempt_1/1/stacks.txt");
  EXPECT_THAT(stacks, HasSubstr("== Python stacks, all threads (faulthandler"));
  EXPECT_THAT(stacks, HasSubstr("file_timer_worker.py\", line 19 in load_batch_forever"));
  EXPECT_THAT(p.out(), HasSubstr("rank 1 attempt 2"));
}

TEST(HangTest, ANamedScopeIsNamedAndItsSignalIsSent) {
  TempDir logs;
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--log-dir=" + logs.path(),
                Script("file_timer_worker.py"), "allreduce_step_57"},
               Env({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}}));
  auto st = p.Wait(90s);
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 1) << p.err();
  EXPECT_THAT(p.err(), HasSubstr("exit:        hung: FileTimer scope allreduce_step_57 expired"));
  EXPECT_THAT(p.err(), HasSubstr("rank:        1 (local rank 1)"));
  EXPECT_THAT(p.err(), HasSubstr("in load_batch_forever"));
}

TEST(HangTest, SilentPythonWorkerIsHungWithinTheTimeoutWithItsPythonFrame) {
  TempDir logs;
  const auto t0 = std::chrono::steady_clock::now();
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--hang-timeout=3",
                "--log-dir=" + logs.path(), Script("silent_worker.py")},
               Env());
  auto st = p.Wait(60s);
  const double took = SecondsSince(t0);
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 1) << p.err();
  // Rank 0 printed '\r' updates only (no newline) all along: that is progress, not a hang.
  EXPECT_THAT(p.err(), HasSubstr("root cause: worker hang on"));
  EXPECT_THAT(p.err(), HasSubstr("rank:        1 (local rank 1)"));
  EXPECT_THAT(p.err(), HasSubstr("exit:        hung: no progress for 3."));
  EXPECT_THAT(p.err(), HasSubstr("where it was (innermost frames first):"));
  EXPECT_THAT(p.err(), HasSubstr("line 20 in wait_for_a_peer_that_never_answers"));
  EXPECT_THAT(p.err(), HasSubstr("stacks:      " + RunDir(logs) + "/attempt_0/1/stacks.txt"));
  EXPECT_THAT(p.err(), Not(HasSubstr("rank:        0")));
  EXPECT_LT(took, 8.0) << "3 s timeout, detected and stopped in " << took << " s";
}

// --hang-startup-timeout (a GPU worker is silent for seconds while CUDA and NCCL start): a worker
// that starts slowly and then goes silent is hung after --hang-timeout from its last line, not
// during its start; one that never shows a sign of life is hung after the start's allowance,
// and the report says it never started.
TEST(HangTest, TheStartHasItsOwnAllowanceThenTheHangTimeoutApplies) {
  auto run = [](const std::string& body) {
    auto p = std::make_unique<Subprocess>(std::vector<std::string>{
        BinPath("ddprun"), "--standalone", "--nproc-per-node=1", "--hang-timeout=1",
        "--hang-startup-timeout=4", "--no-python", "/bin/sh", "-c", body});
    const auto t0 = std::chrono::steady_clock::now();
    auto st = p->Wait(60s);
    EXPECT_TRUE(st.has_value());
    EXPECT_EQ(st.value_or(testing::ExitStatus{}).exit_code, 1) << p->err();
    return std::make_pair(std::move(p), SecondsSince(t0));
  };
  // Silent for 2 s at its start (allowed), one line, then silent: hung 1 s after the line.
  auto [slow, slow_took] = run("sleep 2; echo started; exec sleep 60");
  EXPECT_THAT(slow->err(), HasSubstr("exit:        hung: no progress for 1."));
  EXPECT_GT(slow_took, 2.9);
  EXPECT_LT(slow_took, 8.0);
  // Never a sign of life: hung at the start's allowance.
  auto [silent, silent_took] = run("exec sleep 60");
  EXPECT_THAT(silent->err(), HasSubstr("exit:        hung: no sign of life for 4."));
  EXPECT_THAT(silent->err(), HasSubstr("since its start (--hang-startup-timeout)"));
  EXPECT_GT(silent_took, 3.9);
  EXPECT_LT(silent_took, 10.0);
}

TEST(HangTest, WorkersIgnoringSigabrtAndSigtermAreStillStoppedInBoundedTime) {
  TempDir logs;
  const auto t0 = std::chrono::steady_clock::now();
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--hang-timeout=2",
                "--stop-timeout=30", "--log-dir=" + logs.path(), Script("silent_worker.py"),
                "--ignore-signals"},
               Env());
  auto st = p.Wait(60s);
  const double took = SecondsSince(t0);
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 1) << p.err();
  // Detection 2 s + native stacks + faulthandler's 2 s wait (ignored) + SIGKILL.
  EXPECT_LT(took, 10.0);
  const std::string stacks = ReadFile(RunDir(logs) + "/attempt_0/1/stacks.txt");
  EXPECT_THAT(stacks, HasSubstr("== native stacks, all threads")) << stacks;
  EXPECT_THAT(stacks, HasSubstr("(nothing printed: is PYTHONFAULTHANDLER unset by the worker, or "
                                "was SIGABRT handled or blocked?)"))
      << stacks;
}

TEST(HangTest, CWorkerBlockedInASyscallShowsItsNativeStack) {
  TempDir logs;
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=1", "--hang-timeout=1.5",
                "--log-dir=" + logs.path(), "--no-python", BinPath("blocked_worker"), "read"});
  auto st = p.Wait(60s);
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 1) << p.err();
  const std::string stacks = ReadFile(RunDir(logs) + "/attempt_0/0/stacks.txt");
  EXPECT_THAT(stacks, HasSubstr("wait_for_data_that_never_comes")) << stacks;
  EXPECT_THAT(stacks, HasSubstr("read")) << stacks;
  EXPECT_THAT(stacks, Not(HasSubstr("Python stacks")));  // not a Python worker: no SIGABRT
  EXPECT_THAT(p.err(), HasSubstr("where it was (innermost frames first):"));
}

TEST(HangTest, UninterruptibleSleepPastTheTimeoutIsAHang) {
  TempDir logs;
  const auto t0 = std::chrono::steady_clock::now();
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=1", "--stop-timeout=1",
                "--log-dir=" + logs.path(), "--no-python", BinPath("blocked_worker"), "vfork"},
               {{"TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT", "2"}});
  auto st = p.Wait(60s);
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 1) << p.err();
  EXPECT_THAT(p.err(), HasSubstr("hung: in uninterruptible sleep (D state) for 2."));
  const std::string stacks = ReadFile(RunDir(logs) + "/attempt_0/0/stacks.txt");
  EXPECT_THAT(stacks, HasSubstr("not taken: the process is in uninterruptible sleep (D)"));
  EXPECT_THAT(stacks, HasSubstr("wchan"));
  EXPECT_LT(SecondsSince(t0), 15.0);  // never waits for the D-state task beyond its bounds
}

TEST(HangTest, JunkOnTheTimerPipeIsIgnoredWithOneWarningEachAndTheJobFinishes) {
  Subprocess p(
      {BinPath("ddprun"), "--standalone", "--nproc-per-node=2", Script("timer_pipe_junk.py")},
      Env({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}}));
  auto st = p.Wait(60s);
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 0) << p.err();
  EXPECT_EQ(CountOccurrences(p.out(), "junk sent"), 2) << p.out();
  EXPECT_EQ(CountOccurrences(p.err(), "ignoring malformed lines on TORCHELASTIC_TIMER_FILE"), 1)
      << p.err();
  EXPECT_EQ(CountOccurrences(p.err(), "bytes on TORCHELASTIC_TIMER_FILE"), 1) << p.err();
  EXPECT_EQ(CountOccurrences(p.err(), "ignoring TORCHELASTIC_TIMER_FILE messages of pid 1:"), 1)
      << p.err();
  EXPECT_THAT(p.err(), Not(HasSubstr("hung")));
}

TEST(HangTest, TimerFileThatIsNotAFifoIsAUsageErrorAndNothingStarts) {
  TempDir dir;
  const std::string file = dir.File("regular");
  testing::WriteFile(file, "x");
  Subprocess p({BinPath("ddprun"), "--standalone", "--no-python", "/bin/sh", "-c",
                "touch " + dir.File("started")},
               {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TORCHELASTIC_TIMER_FILE", file}});
  auto st = p.Wait(20s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 2);
  EXPECT_THAT(p.err(), HasSubstr("TORCHELASTIC_TIMER_FILE=" + file + ": exists and is not a FIFO"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("started")));
  EXPECT_EQ(ReadFile(file), "x");  // left as it was
}

TEST(HangTest, BadHangTimeoutsAreUsageErrorsNamingTheFlag) {
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--hang-timeout=0"},
                                              {"--hang-timeout=-1"},
                                              {"--hang-timeout=soon"}}) {
    Subprocess p({BinPath("ddprun"), "--standalone", bad[0], "--no-python", "true"});
    auto st = p.Wait(20s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 2) << bad[0];
    EXPECT_THAT(p.err(), HasSubstr(bad[0])) << p.err();
  }
  Subprocess alone(
      {BinPath("ddprun"), "--standalone", "--hang-startup-timeout=60", "--no-python", "true"});
  auto alone_st = alone.Wait(20s);
  ASSERT_TRUE(alone_st.has_value());
  EXPECT_EQ(alone_st->exit_code, 2);
  EXPECT_THAT(alone.err(), HasSubstr("--hang-startup-timeout=60: only with --hang-timeout"));
  Subprocess pet({BinPath("ddprun"), "--standalone", "--no-python", "true"},
                 {{"PET_HANG_TIMEOUT", "0"}});
  auto st = pet.Wait(20s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 2);
  EXPECT_THAT(pet.err(), HasSubstr("PET_HANG_TIMEOUT=0"));
  Subprocess d({BinPath("ddprun"), "--standalone", "--no-python", "true"},
               {{"TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT", "never"}});
  st = d.Wait(20s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 2);
  EXPECT_THAT(d.err(), HasSubstr("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT=never"));
}

}  // namespace
}  // namespace ddprun
