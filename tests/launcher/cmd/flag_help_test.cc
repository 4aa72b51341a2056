// docs/reference/flags.md against the real `ddprun --help`: every flag --help prints is in the
// page, and every flag the page lists is in --help. It runs the built program, so it is an
// integration test (the sanitizer and cross builds run unit tests only and build no ddprun).
#include <chrono>
#include <regex>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun::launcher {
namespace {

const char kRegenerate[] =
    "docs/reference/flags.md is not what the flag table generates: run "
    "`make flag-reference` and commit the result";

// Every -x / --long-name in `text` matched by `pattern` (its group 1).
std::set<std::string> Matches(const std::string& text, const std::string& pattern) {
  std::set<std::string> out;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it) {
    out.insert((*it)[1].str());
  }
  return out;
}

TEST(FlagReferenceTest, EveryFlagOfDdprunHelpIsInTheReferenceAndBack) {
  testing::Subprocess help({testing::BinPath("ddprun"), "--help"});
  auto status = help.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value());
  ASSERT_EQ(status->exit_code, 0) << help.err();
  // Option lines of --help: "  -m, --module" or "  --nnodes=VALUE" (two spaces, then a dash).
  std::set<std::string> in_help;
  const std::string out = help.out();
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (!absl::StartsWith(line, "  -")) continue;
    for (absl::string_view name : absl::StrSplit(line.substr(2), ", ")) {
      in_help.insert(std::string(name.substr(0, name.find('='))));
    }
  }
  ASSERT_GT(in_help.size(), 50u) << help.out();
  const std::string page = testing::ReadFile(testing::SourcePath("docs/reference/flags.md"));
  // Table cells of the page: "| `--nnodes` |" or "`-m`, `--module`".
  const std::set<std::string> in_page = Matches(page, R"(`(--?[a-z][a-z0-9_-]*)`(?:, | \|))");
  for (const std::string& flag : in_help) {
    EXPECT_EQ(in_page.count(flag), 1u)
        << flag << " is in ddprun --help but not in the reference; " << kRegenerate;
  }
  for (const std::string& flag : in_page) {
    EXPECT_EQ(in_help.count(flag), 1u) << flag << " is in the reference but not in ddprun --help";
  }
}

}  // namespace
}  // namespace ddprun::launcher
