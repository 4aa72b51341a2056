// The value parsers every flag, YAML key and variable goes through: whole-string values, ranges
// and messages that name the flag and the value.
#include "common/strings.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun {
namespace {

using ::testing::HasSubstr;

TEST(ParseIntTest, WholeStringInRange) {
  EXPECT_EQ(*ParseInt("--n", "42", 0, 100), 42);
  EXPECT_EQ(*ParseInt("--n", "-3", -5, 5), -3);
  EXPECT_EQ(*ParseInt("--n", " 7\n", 0, 100), 7);  // surrounding white space, as YAML gives it
  for (const char* bad : {"", "4x", "4 4", "1e3", "0x10", "101", "-1"}) {
    absl::StatusOr<int64_t> r = ParseInt("--n", bad, 0, 100);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("--n")) << bad;
  }
  EXPECT_FALSE(ParseInt("--n", "99999999999999999999999", 0, INT64_MAX).ok());  // overflow
}

TEST(ParseSecondsTest, DecimalSecondsToMilliseconds) {
  EXPECT_EQ(ParseSeconds("--t", "0.1")->count(), 100);
  EXPECT_EQ(ParseSeconds("--t", "30")->count(), 30000);
  EXPECT_EQ(ParseSeconds("--t", "0")->count(), 0);
  for (const char* bad : {"", "-1", "abc", "1s"}) {
    absl::StatusOr<std::chrono::milliseconds> r = ParseSeconds("--t", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("--t")) << bad;
  }
}

TEST(ParseBoolTest, TheUsualSpellingsAndNothingElse) {
  for (const char* yes : {"true", "TRUE", "1", "yes", "On"}) EXPECT_TRUE(*ParseBool("x", yes));
  for (const char* no : {"false", "0", "no", "OFF"}) EXPECT_FALSE(*ParseBool("x", no));
  for (const char* bad : {"", "2", "y", "truee"}) EXPECT_FALSE(ParseBool("x", bad).ok()) << bad;
}

TEST(HostPortTest, ParsesAndFormatsIpv4Ipv6AndNames) {
  HostPort hp = *ParseHostPort("--e", "node0:29400", 1);
  EXPECT_EQ(hp.host, "node0");
  EXPECT_EQ(hp.port, 29400);
  hp = *ParseHostPort("--e", "node0", 29400);
  EXPECT_EQ(hp.port, 29400);
  hp = *ParseHostPort("--e", "[::1]:5", 0);
  EXPECT_EQ(hp.host, "::1");
  EXPECT_EQ(hp.port, 5);
  hp = *ParseHostPort("--e", "::1", 7);
  EXPECT_EQ(hp.host, "::1");
  EXPECT_EQ(hp.port, 7);
  EXPECT_EQ(FormatHostPort("::1", 5), "[::1]:5");
  EXPECT_EQ(FormatHostPort("1.2.3.4", 5), "1.2.3.4:5");
  EXPECT_FALSE(ParseHostPort("--e", "host:notaport", 0).ok());
  EXPECT_FALSE(ParseHostPort("--e", "host:70000", 0).ok());
}

TEST(RandomHexTest, LengthAlphabetAndDistinctValues) {
  const std::string a = RandomHex(8), b = RandomHex(8);
  EXPECT_EQ(a.size(), 16u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace ddprun
