#include "launcher/agent/failure_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "tests/testing/test_env.h"

namespace ddprun::launcher {
namespace {

using ::testing::HasSubstr;

TEST(FailureReportTest, ReadsTorchRecordErrorFile) {
  testing::TempDir dir;
  const std::string path = dir.File("error.json");
  testing::WriteFile(path, R"({"message": {"message": "ValueError: bad lr",
      "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File x\nValueError: bad lr\n",
                    "timestamp": "1700000000"}}})");
  auto c = ReadErrorFile(path);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->message, "ValueError: bad lr");
  EXPECT_THAT(c->traceback, HasSubstr("Traceback"));
  EXPECT_EQ(c->timestamp, "1700000000");
}

TEST(FailureReportTest, PlainMessageAndGarbage) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("a.json"), R"({"message": "boom"})");
  EXPECT_EQ(ReadErrorFile(dir.File("a.json"))->message, "boom");
  testing::WriteFile(dir.File("b.json"), "not json {");
  EXPECT_FALSE(ReadErrorFile(dir.File("b.json")).has_value());
  EXPECT_FALSE(ReadErrorFile(dir.File("none.json")).has_value());
}

// issue 28, point 14: a 10 MB message is the worker's doing; the summary shows its start and
// says how much more there is.
TEST(FailureReportTest, AHugeMessageIsAbbreviatedInTheSummary) {
  testing::TempDir dir;
  const std::string message(10 << 20, 'm');
  testing::WriteFile(dir.File("e.json"), "{\"message\": \"" + message + "\"}");
  FailureReport r;
  r.headline = "workers failed";
  WorkerExit e;
  e.exit_code = 1;
  r.root_cause = e;
  r.error_file = dir.File("e.json");
  r.error = ReadErrorFile(r.error_file);
  ASSERT_TRUE(r.error.has_value());
  EXPECT_EQ(r.error->message.size(), message.size());  // read whole
  const std::string text = FormatFailureReport(r);
  EXPECT_LT(text.size(), 3 * kMaxSummaryMessageBytes);
  EXPECT_THAT(text, HasSubstr(absl::StrCat("(", message.size() - kMaxSummaryMessageBytes,
                                           " more bytes; the whole text is in the error file)")));
  EXPECT_EQ(Abbreviate("short"), "short");
}

TEST(FailureReportTest, NamesSignalsAndRootCause) {
  EXPECT_EQ(SignalName(SIGSEGV), "SIGSEGV");
  WorkerExit e;
  e.rank = 5;
  e.local_rank = 1;
  e.pid = 4242;
  e.signal = SIGSEGV;
  EXPECT_EQ(DescribeExit(e), "signal SIGSEGV (11)");
  FailureReport r;
  r.headline = "budget spent";
  r.hostname = "node7";
  r.root_cause = e;
  r.stderr_tail = {"line one", "line two"};
  WorkerExit other;
  other.rank = 4;
  other.exit_code = 1;
  r.other_failures = {other};
  const std::string text = FormatFailureReport(r);
  EXPECT_THAT(text, HasSubstr("host:        node7"));
  EXPECT_THAT(text, HasSubstr("rank:        5 (local rank 1)"));
  EXPECT_THAT(text, HasSubstr("pid:         4242"));
  EXPECT_THAT(text, HasSubstr("signal SIGSEGV (11)"));
  EXPECT_THAT(text, HasSubstr("    | line two"));
  EXPECT_THAT(text, HasSubstr("rank 4 (local rank 0, pid 0): exit code 1"));
}

}  // namespace
}  // namespace ddprun::launcher
