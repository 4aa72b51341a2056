// rendezvous/auth/token: the bearer check against tampered, truncated and extended tokens, and
// LoadToken's decisions on every kind of bad token file.
#include "rendezvous/auth/token.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"

namespace ddprun::rendezvous {
namespace {

using ::ddprun::testing::TempDir;
using ::ddprun::testing::WriteFile;

constexpr char kToken[] = "s3cr3t-T0ken.with~printable!chars";

TEST(SecureEqualsTest, EqualOnlyForTheSameBytes) {
  EXPECT_TRUE(SecureEquals(kToken, kToken));
  EXPECT_TRUE(SecureEquals("", ""));
  EXPECT_FALSE(SecureEquals("", kToken));
  EXPECT_FALSE(SecureEquals(kToken, ""));
  EXPECT_FALSE(SecureEquals("abc", "abd"));
  EXPECT_FALSE(SecureEquals("abc", "ab"));  // longer than expected
  EXPECT_FALSE(SecureEquals("ab", "abc"));  // a prefix of it
  EXPECT_FALSE(SecureEquals(std::string("ab\0", 3), "ab"));
  EXPECT_FALSE(
      SecureEquals("ab", std::string("ab\0", 3)));  // padding reads as NUL: still the length
}

TEST(SecureEqualsTest, EveryTamperedByteIsRejected) {
  const std::string token = kToken;
  for (size_t i = 0; i < token.size(); ++i) {
    for (unsigned char flip : {0x01, 0x20, 0x80}) {
      std::string tampered = token;
      tampered[i] = static_cast<char>(tampered[i] ^ flip);
      EXPECT_FALSE(SecureEquals(tampered, token)) << "byte " << i << " ^ " << int{flip};
    }
  }
}

TEST(BearerTest, AcceptsExactlyBearerAndTheToken) {
  EXPECT_TRUE(BearerHasToken(absl::StrCat("Bearer ", kToken), kToken));
  EXPECT_EQ(AuthMetadataValue(kToken), absl::StrCat("Bearer ", kToken));
  EXPECT_TRUE(BearerHasToken(AuthMetadataValue(kToken), kToken));
}

TEST(BearerTest, RejectsOtherSchemesSpacingAndTamperedTokens) {
  const std::string token = kToken;
  for (const std::string& value :
       {std::string(""), std::string("Bearer"), std::string("Bearer "), "bearer " + token,
        "BEARER " + token, "Basic " + token, "Bearer  " + token, "Bearer" + token, token,
        "Bearer " + token + " ", "Bearer " + token + "x", "Bearer " + token.substr(1),
        "Bearer " + token.substr(0, token.size() - 1), " Bearer " + token}) {
    EXPECT_FALSE(BearerHasToken(value, token)) << "'" << value << "'";
  }
}

TEST(BearerTest, EmptyTokenMeansNoAuthentication) {
  EXPECT_TRUE(BearerHasToken("", ""));
  EXPECT_TRUE(BearerHasToken("Basic anything", ""));
}

class LoadTokenTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv(kTokenEnv); }
  void TearDown() override { unsetenv(kTokenEnv); }

  // LoadToken of a file holding `contents`; the error message, or "ok:" and the token.
  std::string Load(const std::string& contents) {
    const std::string file = dir_.File("token");
    WriteFile(file, contents, 0600);
    absl::StatusOr<std::string> token = LoadToken(file);
    if (token.ok()) return "ok:" + *token;
    EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument) << token.status();
    return std::string(token.status().message());
  }

  TempDir dir_;
};

TEST_F(LoadTokenTest, FirstLineWithoutSurroundingWhitespace) {
  EXPECT_EQ(Load("  tok en \t\nsecond line\n"), "ok:tok en");
  EXPECT_EQ(Load("tok\r\n"), "ok:tok");
  EXPECT_EQ(Load("tok"), "ok:tok");
}

TEST_F(LoadTokenTest, FileWinsOverTheEnvironment) {
  setenv(kTokenEnv, "from-env", 1);
  EXPECT_EQ(Load("from-file\n"), "ok:from-file");
}

