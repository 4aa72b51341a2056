#include "trainer/io/checkpoint_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"
#include "trainer/io/file_env.h"

namespace ddprun::trainer {
namespace {

using ::ddprun::testing::ReadFile;
using ::ddprun::testing::TempDir;
using ::ddprun::testing::WriteFile;
using ::testing::HasSubstr;

// Runs f() on a thread; if it is still blocked after a few seconds (opening a FIFO blocks until
// a writer comes), records a failure and unblocks it by briefly opening each FIFO for writing.
template <typename F>
auto RunUnblockingFifos(F f, const std::vector<std::string>& fifos) {
  auto done = std::async(std::launch::async, f);
  if (done.wait_for(std::chrono::seconds(5)) == std::future_status::timeout) {
    ADD_FAILURE() << "blocked on a FIFO";
    while (done.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout) {
      for (const std::string& fifo : fifos) {
        const int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
        if (fd >= 0) close(fd);
      }
    }
  }
  return done.get();
}

// Wraps files so that writes can fail with ENOSPC after a byte budget ("full disk") or
// silently lose everything past the budget while reporting success ("torn write": the machine
// died before the page cache reached the disk, yet the rename survived).
class FaultInjectingEnv : public FileEnvWrapper {
 public:
  enum class Mode { kNone, kDiskFull, kTornWrite, kFailRename };
  using FileEnvWrapper::FileEnvWrapper;

  void Arm(Mode mode, int64_t budget_bytes) {
    mode_ = mode;
    budget_ = budget_bytes;
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    absl::StatusOr<std::unique_ptr<WritableFile>> f = base_->NewWritableFile(path);
    if (!f.ok() || mode_ == Mode::kNone || mode_ == Mode::kFailRename) return f;
    return std::unique_ptr<WritableFile>(new FaultyFile(std::move(*f), this));
  }
  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    if (mode_ == Mode::kFailRename) return absl::InternalError("injected rename failure");
    return base_->RenameFile(from, to);
  }

 private:
  class FaultyFile : public WritableFile {
   public:
    FaultyFile(std::unique_ptr<WritableFile> base, FaultInjectingEnv* env)
        : base_(std::move(base)), env_(env) {}
    absl::Status Append(absl::string_view data) override {
      const int64_t room = std::max<int64_t>(env_->budget_, 0);
      const size_t n = std::min<size_t>(data.size(), room);
      env_->budget_ -= n;
      absl::Status s = base_->Append(data.substr(0, n));
      if (!s.ok()) return s;
      if (n < data.size() && env_->mode_ == Mode::kDiskFull) {
        return absl::ResourceExhaustedError("injected: No space left on device");
      }
      return absl::OkStatus();  // kTornWrite: the rest is silently lost
    }
    absl::Status Sync() override { return base_->Sync(); }
    absl::Status Close() override { return base_->Close(); }

   private:
    std::unique_ptr<WritableFile> base_;
    FaultInjectingEnv* env_;
  };

  Mode mode_ = Mode::kNone;
  int64_t budget_ = 0;
};

class CheckpointStoreTest : public ::testing::Test {
 protected:
  std::string Dir() const { return dir_.File("ckpt"); }
  TempDir dir_;
  FaultInjectingEnv env_{FileEnv::Default()};
};

std::string Payload(char c, size_t n = 1000) { return std::string(n, c); }

TEST_F(CheckpointStoreTest, EncodeDecodeRoundTrip) {
  const std::string bytes = CheckpointStore::Encode(42, "hello");
  absl::StatusOr<LoadedCheckpoint> c = CheckpointStore::Decode(bytes, "p");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->step, 42);
  EXPECT_EQ(c->payload, "hello");
}

TEST_F(CheckpointStoreTest, EmptyDirectoryHasNothing) {
  CheckpointStore store(Dir(), 3, &env_);
  absl::StatusOr<std::optional<LoadedCheckpoint>> c = store.LoadLatest();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->has_value());
  EXPECT_FALSE(store.HasCheckpoint());
}

