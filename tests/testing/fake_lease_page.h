// The page an agent's local lease lives in (common/lease_page.h), made by a test in place of
// an agent so that it can set valid_until anywhere, the past included (LocalLease only moves it
// forward). Its descriptor has no close-on-exec: children inherit it at fd(), the number that
// goes into DDPRUN_LEASE_FD. Owns the memfd and the mapping.
#ifndef DDPRUN_TESTS_TESTING_FAKE_LEASE_PAGE_H_
#define DDPRUN_TESTS_TESTING_FAKE_LEASE_PAGE_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "common/lease_page.h"

namespace ddprun::testing {

class FakeLeasePage {
 public:
  FakeLeasePage() {
    fd_ = memfd_create("test-lease", 0);
    if (fd_ < 0 || ftruncate(fd_, kLeasePageSize) != 0) return;
    void* page = mmap(nullptr, kLeasePageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (page == MAP_FAILED) return;
    page_ = page;
    const uint32_t head[2] = {kLeaseMagic, kLeaseVersion};
    std::memcpy(page_, head, sizeof(head));
  }
  ~FakeLeasePage() {
    if (page_ != nullptr) munmap(page_, kLeasePageSize);
    if (fd_ >= 0) close(fd_);
  }
  FakeLeasePage(const FakeLeasePage&) = delete;
  FakeLeasePage& operator=(const FakeLeasePage&) = delete;

  // Whether the page was made and mapped.
  bool ok() const { return page_ != nullptr; }
  int fd() const { return fd_; }
  // valid_until, CLOCK_MONOTONIC ns.
  void SetValidUntil(int64_t ns) {
    std::memcpy(static_cast<char*>(page_) + kLeaseValidUntilOffset, &ns, sizeof(ns));
  }

 private:
  int fd_ = -1;
  void* page_ = nullptr;
};

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_FAKE_LEASE_PAGE_H_
