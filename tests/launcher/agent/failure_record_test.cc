// The failure record (failure_record.h): one WorkerExit classified once, and what follows from
// it — the question to the death explainer, the message, the report to the rendezvous, the
// timeline's step and the crash-loop signature. Pure: exits are made by hand, no processes.
#include "launcher/agent/failure_record.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>

#include "rendezvous/api/run_status.h"

namespace ddprun::launcher {
namespace {

WorkerExit Exited(int code) {
  WorkerExit e;
  e.local_rank = 1;
  e.rank = 5;
  e.pid = 4242;
  e.exit_code = code;
  return e;
}

WorkerExit Killed(int signal, DeathCauseKind kind, std::string text) {
  WorkerExit e = Exited(0);
  e.signal = signal;
  e.cause = DeathCause{kind, std::move(text)};
  return e;
}

WorkerExit Hung() {
  WorkerExit e = Exited(0);
  e.hang = "no progress for 3.0 s";
  return e;
}

FailureContext Context(CrashLoop crash_loop, std::string message) {
  FailureContext c;
  c.hostname = "n1";
  c.message = std::move(message);
  c.crash_loop = crash_loop;
  c.made_progress = true;
  return c;
}

TEST(FailureRecordTest, EachExitIsClassifiedOnceAndAHangWinsOverItsFields) {
  EXPECT_EQ(KindOf(Exited(3)), FailureKind::kExit);
  EXPECT_EQ(KindOf(Killed(SIGSEGV, DeathCauseKind::kFault, "")), FailureKind::kSignal);
  EXPECT_EQ(KindOf(Hung()), FailureKind::kHang);
  WorkerExit hung_and_killed = Hung();
  hung_and_killed.signal = SIGKILL;
  EXPECT_EQ(KindOf(hung_and_killed), FailureKind::kHang);
}

TEST(FailureRecordTest, TheExplainerIsAskedWithTheExitsProcessFacts) {
  WorkerExit e = Killed(SIGKILL, DeathCauseKind::kNone, "");
  e.started = TimePoint{} + std::chrono::seconds(2);
  e.when = TimePoint{} + std::chrono::seconds(5);
  e.signalled_by_agent = true;
  e.comm = "python3";
  const WorkerDeath d = DeathOf(e);
  EXPECT_EQ(d.pid, 4242);
  EXPECT_EQ(d.signal, SIGKILL);
  EXPECT_EQ(d.started_us, 2'000'000);
  EXPECT_EQ(d.died_us, 5'000'000);
  EXPECT_TRUE(d.killed_by_agent);
  EXPECT_EQ(d.comm, "python3");
}

TEST(FailureRecordTest, TheMessageComesFromTheFirstSourceThatHasOne) {
  int reads = 0;
  FailureMessageSources all;
  all.kill_reason = "killed: did not re-form";
  all.error_file_message = [&reads]() -> std::optional<std::string> {
    ++reads;
    return "ValueError: bad lr";
  };
  all.start_error = "exec: no such file";
  all.stderr_tail = {"first", "last line"};
  // A hang says how it hung; the worker's error file is not even read.
  EXPECT_EQ(FailureMessage(Hung(), all), "no progress for 3.0 s");
  EXPECT_EQ(FailureMessage(Exited(1), all), "killed: did not re-form");
  EXPECT_EQ(reads, 0);
  all.kill_reason.clear();
  EXPECT_EQ(FailureMessage(Exited(1), all), "ValueError: bad lr");
  EXPECT_EQ(reads, 1);
  all.error_file_message = [] { return std::optional<std::string>(); };
  EXPECT_EQ(FailureMessage(Exited(1), all), "exec: no such file");
  all.start_error.clear();
  EXPECT_EQ(FailureMessage(Exited(1), all), "last line");
  EXPECT_EQ(FailureMessage(Exited(1), FailureMessageSources{}), "");
}

TEST(FailureRecordTest, TheReportOfAnExit) {
  const rendezvous::WorkerFailure f = ReportOf(Exited(3), Context(CrashLoop::kStop, "boom"));
  EXPECT_EQ(f.hostname, "n1");
  EXPECT_EQ(f.rank, 5);
  EXPECT_EQ(f.local_rank, 1);
  EXPECT_EQ(f.pid, 4242);
  EXPECT_EQ(f.exit_code, 3);
  EXPECT_EQ(f.signal, 0);
  EXPECT_FALSE(f.hang);
  EXPECT_EQ(f.cause_kind, rendezvous::Cause::kExit);
  EXPECT_EQ(f.message, "boom");
  EXPECT_EQ(f.signature, "exit code 3 (exit): boom");
  EXPECT_TRUE(f.made_progress);
}

TEST(FailureRecordTest, TheReportOfASignalCarriesTheKernelsCause) {
  const rendezvous::WorkerFailure f = ReportOf(
      Killed(SIGSEGV, DeathCauseKind::kFault, "segfault at 0x10"), Context(CrashLoop::kStop, ""));
  EXPECT_EQ(f.signal, SIGSEGV);
  EXPECT_EQ(f.cause_kind, rendezvous::Cause::kFault);
  EXPECT_EQ(f.cause, "segfault at 0x10");
  // The kind, not the text (the address changes between attempts), and no ": " without message.
  EXPECT_EQ(f.signature, "signal SIGSEGV (fault)");
}

TEST(FailureRecordTest, TheReportOfAHang) {
  const rendezvous::WorkerFailure f =
      ReportOf(Hung(), Context(CrashLoop::kStop, "no progress for 3.0 s"));
  EXPECT_TRUE(f.hang);
  EXPECT_EQ(f.cause_kind, rendezvous::Cause::kHang);
  EXPECT_EQ(f.message, "no progress for 3.0 s");
  EXPECT_EQ(f.signature, "");  // a hang never counts towards the crash-loop breaker
  EXPECT_FALSE(f.made_progress);
}

TEST(FailureRecordTest, OnlyAProgramsOwnFailureCountsTowardsTheCrashLoopBreaker) {
  // The OOM killer and a kill from outside decided, not the program.
  EXPECT_EQ(CrashLoopSignature(Killed(SIGKILL, DeathCauseKind::kOomKill, "oom"), "oom_kill", ""),
            "");
  EXPECT_EQ(
      CrashLoopSignature(Killed(SIGTERM, DeathCauseKind::kFromOutside, ""), "external_signal", ""),
      "");
  EXPECT_EQ(CrashLoopSignature(Killed(SIGABRT, DeathCauseKind::kUnknown, ""), "unknown", "x"),
            "signal SIGABRT (unknown): x");
  // --crash-loop=retry: no signature at all, nor progress.
  const rendezvous::WorkerFailure f = ReportOf(Exited(3), Context(CrashLoop::kRetry, "boom"));
  EXPECT_EQ(f.signature, "");
  EXPECT_FALSE(f.made_progress);
}

TEST(FailureRecordTest, TheTimelineStepOfEachKind) {
  const StepEvent exit = FailureStepOf(Exited(3), 7, "n1");
  EXPECT_EQ(exit.step, Step::kFailureDetected);
  EXPECT_EQ(exit.cause, rendezvous::Cause::kWorkerExit);
  EXPECT_EQ(exit.detail, "exited 3");
  EXPECT_EQ(exit.rank, 5);
  EXPECT_EQ(exit.host, "n1");
  EXPECT_EQ(exit.round, 7);
  const StepEvent killed =
      FailureStepOf(Killed(SIGKILL, DeathCauseKind::kOomKill, "killed by the OOM killer"), 7, "n1");
  EXPECT_EQ(killed.cause, rendezvous::Cause::kWorkerSignal);
  EXPECT_EQ(killed.detail, "was killed by SIGKILL: killed by the OOM killer");
  EXPECT_EQ(FailureStepOf(Killed(SIGTERM, DeathCauseKind::kNone, ""), 7, "n1").detail,
            "was killed by SIGTERM");
  const StepEvent hung = FailureStepOf(Hung(), 7, "n1");
  EXPECT_EQ(hung.cause, rendezvous::Cause::kHang);
  EXPECT_EQ(hung.detail, "hung (no progress for 3.0 s)");
}

// Issue 40: an exit 0 before the worker began its start (a --preload hand-over never read, an
// in-process replacement gone before its hello) is a failure of its own kind, with its reason as
// the message; not the program's own doing, so not a crash-loop signature. A non-zero exit
// stays an exit.
TEST(FailureRecordTest, AnExitZeroBeforeTheStartIsAFailureThatSaysWhy) {
  WorkerExit unread = Exited(0);
  unread.never_started = NeverStarted::kHandOverUnread;
  EXPECT_FALSE(unread.ok());
  EXPECT_EQ(KindOf(unread), FailureKind::kNeverStarted);
  WorkerExit failed_too = unread;
  failed_too.exit_code = 2;
  EXPECT_EQ(KindOf(failed_too), FailureKind::kExit);
  FailureMessageSources sources;
  sources.stderr_tail = {"last line"};
  const std::string message = FailureMessage(unread, sources);
  EXPECT_EQ(message, "it ended without reading the start handed to its --preload spare");
  const rendezvous::WorkerFailure f = ReportOf(unread, Context(CrashLoop::kStop, message));
  EXPECT_EQ(f.exit_code, 0);
  EXPECT_EQ(f.cause_kind, rendezvous::Cause::kExit);
  EXPECT_EQ(f.message, message);
  EXPECT_EQ(f.signature, "");
  const StepEvent step = FailureStepOf(unread, 7, "n1");
  EXPECT_EQ(step.cause, rendezvous::Cause::kWorkerExit);
  EXPECT_EQ(step.detail,
            "exited 0 before it started (it ended without reading the start handed to its "
            "--preload spare)");
  WorkerExit no_hello = Exited(0);
  no_hello.never_started = NeverStarted::kNoHello;
  EXPECT_THAT(FailureMessage(no_hello, sources), ::testing::HasSubstr("before its hello"));
}

}  // namespace
}  // namespace ddprun::launcher
