#include "launcher/config/rdzv_conf.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun::launcher {
namespace {

using ::testing::HasSubstr;

TEST(ParseRdzvConfTest, CloseTimeoutIsPassedOnOnlyWhenGiven) {
  absl::StatusOr<RdzvConf> unset = ParseRdzvConf({{"read_timeout", "7"}});
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_FALSE(unset->close_timeout.has_value());  // the backend's own bound
  EXPECT_EQ(unset->read_timeout, std::chrono::milliseconds(7000));

  absl::StatusOr<RdzvConf> set = ParseRdzvConf({{"close_timeout", "0.5"}});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->close_timeout, std::chrono::milliseconds(500));
}

TEST(ParseRdzvConfTest, FailureLastCallIsUnsetUnlessGiven) {
  absl::StatusOr<RdzvConf> unset = ParseRdzvConf({{"last_call_timeout", "3"}});
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_FALSE(unset->timeouts.failure_last_call_timeout.has_value());
  absl::StatusOr<RdzvConf> zero = ParseRdzvConf({{"failure_last_call_timeout", "0"}});
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(zero->timeouts.failure_last_call_timeout, std::chrono::milliseconds(0));
  absl::StatusOr<RdzvConf> bad = ParseRdzvConf({{"failure_last_call_timeout", "later"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("failure_last_call_timeout"));
}

TEST(ParseRdzvConfTest, BadValuesAndUnknownKeysNameTheKey) {
  absl::StatusOr<RdzvConf> bad = ParseRdzvConf({{"close_timeout", "soon"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("close_timeout"));
  EXPECT_THAT(bad.status().message(), HasSubstr("soon"));
  absl::StatusOr<RdzvConf> unknown = ParseRdzvConf({{"close_timout", "1"}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("--rdzv-conf close_timout=1: unknown key"));
}

}  // namespace
}  // namespace ddprun::launcher
