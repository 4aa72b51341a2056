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

// Issue 28 #10: 1e19 s overflowed the milliseconds (workers got no grace at all); values that
// are not finite or beyond kMaxSeconds are refused, naming the flag.
TEST(ParseSecondsTest, RefusesNonFiniteAndValuesBeyondTheBound) {
  EXPECT_EQ(ParseSeconds("--t", "8640000")->count(), int64_t{8640000} * 1000);
  for (const char* bad : {"1e19", "9.3e9", "8640000.5", "1e300", "nan", "inf", "-inf", "-0.5"}) {
    absl::StatusOr<std::chrono::milliseconds> r = ParseSeconds("--stop-timeout", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("--stop-timeout=")) << bad;
  }
  EXPECT_THAT(std::string(ParseSeconds("--t", "1e19").status().message()),
              HasSubstr("at most 8640000"));
}

// Messages quote what the user gave on one line, however long or odd it was.
TEST(ValueForMessageTest, EscapesControlCharactersAndShortensLongValues) {
  EXPECT_EQ(ValueForMessage("abc"), "abc");
  EXPECT_EQ(ValueForMessage("a\nb"), "a\\nb");
  EXPECT_EQ(ValueForMessage("a\nb\x01"), "a\\nb\\001");
  const std::string shown = ValueForMessage(std::string(10000, 'x'));
  EXPECT_LT(shown.size(), 120u);
  EXPECT_THAT(shown, HasSubstr("(10000 bytes)"));
  EXPECT_EQ(ParseInt("--n", std::string(5000, '7'), 0, 9).status().message().find('\n'),
            absl::string_view::npos);
  EXPECT_LT(ParseInt("--n", std::string(5000, '7'), 0, 9).status().message().size(), 200u);
}

// issue 43, D2: foreign text printed by ddprun cannot forge a line or steer a terminal.
TEST(PrintableTest, ControlCharactersAndBrokenUtf8AreShownNotObeyed) {
  EXPECT_EQ(Printable("plain text: 1.5 MiB"), "plain text: 1.5 MiB");
  EXPECT_EQ(Printable("x\n[ddprun-rdzv] run 'prod-job': closing OK"),
            "x\\n[ddprun-rdzv] run 'prod-job': closing OK");
  EXPECT_EQ(Printable("\x1b[2J\r\t\x7f\x01"), "\\x1b[2J\\r\\t\\x7f\\x01");
  EXPECT_EQ(Printable("caf\xc3\xa9 \xe2\x9c\x93"), "caf\xc3\xa9 \xe2\x9c\x93");  // UTF-8 stays
  EXPECT_EQ(Printable("\xc2\x9b"
                      "2J"),
            "\\u009b2J");                                   // C1 CSI
  EXPECT_EQ(Printable("\x9b\xff\xc3"), "\\x9b\\xff\\xc3");  // not UTF-8
  EXPECT_EQ(Printable(std::string("a\0b", 3)), "a\\x00b");
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
  EXPECT_TRUE(IsLoopbackHost("127.0.1.1"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("node127"));
  EXPECT_EQ(FormatHostPort("1.2.3.4", 5), "1.2.3.4:5");
  EXPECT_FALSE(ParseHostPort("--e", "host:notaport", 0).ok());
  EXPECT_FALSE(ParseHostPort("--e", "host:70000", 0).ok());
}

// Issue 28 #16: text that is not one host[:port] was taken for a bare IPv6 address (ddprun then
// hosted [::]:29400 and failed later).
TEST(HostPortTest, RefusesWhatIsNotOneHostAndPort) {
  for (const char* good : {"node-0.example.com:5", "node_0", "10.0.0.1", "::1", "fe80::1%eth0",
                           "[2001:db8::1]:29400", "[::ffff:10.0.0.1]"}) {
    EXPECT_TRUE(ParseHostPort("--e", good, 1).ok()) << good;
  }
  for (const char* bad :
       {"127.0.0.1:1:2", "http://host:29400", "a:1,b:2", "host name:5", "[nothex]:5", "[::1",
        "1:2:3", "host:", ":5", "ho\nst:5", "[]:5", "host:+5", "host:05x"}) {
    absl::StatusOr<HostPort> r = ParseHostPort("--rdzv-endpoint", bad, 1);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("--rdzv-endpoint=")) << bad;
  }
  EXPECT_FALSE(ParseHostPort("--e", std::string(300, 'a'), 1).ok());
}

TEST(RandomHexTest, LengthAlphabetAndDistinctValues) {
  const std::string a = RandomHex(8), b = RandomHex(8);
  EXPECT_EQ(a.size(), 16u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace ddprun