TEST_F(LoadTokenTest, EmptyFileAndEmptyFirstLineAreToldApart) {
  const std::string file = dir_.File("token");
  EXPECT_EQ(Load(""), absl::StrCat("token_file: ", file, " is empty"));
  EXPECT_EQ(Load(" \n\t\n"), absl::StrCat("token_file: ", file, " is empty"));
  EXPECT_EQ(Load("\ntoken-on-line-2\n"),
            absl::StrCat("token_file: ", file, "'s first line is empty"));
}

TEST_F(LoadTokenTest, BinaryFileIsRefusedAtItsFirstNul) {
  const std::string file = dir_.File("token");
  EXPECT_EQ(Load(std::string("tok\nab\0c", 8)),
            absl::StrCat("token_file: ", file, " is not a text file (a NUL byte at offset 6)"));
}

TEST_F(LoadTokenTest, NonPrintableByteIsNamedWithItsColumn) {
  const std::string file = dir_.File("token");
  EXPECT_EQ(Load("ab\x7f"
                 "c\n"),
            absl::StrCat("token_file: ", file,
                         ": the token (its first line) has byte 0x7f at column 3; it must be "
                         "printable ASCII"));
  EXPECT_TRUE(absl::StrContains(Load("tok\x01\n"), "byte 0x01 at column 4")) << Load("tok\x01\n");
  EXPECT_TRUE(absl::StrContains(Load("t\xc3\xa9\n"), "byte 0xc3 at column 2"));
  EXPECT_TRUE(absl::StrContains(Load("a\tb\n"), "byte 0x09 at column 2"));
  // Only the first line is the token: what follows may be anything but NUL.
  EXPECT_EQ(Load("tok\n\x7f\x01\n"), "ok:tok");
}

TEST_F(LoadTokenTest, UnreadableFilesNameTheFile) {
  const std::string missing = dir_.File("missing");
  absl::StatusOr<std::string> token = LoadToken(missing);
  ASSERT_FALSE(token.ok());
  EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StartsWith(token.status().message(), absl::StrCat("token_file: cannot read ", missing)))
      << token.status();

  token = LoadToken(dir_.path());
  ASSERT_FALSE(token.ok());
  EXPECT_EQ(token.status().message(), absl::StrCat("token_file: ", dir_.path(), " is a directory"));

  const std::string fifo = dir_.File("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  token = LoadToken(fifo);  // must not block waiting for a writer
  ASSERT_FALSE(token.ok());
  EXPECT_EQ(token.status().message(), absl::StrCat("token_file: ", fifo, " is a FIFO"));

  const std::string big = dir_.File("big");
  WriteFile(big, std::string((1 << 20) + 1, 'x'));
  token = LoadToken(big);
  ASSERT_FALSE(token.ok());
  EXPECT_TRUE(absl::StrContains(token.status().message(), "more than the 1048576 read"))
      << token.status();
}

TEST_F(LoadTokenTest, WithoutAFileTheEnvironmentStrippedOrNothing) {
  EXPECT_EQ(LoadToken("").value(), "");
  setenv(kTokenEnv, "  env-token \n", 1);
  EXPECT_EQ(LoadToken("").value(), "env-token");
  setenv(kTokenEnv, "", 1);
  EXPECT_EQ(LoadToken("").value(), "");
}

TEST_F(LoadTokenTest, TokenFromTheEnvironmentMustBePrintableAsciiToo) {
  // It travels in the same header: gRPC aborts the process on a value it may not carry (a
  // non-ASCII token made `ddprun status` exit 134), and a server with it refuses every agent.
  for (const auto& [value, byte] :
       std::vector<std::pair<std::string, std::string>>{{"t\xc3\xb6k", "byte 0xc3 at column 2"},
                                                        {"tok\x01", "byte 0x01 at column 4"},
                                                        {" a\tb ", "byte 0x09 at column 2"},
                                                        {"ab\x7f", "byte 0x7f at column 3"}}) {
    setenv(kTokenEnv, value.c_str(), 1);
    absl::StatusOr<std::string> token = LoadToken("");
    ASSERT_FALSE(token.ok()) << value;
    EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(token.status().message(), absl::StrCat("DDPRUN_RDZV_TOKEN: the token has ", byte,
                                                     "; it must be printable ASCII"));
  }
}

}  // namespace
}  // namespace ddprun::rendezvous