TEST_F(CheckpointStoreTest, SaveLoadNewestAndKeepLastK) {
  CheckpointStore store(Dir(), 2, &env_);
  ASSERT_TRUE(store.CheckWritable().ok());
  for (int step = 1; step <= 4; ++step)
    ASSERT_TRUE(store.Save(step * 10, Payload('a' + step)).ok());
  auto c = store.LoadLatest();
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_EQ((*c)->step, 40);
  EXPECT_EQ((*c)->payload, Payload('a' + 4));
  EXPECT_TRUE((*c)->warnings.empty());
  EXPECT_FALSE(env_.FileExists(Dir() + "/" + CheckpointStore::FileName(20)));
  EXPECT_TRUE(env_.FileExists(Dir() + "/" + CheckpointStore::FileName(30)));
  EXPECT_EQ(ReadFile(Dir() + "/LATEST"), CheckpointStore::FileName(40) + "\n");
}

TEST_F(CheckpointStoreTest, TornFileSkippedWithWarning) {
  CheckpointStore store(Dir(), 3, &env_);
  ASSERT_TRUE(store.Save(1, Payload('x')).ok());
  ASSERT_TRUE(store.Save(2, Payload('y')).ok());
  const std::string newest = Dir() + "/" + CheckpointStore::FileName(2);
  ASSERT_EQ(truncate(newest.c_str(), 500), 0);
  auto c = store.LoadLatest();
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_EQ((*c)->step, 1);
  ASSERT_EQ((*c)->warnings.size(), 1u);
  EXPECT_THAT((*c)->warnings[0], HasSubstr(newest));
  EXPECT_THAT((*c)->warnings[0], HasSubstr("torn"));
}

TEST_F(CheckpointStoreTest, BadChecksumSkippedWithWarning) {
  CheckpointStore store(Dir(), 3, &env_);
  ASSERT_TRUE(store.Save(1, Payload('x')).ok());
  ASSERT_TRUE(store.Save(2, Payload('y')).ok());
  const std::string newest = Dir() + "/" + CheckpointStore::FileName(2);
  std::string bytes = ReadFile(newest);
  bytes[100] ^= 0x01;
  WriteFile(newest, bytes);
  auto c = store.LoadLatest();
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_EQ((*c)->step, 1);
  EXPECT_THAT((*c)->warnings[0], HasSubstr("checksum mismatch"));
}

TEST_F(CheckpointStoreTest, TornWriteThroughEnvDetected) {
  CheckpointStore store(Dir(), 3, &env_);
  ASSERT_TRUE(store.Save(1, Payload('x')).ok());
  env_.Arm(FaultInjectingEnv::Mode::kTornWrite, 300);
  ASSERT_TRUE(store.Save(2, Payload('y')).ok());  // the loss is silent, as after a crash
  env_.Arm(FaultInjectingEnv::Mode::kNone, 0);
  auto c = store.LoadLatest();
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_EQ((*c)->step, 1);
  EXPECT_FALSE((*c)->warnings.empty());
}

TEST_F(CheckpointStoreTest, DiskFullKeepsPreviousCheckpoint) {
  CheckpointStore store(Dir(), 3, &env_);
  ASSERT_TRUE(store.Save(1, Payload('x')).ok());
  env_.Arm(FaultInjectingEnv::Mode::kDiskFull, 200);
  absl::Status s = store.Save(2, Payload('y'));
  env_.Arm(FaultInjectingEnv::Mode::kNone, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  auto c = store.LoadLatest();
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_EQ((*c)->step, 1);
  EXPECT_TRUE((*c)->warnings.empty());
  // No temp file left behind to fill the disk further.
  auto names = env_.ListDir(Dir());
  ASSERT_TRUE(names.ok());
  for (const std::string& n : *names) EXPECT_THAT(n, ::testing::Not(HasSubstr(".tmp")));
}

TEST_F(CheckpointStoreTest, DiskFullWhileMovingPointerKeepsAValidCheckpoint) {
  CheckpointStore store(Dir(), 3, &env_);
  ASSERT_TRUE(store.Save(1, Payload('x')).ok());
  const int64_t file_size = CheckpointStore::Encode(2, Payload('y')).size();
  env_.Arm(FaultInjectingEnv::Mode::kDiskFull, file_size + 2);  // checkpoint fits, LATEST not
  EXPECT_FALSE(store.Save(2, Payload('y')).ok());
  env_.Arm(FaultInjectingEnv::Mode::kNone, 0);
  auto c = store.LoadLatest();
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  // LATEST still names step 1, but step 2 is complete and valid; either is acceptable as long
  // as it is valid. The scan prefers the pointer.
  EXPECT_EQ((*c)->step, 1);
}

TEST_F(CheckpointStoreTest, FailedRenameKeepsPrevious) {
  CheckpointStore store(Dir(), 3, &env_);
  ASSERT_TRUE(store.Save(1, Payload('x')).ok());
  env_.Arm(FaultInjectingEnv::Mode::kFailRename, 0);
  EXPECT_FALSE(store.Save(2, Payload('y')).ok());
  env_.Arm(FaultInjectingEnv::Mode::kNone, 0);
  auto c = store.LoadLatest();
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ((*c)->step, 1);
}

TEST_F(CheckpointStoreTest, AllCorruptIsDataLoss) {
  CheckpointStore store(Dir(), 3, &env_);
  ASSERT_TRUE(store.Save(1, Payload('x')).ok());
  WriteFile(Dir() + "/" + CheckpointStore::FileName(1), "garbage");
  auto c = store.LoadLatest();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(c.status().message(), HasSubstr(CheckpointStore::FileName(1)));
}

TEST_F(CheckpointStoreTest, MissingPointerFallsBackToScan) {
  CheckpointStore store(Dir(), 3, &env_);
  ASSERT_TRUE(store.Save(5, Payload('x')).ok());
  ASSERT_TRUE(store.Save(7, Payload('y')).ok());
  ASSERT_EQ(unlink((Dir() + "/LATEST").c_str()), 0);
  auto c = store.LoadLatest();
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ((*c)->step, 7);
}

TEST_F(CheckpointStoreTest, UnwritableDirectoryRefused) {
  if (geteuid() == 0) {
    // root ignores permission bits; a path under a regular file cannot be created by anyone.
    WriteFile(dir_.File("file"), "x");
    CheckpointStore store(dir_.File("file/sub"), 3, &env_);
    absl::Status s = store.CheckWritable();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr(dir_.File("file/sub")));
    return;
  }
  ASSERT_EQ(mkdir(Dir().c_str(), 0555), 0);
  CheckpointStore store(Dir(), 3, &env_);
  absl::Status s = store.CheckWritable();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("not writable"));
}

