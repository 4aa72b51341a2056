// Error files are the worker's: the agent reads them without blocking on a FIFO, without
// throwing on a directory and without reading more than a bound (issue 28, points 5 and 8).
#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>

#include "common/file_text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/workers/error_file_relay.h"
#include "tests/testing/test_env.h"

namespace ddprun::launcher {
namespace {

using ::testing::HasSubstr;

TEST(ErrorFileTest, RegularFileIsReadWhole) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("e.json"), "{\"message\": \"boom\"}");
  EXPECT_EQ(*ReadBoundedFile(dir.File("e.json"), kMaxErrorFileBytes), "{\"message\": \"boom\"}");
  EXPECT_TRUE(absl::IsNotFound(ReadBoundedFile(dir.File("missing"), kMaxErrorFileBytes).status()));
}

TEST(ErrorFileTest, AFifoIsRefusedAtOnceInsteadOfBlocking) {
  testing::TempDir dir;
  ASSERT_EQ(mkfifo(dir.File("fifo").c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> r = ReadBoundedFile(dir.File("fifo"), kMaxErrorFileBytes);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("is a FIFO"));
  // The relay to a parent launcher says so too, and leaves the parent's file alone.
  absl::Status relay = RelayErrorFile(dir.File("fifo"), dir.File("parent.json"), 1);
  EXPECT_EQ(relay.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(relay.message()), HasSubstr("is a FIFO"));
}

TEST(ErrorFileTest, ADirectoryAndAnOversizedFileAreRefusedNamingThem) {
  testing::TempDir dir;
  ASSERT_EQ(mkdir(dir.File("d").c_str(), 0700), 0);
  absl::StatusOr<std::string> r = ReadBoundedFile(dir.File("d"), kMaxErrorFileBytes);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("d is a directory"));
  testing::WriteFile(dir.File("big"), std::string(2000, 'x'));
  r = ReadBoundedFile(dir.File("big"), 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("2000 bytes"));
}

}  // namespace
}  // namespace ddprun::launcher
