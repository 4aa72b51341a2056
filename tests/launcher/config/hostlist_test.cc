// Slurm hostlist expansion: every form Slurm writes, malformed lists refused with the list and
// the position, and a randomized round trip (generate hosts, format, expand, compare) plus random
// bytes that must never crash the parser.
#include "launcher/config/hostlist.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

namespace ddprun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Expand(const std::string& list) {
  auto hosts = ExpandHostlist(list);
  EXPECT_TRUE(hosts.ok()) << list << ": " << hosts.status();
  return hosts.ok() ? *hosts : std::vector<std::string>{};
}

std::string ErrorOf(const std::string& list) {
  auto hosts = ExpandHostlist(list);
  EXPECT_FALSE(hosts.ok()) << list << " expanded";
  if (hosts.ok()) return "";
  EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(hosts.status().message());
}

TEST(HostlistTest, SingleHost) { EXPECT_THAT(Expand("node7"), ElementsAre("node7")); }

TEST(HostlistTest, CommaList) {
  EXPECT_THAT(Expand("a,b.example.com,c_1"), ElementsAre("a", "b.example.com", "c_1"));
}

TEST(HostlistTest, Range) { EXPECT_THAT(Expand("n[1-3]"), ElementsAre("n1", "n2", "n3")); }

TEST(HostlistTest, SingleNumberInBrackets) { EXPECT_THAT(Expand("n[5]"), ElementsAre("n5")); }

TEST(HostlistTest, ZeroPaddingFollowsTheLowerBound) {
  EXPECT_THAT(Expand("n[08-11]"), ElementsAre("n08", "n09", "n10", "n11"));
  EXPECT_THAT(Expand("n[098-101]"), ElementsAre("n098", "n099", "n100", "n101"));
  // Slurm pads to the width of the lower bound; a wider upper bound simply grows.
  EXPECT_THAT(Expand("n[9-10]"), ElementsAre("n9", "n10"));
}

TEST(HostlistTest, SeveralRangesAndEntries) {
  EXPECT_THAT(
      Expand("gpu-a[01-04,07],gpu-b[1-2]"),
      ElementsAre("gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04", "gpu-a07", "gpu-b1", "gpu-b2"));
}

TEST(HostlistTest, SuffixAfterBracket) {
  EXPECT_THAT(Expand("n[1-2]-ib"), ElementsAre("n1-ib", "n2-ib"));
}

TEST(HostlistTest, SeveralBracketsAreACartesianProductFirstOutermost) {
  EXPECT_THAT(Expand("r[1-2]n[01-02]"), ElementsAre("r1n01", "r1n02", "r2n01", "r2n02"));
}

TEST(HostlistTest, OrderIsKeptAndNothingIsDeduplicated) {
  EXPECT_THAT(Expand("z1,a[3,1],z1"), ElementsAre("z1", "a3", "a1", "z1"));
}

TEST(HostlistTest, BracketOnly) { EXPECT_THAT(Expand("[1-2]"), ElementsAre("1", "2")); }

TEST(HostlistTest, FirstHostValidatesTheWholeList) {
  EXPECT_EQ(*FirstHost("gpu-a[01-04,07],gpu-b[1-2]"), "gpu-a01");
  EXPECT_FALSE(FirstHost("n1,n[2-").ok());
}

TEST(HostlistTest, MalformedListsNameTheListAndThePosition) {
  EXPECT_EQ(ErrorOf("n[1-"), "hostlist 'n[1-': expected a number at position 4");
  EXPECT_EQ(ErrorOf("n[1-2"), "hostlist 'n[1-2': unterminated '[' at position 1");
  EXPECT_EQ(ErrorOf("n[3-1]"), "hostlist 'n[3-1]': range 3-1 runs backwards at position 2");
  EXPECT_EQ(ErrorOf("n1]"), "hostlist 'n1]': ']' without '[' at position 2");
  EXPECT_EQ(ErrorOf("n[a]"), "hostlist 'n[a]': expected a number but found 'a' at position 2");
  EXPECT_EQ(ErrorOf("n[1;2]"),
            "hostlist 'n[1;2]': expected ',', '-' or ']' but found ';' at position 3");
  EXPECT_EQ(ErrorOf("n[]"), "hostlist 'n[]': expected a number but found ']' at position 2");
  EXPECT_EQ(ErrorOf(""), "hostlist '': the list is empty at position 0");
  EXPECT_EQ(ErrorOf("a,,b"), "hostlist 'a,,b': empty host name at position 2");
  EXPECT_EQ(ErrorOf("a,"), "hostlist 'a,': empty host name after ',' at position 2");
  EXPECT_EQ(ErrorOf("a b"), "hostlist 'a b': unexpected character ' ' at position 1");
  EXPECT_THAT(ErrorOf(std::string("a\x01")), HasSubstr("byte 0x01 at position 1"));
  EXPECT_THAT(ErrorOf("n[1-1234567890123456789]"), HasSubstr("number too long"));
}

