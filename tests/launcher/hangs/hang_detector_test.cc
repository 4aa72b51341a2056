// HangDetector on a fake clock, StepReport parsing, and InnermostFrames of stacks files.
#include "launcher/hangs/hang_detector.h"

#include <gtest/gtest.h>

#include "launcher/process/stack_text.h"

namespace ddprun::launcher {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class HangDetectorTest : public ::testing::Test {
 protected:
  HangDetector Make(Duration no_progress, Duration d_state = Duration(0), int nproc = 2) {
    HangDetector d({no_progress, d_state}, nproc);
    d.Reset(clock_.Now());
    return d;
  }
  FakeClock clock_;
};

TEST_F(HangDetectorTest, SilenceForTheTimeoutIsAHangAndAnySignOfLifeResetsIt) {
  HangDetector d = Make(seconds(3));
  clock_.Advance(milliseconds(2900));
  EXPECT_FALSE(d.Check(clock_.Now()).has_value());
  d.OnOutput(0, clock_.Now());
  d.OnTimerMessage(1, clock_.Now());
  clock_.Advance(milliseconds(2900));
  EXPECT_FALSE(d.Check(clock_.Now()).has_value());
  d.OnStep(0, 12, clock_.Now());
  clock_.Advance(milliseconds(200));  // rank 1: 3.1 s silent; rank 0: 0.2 s
  auto v = d.Check(clock_.Now());
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->local_rank, 1);
  EXPECT_EQ(v->kind, HangVerdict::Kind::kNoProgress);
  EXPECT_EQ(v->idle, milliseconds(3100));
  EXPECT_EQ(v->Describe(), "no progress for 3.1 s (--hang-timeout)");
}

// --hang-startup-timeout: a rank that has shown no sign of life since the group started has the
// start's allowance, and is named as silent since its start when it runs out; from its first
// sign of life on, --hang-timeout applies. Without the allowance the start counts as any
// silence.
TEST_F(HangDetectorTest, TheStartHasItsOwnAllowanceUntilTheFirstSignOfLife) {
  HangDetector d({seconds(2), Duration(0), seconds(10)}, 2);
  d.Reset(clock_.Now());
  clock_.Advance(seconds(3));
  d.OnOutput(0, clock_.Now());  // rank 0 alive after 3 s; rank 1 still starting
  clock_.Advance(seconds(1));
  EXPECT_FALSE(d.Check(clock_.Now()).has_value());  // 4 s into rank 1's start: allowed
  clock_.Advance(milliseconds(1500));               // rank 0: 2.5 s silent after its output
  auto v = d.Check(clock_.Now());
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->local_rank, 0);
  EXPECT_FALSE(v->at_start);
  EXPECT_EQ(v->Describe(), "no progress for 2.5 s (--hang-timeout)");
  d.OnStep(0, 1, clock_.Now());
  clock_.Advance(milliseconds(5600));  // rank 1: 11.1 s since its start, nothing from it
  d.OnStep(0, 2, clock_.Now());
  v = d.Check(clock_.Now());
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->local_rank, 1);
  EXPECT_TRUE(v->at_start);
  EXPECT_EQ(v->Describe(), "no sign of life for 11.1 s since its start (--hang-startup-timeout)");
  // A new group starts: every rank has the allowance again.
  d.Reset(clock_.Now());
  clock_.Advance(seconds(9));
  EXPECT_FALSE(d.Check(clock_.Now()).has_value());

  HangDetector plain = Make(seconds(2));
  clock_.Advance(seconds(2));
  ASSERT_TRUE(plain.Check(clock_.Now()).has_value());
  EXPECT_FALSE(plain.Check(clock_.Now())->at_start);
}

TEST_F(HangDetectorTest, TheLongestIdleRankIsNamedAndExitedRanksNever) {
  HangDetector d = Make(seconds(1), Duration(0), 3);
  d.OnOutput(2, clock_.Now() + milliseconds(500));
  clock_.Advance(seconds(5));
  d.OnExited(0);
  d.OnOutput(1, clock_.Now() - seconds(2));
  // Rank 0 was silent longest but exited; rank 1 is idle 2 s; rank 2 is idle 4.5 s.
  auto v = d.Check(clock_.Now());
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->local_rank, 2);
  EXPECT_EQ(v->idle, milliseconds(4500));
}

// When every rank is silent (the others wait for the hung one inside a collective), the one to
// blame is a stopped process, else the rank furthest behind, else the longest silent; which one
// matters when only it is replaced (in-process recovery).
TEST_F(HangDetectorTest, AmongSilentRanksTheStoppedThenTheFurthestBehindIsNamed) {
  HangDetector d = Make(seconds(1), Duration(0), 3);
  const TimePoint t0 = clock_.Now();
  d.OnStep(0, 7, t0);                      // started step 7, waits in its collective
  d.OnStep(1, 6, t0 + milliseconds(100));  // never started step 7: behind
  d.OnStep(2, 7, t0 + milliseconds(200));
  clock_.Advance(seconds(5));
  auto v = d.Check(clock_.Now());
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->local_rank, 1) << "the rank furthest behind, though not the longest silent";
  d.OnProcessState(2, 'T', clock_.Now());  // SIGSTOPped
  v = d.Check(clock_.Now());
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->local_rank, 2) << "a stopped process before anything else";
  d.OnProcessState(2, 'S', clock_.Now());
  v = d.Check(clock_.Now());
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->local_rank, 1);
}

