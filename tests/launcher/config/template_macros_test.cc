#include "launcher/config/template_macros.h"

#include "gtest/gtest.h"

namespace ddprun::launcher {
namespace {

// Each case checked against Python's string.Template("...").safe_substitute(local_rank="3"),
// which is what torchrun runs on every argument.
TEST(SubstituteMacrosTest, MatchesTorchrunsTemplateSubstitution) {
  EXPECT_EQ(SubstituteMacros("--gpu=${local_rank}", 3), "--gpu=3");
  EXPECT_EQ(SubstituteMacros("--gpu=$local_rank", 3), "--gpu=3");
  EXPECT_EQ(SubstituteMacros("out_${local_rank}.log", 3), "out_3.log");
  EXPECT_EQ(SubstituteMacros("$local_rank.log", 3), "3.log");
  EXPECT_EQ(SubstituteMacros("$$local_rank", 3), "$local_rank");
  EXPECT_EQ(SubstituteMacros("cost=$$5", 3), "cost=$5");
  EXPECT_EQ(SubstituteMacros("$local_ranks", 3), "$local_ranks");  // another name
  EXPECT_EQ(SubstituteMacros("$LOCAL_RANK", 3), "$LOCAL_RANK");    // names are case-sensitive
  EXPECT_EQ(SubstituteMacros("$HOME/${USER}", 3), "$HOME/${USER}");
  EXPECT_EQ(SubstituteMacros("${local_rank", 3), "${local_rank");  // unclosed
  EXPECT_EQ(SubstituteMacros("${ local_rank}", 3), "${ local_rank}");
  EXPECT_EQ(SubstituteMacros("a$", 3), "a$");
  EXPECT_EQ(SubstituteMacros("$5 and $", 3), "$5 and $");
  EXPECT_EQ(SubstituteMacros("${local_rank}${local_rank}$local_rank", 12), "121212");
  EXPECT_EQ(SubstituteMacros("", 3), "");
}

}  // namespace
}  // namespace ddprun::launcher