TEST(HostlistTest, HugeExpansionsAreRefusedNotAllocated) {
  EXPECT_THAT(ErrorOf("n[0-999999999999]"), HasSubstr("expands to more than 65536 hosts"));
  EXPECT_THAT(ErrorOf("a[0-999]b[0-999]"), HasSubstr("expands to more than 65536 hosts"));
  EXPECT_EQ(Expand("n[1-65536]").size(), 65536u);
}

TEST(HostlistTest, FormatCompresses) {
  EXPECT_EQ(
      FormatHostlist({"gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04", "gpu-a07", "gpu-b1", "gpu-b2"}),
      "gpu-a[01-04,07],gpu-b[1-2]");
  EXPECT_EQ(FormatHostlist({"login", "n9", "n10"}), "login,n9,n10");
  EXPECT_EQ(FormatHostlist({}), "");
}

// Random host names (prefixes with digits and separators, numbers with and without padding,
// runs and gaps), formatted and expanded again.
TEST(HostlistTest, RandomizedRoundTrip) {
  std::mt19937 rng(12345);
  const std::vector<std::string> prefixes = {"n", "gpu-a", "gpu-b", "r1n", "x.y-", "", "c_"};
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<std::string> hosts;
    const int groups = 1 + rng() % 5;
    for (int g = 0; g < groups; ++g) {
      const std::string prefix = prefixes[rng() % prefixes.size()];
      const int width = rng() % 4;  // 0: no number
      if (width == 0) {
        hosts.push_back(prefix.empty() ? "login" : prefix + "z");
        continue;
      }
      int value = rng() % 120;
      const int run = 1 + rng() % 6;
      for (int i = 0; i < run; ++i) {
        std::string digits = std::to_string(value);
        if (rng() % 2 && digits.size() < static_cast<size_t>(width)) {
          digits.insert(0, width - digits.size(), '0');
        }
        hosts.push_back(prefix + digits);
        value += 1 + (rng() % 4 == 0 ? rng() % 5 : 0);
      }
    }
    const std::string list = FormatHostlist(hosts);
    auto back = ExpandHostlist(list);
    ASSERT_TRUE(back.ok()) << list << ": " << back.status();
    ASSERT_EQ(*back, hosts) << list;
  }
}

// Random bytes drawn mostly from the hostlist alphabet: the parser returns (an expansion or an
// error), never crashes or runs away; and what it accepts formats back to the same hosts.
TEST(HostlistTest, RandomInputNeverCrashes) {
  std::mt19937 rng(777);
  const std::string alphabet = "n0123456789[]-,.a";
  for (int iter = 0; iter < 20000; ++iter) {
    std::string input;
    const int len = rng() % 24;
    for (int i = 0; i < len; ++i) {
      input.push_back(rng() % 16 == 0 ? static_cast<char>(rng() % 256)
                                      : alphabet[rng() % alphabet.size()]);
    }
    auto hosts = ExpandHostlist(input);
    if (!hosts.ok()) {
      EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument) << input;
      continue;
    }
    ASSERT_LE(hosts->size(), kMaxHostlistHosts);
    auto again = ExpandHostlist(FormatHostlist(*hosts));
    ASSERT_TRUE(again.ok()) << input;
    ASSERT_EQ(*again, *hosts) << input;
  }
}

}  // namespace
}  // namespace ddprun::launcher