TEST_F(HangDetectorTest, OffMeansNeverHung) {
  HangDetector d = Make(Duration(0));
  EXPECT_FALSE(d.enabled());
  clock_.Advance(std::chrono::hours(24));
  EXPECT_FALSE(d.Check(clock_.Now()).has_value());
}

TEST_F(HangDetectorTest, UninterruptibleSleepForTheTimeoutIsAHangEvenWhileTalking) {
  HangDetector d = Make(Duration(0), seconds(2));
  d.OnProcessState(0, 'D', clock_.Now());
  clock_.Advance(seconds(1));
  d.OnProcessState(0, 'D', clock_.Now());
  d.OnProcessState(1, 'D', clock_.Now());
  d.OnOutput(0, clock_.Now());  // output does not cancel D-state time
  clock_.Advance(milliseconds(500));
  d.OnProcessState(1, 'S', clock_.Now());  // rank 1 woke up: its count starts over
  clock_.Advance(milliseconds(500));
  d.OnProcessState(1, 'D', clock_.Now());
  auto v = d.Check(clock_.Now());
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->local_rank, 0);
  EXPECT_EQ(v->kind, HangVerdict::Kind::kUninterruptible);
  EXPECT_EQ(v->idle, seconds(2));
}

TEST_F(HangDetectorTest, ProgressCarriesStepsAndIdleTimes) {
  HangDetector d = Make(seconds(10));
  d.OnStep(0, 41, clock_.Now());
  clock_.Advance(seconds(2));
  d.OnStep(0, 42, clock_.Now());
  clock_.Advance(seconds(1));
  auto p = d.Progress(clock_.Now());
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].step, 42);
  EXPECT_EQ(p[0].idle, seconds(1));
  EXPECT_EQ(p[1].step, -1);
  EXPECT_EQ(p[1].idle, seconds(3));
  d.Reset(clock_.Now());  // a new group: fresh, no steps
  EXPECT_EQ(d.Progress(clock_.Now())[0].step, -1);
}

TEST(StepReportTest, ParsesTheProgressChannelsLines) {
  auto r = ParseStepReport(R"({"pid":123,"step":57})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->pid, 123);
  EXPECT_EQ(r->step, 57);
  EXPECT_FALSE(r->compute_ms.has_value());
  auto timed = ParseStepReport(R"({"pid":123,"step":58,"compute_ms":31.25})");
  ASSERT_TRUE(timed.ok());
  EXPECT_EQ(timed->step, 58);
  EXPECT_EQ(timed->compute_ms, std::optional<double>(31.25));
  EXPECT_FALSE(timed->checkpoint_ms.has_value());
  auto saved = ParseStepReport(R"({"pid":123,"step":59,"compute_ms":30,"checkpoint_ms":812.5})");
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ(saved->checkpoint_ms, std::optional<double>(812.5));
  EXPECT_FALSE(ParseStepReport(R"({"pid":1,"step":2,"checkpoint_ms":-4})")->checkpoint_ms);
  // A bad compute time costs the figure, not the step.
  for (const char* odd :
       {R"({"pid":1,"step":2,"compute_ms":-1})", R"({"pid":1,"step":2,"compute_ms":"fast"})",
        R"({"pid":1,"step":2,"compute_ms":1e12})"}) {
    auto r2 = ParseStepReport(odd);
    ASSERT_TRUE(r2.ok()) << odd;
    EXPECT_FALSE(r2->compute_ms.has_value()) << odd;
  }
  for (const char* bad : {"", "57", R"({"pid":123})", R"({"pid":0,"step":1})",
                          R"({"pid":1,"step":-3})", R"({"pid":1,"step":"2"})"}) {
    EXPECT_FALSE(ParseStepReport(bad).ok()) << bad;
  }
}

TEST(InnermostFramesTest, PythonFramesWinOverNativeOnes) {
  const char* text =
      "ddprun: stacks of rank 1\n\n== native stacks ==\nPID 7 - process\nTID 7:\n"
      "#0  0x00007f clock_nanosleep@GLIBC_2.2.5\n#1  0x0000005d\n#2  0x00053 PyObject_Vectorcall\n"
      "TID 8:\n#0  0x1 epoll_wait\n\n== Python stacks ==\nFatal Python error: Aborted\n\n"
      "Current thread 0x1 (most recent call first):\n"
      "  File \"/tmp/w.py\", line 5 in wait_forever\n  File \"/tmp/w.py\", line 7 in <module>\n\n"
      "Thread 0x2 (most recent call first):\n  File \"/usr/lib/x.py\", line 1 in run\n";
  EXPECT_EQ(InnermostFrames(text, 5),
            (std::vector<std::string>{"File \"/tmp/w.py\", line 5 in wait_forever",
                                      "File \"/tmp/w.py\", line 7 in <module>"}));
  const char* native =
      "TID 7:\n#0  0x00007f clock_nanosleep@GLIBC_2.2.5\n#1  0x0000005d\n"
      "#2  0x00053 PyObject_Vectorcall\nTID 8:\n#0  0x1 epoll_wait\n";
  EXPECT_EQ(
      InnermostFrames(native, 2),
      (std::vector<std::string>{"#0  0x00007f clock_nanosleep@GLIBC_2.2.5", "#1  0x0000005d"}));
  EXPECT_TRUE(InnermostFrames("nothing here\n", 3).empty());
}

}  // namespace
}  // namespace ddprun::launcher
