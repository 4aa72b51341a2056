#include "common/temp_dir.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ddprun {
namespace {

// Sets TMPDIR for one test and puts back what was there.
class ScopedTmpdir {
 public:
  explicit ScopedTmpdir(const char* value) {
    if (const char* old = getenv("TMPDIR"); old != nullptr) old_ = old;
    if (value != nullptr) {
      setenv("TMPDIR", value, 1);
    } else {
      unsetenv("TMPDIR");
    }
  }
  ~ScopedTmpdir() {
    if (old_.has_value()) {
      setenv("TMPDIR", old_->c_str(), 1);
    } else {
      unsetenv("TMPDIR");
    }
  }

 private:
  std::optional<std::string> old_;
};

TEST(MakeTempDirTest, CreatesAPrivateDirectoryUnderTmpdir) {
  const std::string base = testing::TempDir() + "temp_dir_test";
  std::filesystem::create_directories(base);
  ScopedTmpdir tmpdir(base.c_str());

  absl::StatusOr<std::string> dir = MakeTempDir("ddprun-x");
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_TRUE(absl::StartsWith(*dir, base + "/ddprun-x-")) << *dir;
  EXPECT_EQ(dir->size(), base.size() + std::string("/ddprun-x-XXXXXX").size());
  struct stat st {};
  ASSERT_EQ(stat(dir->c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700);

  absl::StatusOr<std::string> other = MakeTempDir("ddprun-x");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(*dir, *other);
  std::filesystem::remove_all(base);
}

TEST(MakeTempDirTest, FallsBackToTmpWithoutTmpdir) {
  ScopedTmpdir tmpdir(nullptr);
  absl::StatusOr<std::string> dir = MakeTempDir("ddprun-temp-dir-test");
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_TRUE(absl::StartsWith(*dir, "/tmp/ddprun-temp-dir-test-")) << *dir;
  EXPECT_TRUE(std::filesystem::is_directory(*dir));
  std::filesystem::remove_all(*dir);
}

TEST(MakeTempDirTest, ReportsAMissingTmpdirAsInternal) {
  ScopedTmpdir tmpdir("/nonexistent/ddprun-temp-dir-test");
  absl::StatusOr<std::string> dir = MakeTempDir("ddprun");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(dir.status().message(),
                                "mkdtemp /nonexistent/ddprun-temp-dir-test/ddprun-"))
      << dir.status();
}

}  // namespace
}  // namespace ddprun
