// CommitGuard: ddp-train's check of ddprun's local lease, on a real lease page (a memfd laid
// out as common/lease_page.h says, written here as the agent would).
#include "trainer/io/commit_guard.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/lease_page.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun::trainer {
namespace {

using ::testing::HasSubstr;

// A lease page written by the test, the agent's part.
class Page {
 public:
  Page() {
    fd_ = memfd_create("test-lease", MFD_CLOEXEC);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, kLeasePageSize), 0);
    page_ = mmap(nullptr, kLeasePageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    const uint32_t head[2] = {kLeaseMagic, kLeaseVersion};
    std::memcpy(page_, head, sizeof(head));
  }
  ~Page() {
    munmap(page_, kLeasePageSize);
    close(fd_);
  }
  void SetValidUntil(int64_t ns) {
    reinterpret_cast<std::atomic<int64_t>*>(static_cast<char*>(page_) + kLeaseValidUntilOffset)
        ->store(ns);
  }
  std::string fd() const { return absl::StrCat(fd_); }

 private:
  int fd_ = -1;
  void* page_ = nullptr;
};

TEST(CommitGuardTest, WithoutALeaseEverythingMayBeCommitted) {
  absl::StatusOr<CommitGuard> guard = CommitGuard::Open("");
  ASSERT_TRUE(guard.ok()) << guard.status();
  EXPECT_FALSE(guard->has_lease());
  EXPECT_TRUE(guard->MayCommit("step 1").ok());
  EXPECT_TRUE(CommitGuard().MayCommitAt("step 1", 1).ok());
}

TEST(CommitGuardTest, CommitsOnlyBeforeValidUntil) {
  Page page;
  page.SetValidUntil(5000);
  absl::StatusOr<CommitGuard> guard = CommitGuard::Open(page.fd());
  ASSERT_TRUE(guard.ok()) << guard.status();
  EXPECT_TRUE(guard->has_lease());
  EXPECT_TRUE(guard->MayCommitAt("step 7", 4999).ok());
  const absl::Status late = guard->MayCommitAt("step 7", 5000);
  EXPECT_FALSE(late.ok());
  EXPECT_TRUE(IsLeaseExpired(late));
  EXPECT_THAT(late.message(), HasSubstr("not committing step 7"));
  EXPECT_THAT(late.message(), HasSubstr("lease expired"));
  // The agent renews: the same mapping sees it.
  page.SetValidUntil(9000);
  EXPECT_TRUE(guard->MayCommitAt("step 7", 5000).ok());
}

TEST(CommitGuardTest, ANeverGrantedLeaseRefusesAndSaysSo) {
  Page page;  // valid_until 0
  absl::StatusOr<CommitGuard> guard = CommitGuard::Open(page.fd());
  ASSERT_TRUE(guard.ok()) << guard.status();
  const absl::Status s = guard->MayCommit("the checkpoint of step 3");
  EXPECT_TRUE(IsLeaseExpired(s));
  EXPECT_THAT(s.message(), HasSubstr("never granted"));
}

TEST(CommitGuardTest, OnlyTheRefusalIsRecognizedAsOne) {
  EXPECT_FALSE(IsLeaseExpired(absl::OkStatus()));
  EXPECT_FALSE(IsLeaseExpired(absl::UnavailableError("not committing: lease expired")));
}

TEST(CommitGuardTest, ABadDescriptorIsAnErrorNamingTheVariable) {
  absl::StatusOr<CommitGuard> guard = CommitGuard::Open("seven");
  ASSERT_FALSE(guard.ok());
  EXPECT_THAT(guard.status().message(), HasSubstr("DDPRUN_LEASE_FD=seven"));
}

}  // namespace
}  // namespace ddprun::trainer
