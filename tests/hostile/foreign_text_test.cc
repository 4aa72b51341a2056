// issue 43, D2: text from outside ddprun (a worker's error file, the failure message an agent
// reports to the rendezvous server) reached the server's log, every node's console and
// `ddprun status` raw: a newline forged a log line of its own, an escape sequence steered the
// terminal. A real job through a real ddprun-rdzv whose worker writes such a message: every
// place it is shown has it on one line, escaped.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/testing/rdzv_daemon.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using testing::BinPath;
using ::testing::HasSubstr;
using testing::RdzvDaemon;
using testing::Subprocess;
using testing::TempDir;

constexpr char kForged[] = "[ddprun-rdzv] run prod-job: closing OK";

// No line of `text` starts with the forged line, and no escape character reached it.
void ExpectNothingForged(const std::string& text, const std::string& where) {
  for (absl::string_view line : absl::StrSplit(text, absl::ByAnyChar("\r\n"))) {
    EXPECT_NE(line.rfind(kForged, 0), 0u) << where << " has a forged line:\n" << text;
  }
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << where << " has an escape:\n" << text;
}

TEST(ForeignTextTest, AWorkersForgedMessageIsShownEscapedEverywhere) {
  TempDir dir;
  RdzvDaemon daemon("the-token");
  ASSERT_FALSE(daemon.endpoint().empty()) << daemon.error();
  testing::WriteFile(dir.File("token"), "the-token\n", 0600);
  // JSON escapes: \n and \u001b become a real newline and ESC in the message.
  const std::string worker = testing::WriteShellScript(
      dir, "forge.sh",
      absl::StrCat("printf '%s' '{\"message\": {\"message\": \"boom\\n", kForged,
                   "\\u001b[2J\\u001b]0;owned\\u0007\", \"extraInfo\": {\"timestamp\": \"1\"}}}' "
                   "> \"$TORCHELASTIC_ERROR_FILE\"\nexit 1\n"));
  Subprocess agent({BinPath("ddprun"), "--nnodes=1", "--nproc-per-node=1", "--rdzv-backend=c10d",
                    "--rdzv-endpoint=" + daemon.endpoint(), "--rdzv-id=prod-job",
                    "--rdzv-conf=token_file=" + dir.File("token"), "--max-restarts=0",
                    "--no-python", worker});
  auto st = agent.Wait(60s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 1) << agent.err();
  // The message is there, escaped, where the failure is reported.
  EXPECT_THAT(agent.err(), HasSubstr(absl::StrCat("boom\\n", kForged, "\\x1b[2J")));
  ExpectNothingForged(agent.out() + agent.err(), "ddprun's output");

  Subprocess status({BinPath("ddprun"), "status", "--rdzv-endpoint=" + daemon.endpoint(),
                     "--rdzv-id=prod-job", "--rdzv-conf=token_file=" + dir.File("token")});
  ASSERT_TRUE(status.Wait(30s).has_value());
  ExpectNothingForged(status.out() + status.err(), "ddprun status");

  ExpectNothingForged(daemon.output() + daemon.error(), "ddprun-rdzv's log");
  EXPECT_THAT(daemon.error(), HasSubstr("boom\\n")) << daemon.error();
}

}  // namespace
}  // namespace ddprun