// Issue 28 #23: a FIFO named like a checkpoint blocked ddp-train forever.
TEST_F(CheckpointStoreTest, FifoNamedLikeCheckpointSkippedWithWarning) {
  CheckpointStore store(Dir(), 3, &env_);
  ASSERT_TRUE(store.Save(1, Payload('a')).ok());
  ASSERT_EQ(unlink((Dir() + "/LATEST").c_str()), 0);  // the scan must meet the FIFO first
  const std::string fifo = Dir() + "/" + CheckpointStore::FileName(2);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  absl::StatusOr<std::optional<LoadedCheckpoint>> c =
      RunUnblockingFifos([&] { return store.LoadLatest(); }, {fifo});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->has_value());
  EXPECT_EQ((*c)->step, 1);
  ASSERT_EQ((*c)->warnings.size(), 1u);
  EXPECT_THAT((*c)->warnings[0], HasSubstr(fifo));
  EXPECT_THAT((*c)->warnings[0], HasSubstr("not a regular file"));
}

TEST_F(CheckpointStoreTest, OnlyFifosIsDataLossNamingThem) {
  ASSERT_EQ(mkdir(Dir().c_str(), 0755), 0);
  const std::string fifo = Dir() + "/" + CheckpointStore::FileName(7);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  CheckpointStore store(Dir(), 3, &env_);
  absl::StatusOr<std::optional<LoadedCheckpoint>> c =
      RunUnblockingFifos([&] { return store.LoadLatest(); }, {fifo});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(c.status().message(), HasSubstr(fifo));
  EXPECT_THAT(c.status().message(), HasSubstr("not a regular file"));
}

TEST_F(CheckpointStoreTest, FifoAsLatestPointerFallsBackToScan) {
  CheckpointStore store(Dir(), 3, &env_);
  ASSERT_TRUE(store.Save(3, Payload('c')).ok());
  const std::string latest = Dir() + "/LATEST";
  ASSERT_EQ(unlink(latest.c_str()), 0);
  ASSERT_EQ(mkfifo(latest.c_str(), 0644), 0);
  absl::StatusOr<std::optional<LoadedCheckpoint>> c =
      RunUnblockingFifos([&] { return store.LoadLatest(); }, {latest});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->has_value());
  EXPECT_EQ((*c)->step, 3);
  ASSERT_EQ((*c)->warnings.size(), 1u);
  EXPECT_THAT((*c)->warnings[0], HasSubstr(latest));
  EXPECT_THAT((*c)->warnings[0], HasSubstr("not a regular file"));
}

}  // namespace
}  // namespace ddprun::trainer
