// --fault=hang@STEP:RANK: what parses, what is refused (naming the flag and the value), and when
// the fault is due. The hang itself runs as a real process in ddp_train_test.
#include "trainer/io/fault_injection.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun::trainer {
namespace {

using ::testing::HasSubstr;

TEST(FaultInjectionTest, ParsesStepAndRank) {
  absl::StatusOr<HangFault> f = ParseFault("hang@3:1");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->step, 3);
  EXPECT_EQ(f->rank, 1);
  f = ParseFault("hang@0:0");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->step, 0);
  f = ParseFault("hang@123456789012:17");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->step, 123456789012);
  EXPECT_EQ(f->rank, 17);
}

TEST(FaultInjectionTest, RefusesAnythingElseNamingFlagAndValue) {
  for (const std::string bad :
       {"", "hang", "hang@", "hang@3", "hang@3:", "hang@:1", "hang@-1:0", "hang@3:-1", "hang@+3:1",
        "hang@ 3:1", "hang@3:1:2", "hang@3.5:1", "hang@3:1x", "crash@3:1", "HANG@3:1",
        "hang@99999999999999999999:0", "hang@3:99999999999"}) {
    absl::StatusOr<HangFault> f = ParseFault(bad);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(f.status().message()), HasSubstr("--fault"));
    EXPECT_THAT(std::string(f.status().message()), HasSubstr("'" + bad + "'"));
  }
}

TEST(FaultInjectionTest, DueOnItsRankAndStepInTheFirstAttemptOnly) {
  const HangFault f{3, 1};
  EXPECT_TRUE(FaultDue(f, /*rank=*/1, /*step=*/3, /*restart_count=*/0));
  EXPECT_FALSE(FaultDue(f, 0, 3, 0));
  EXPECT_FALSE(FaultDue(f, 1, 2, 0));
  EXPECT_FALSE(FaultDue(f, 1, 4, 0));
  EXPECT_FALSE(FaultDue(f, 1, 3, 1));  // a restarted group finishes
}

}  // namespace
}  // namespace ddprun::trainer
