// docs/reference/flags.md against the flag table: the committed page is what the table generates
// (`make flag-reference` rewrites it). flag_help_test.cc checks it against the real --help.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/config/cli.h"
#include "tests/testing/test_env.h"

namespace ddprun::launcher {
namespace {

const char kRegenerate[] =
    "docs/reference/flags.md is not what the flag table generates: run "
    "`make flag-reference` and commit the result";

TEST(FlagReferenceTest, CommittedPageIsWhatTheFlagTableGenerates) {
  const std::string committed = testing::ReadFile(testing::SourcePath("docs/reference/flags.md"));
  const std::string generated = FlagReferenceMarkdown();
  EXPECT_TRUE(committed == generated) << testing::FirstDifference(generated, committed) << "\n"
                                      << kRegenerate;
}

}  // namespace
}  // namespace ddprun::launcher
