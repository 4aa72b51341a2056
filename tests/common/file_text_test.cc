// Small files read whole: a missing file is "" for ReadTextFile and an error naming it for
// ReadRequiredFile; the environment as a map.
#include "common/file_text.h"

#include <stdlib.h>

#include <fstream>

#include "common/environment.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using ::testing::HasSubstr;

TEST(FileTextTest, WholeContentsOrEmptyOrAnErrorNamingTheFile) {
  testing::TempDir dir;
  const std::string path = dir.File("token");
  testing::WriteFile(path, std::string("line one\nline two\0binary", 24));
  EXPECT_EQ(ReadTextFile(path).size(), 24u);
  EXPECT_EQ(*ReadRequiredFile("token_file", path), ReadTextFile(path));

  EXPECT_EQ(ReadTextFile(dir.File("missing")), "");
  absl::StatusOr<std::string> r = ReadRequiredFile("TLS key", dir.File("missing"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("TLS key: cannot read"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("missing"));
}

TEST(EnvironmentTest, CurrentEnvironmentSeesSetAndUnsetVariables) {
  ASSERT_EQ(setenv("DDPRUN_COMMON_TEST_VAR", "a=b c", 1), 0);
  Environment env = CurrentEnvironment();
  EXPECT_EQ(env.at("DDPRUN_COMMON_TEST_VAR"), "a=b c");  // split at the first '=' only
  ASSERT_EQ(unsetenv("DDPRUN_COMMON_TEST_VAR"), 0);
  EXPECT_EQ(CurrentEnvironment().count("DDPRUN_COMMON_TEST_VAR"), 0u);
}

}  // namespace
}  // namespace ddprun
