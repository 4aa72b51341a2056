#include "launcher/workers/error_file_relay.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/testing/test_env.h"

namespace ddprun::launcher {
namespace {

TEST(ErrorFileRelayTest, CopiesTheWorkersFileWithItsErrorCode) {
  testing::TempDir dir;
  testing::WriteFile(
      dir.File("worker.json"),
      R"({"message": {"message": "ValueError: x", "extraInfo": {"timestamp": "1"}}})");
  ASSERT_TRUE(RelayErrorFile(dir.File("worker.json"), dir.File("parent.json"), -9).ok());
  EXPECT_EQ(
      testing::ReadFile(dir.File("parent.json")),
      R"({"message":{"errorCode":-9,"extraInfo":{"timestamp":"1"},"message":"ValueError: x"}})");
  // A plain-string message (ddp-train's older form) is copied as it is.
  testing::WriteFile(dir.File("worker.json"), R"({"message": "boom"})");
  ASSERT_TRUE(RelayErrorFile(dir.File("worker.json"), dir.File("parent.json"), 3).ok());
  EXPECT_EQ(testing::ReadFile(dir.File("parent.json")), R"({"message":"boom"})");
}

TEST(ErrorFileRelayTest, NoFileOrJunkLeavesTheParentFileAlone) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("parent.json"), "earlier");
  EXPECT_TRUE(
      absl::IsNotFound(RelayErrorFile(dir.File("missing.json"), dir.File("parent.json"), 1)));
  testing::WriteFile(dir.File("junk.json"), "{not json");
  const absl::Status junk = RelayErrorFile(dir.File("junk.json"), dir.File("parent.json"), 1);
  EXPECT_TRUE(absl::IsInvalidArgument(junk)) << junk;
  EXPECT_EQ(testing::ReadFile(dir.File("parent.json")), "earlier");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 2);  // no temp
}

}  // namespace
}  // namespace ddprun::launcher
