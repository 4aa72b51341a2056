#include "common/lease_page.h"

#include <sys/mman.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/env_variables.h"

namespace ddprun {

int64_t MonotonicNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

absl::StatusOr<std::unique_ptr<LeaseView>> LeaseView::Open(int fd) {
  void* page = mmap(nullptr, kLeasePageSize, PROT_READ, MAP_SHARED, fd, 0);
  if (page == MAP_FAILED) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease descriptor ", fd, ": cannot map it: ", strerror(errno)));
  }
  uint32_t head[2];
  std::memcpy(head, page, sizeof(head));
  if (head[0] != kLeaseMagic || head[1] != kLeaseVersion) {
    munmap(page, kLeasePageSize);
    return absl::InvalidArgumentError(absl::StrCat(
        "lease descriptor ", fd, ": not a ddprun lease page (version ", kLeaseVersion, ")"));
  }
  return std::unique_ptr<LeaseView>(new LeaseView(page));
}

absl::StatusOr<std::unique_ptr<LeaseView>> LeaseView::FromVariable(const std::string& value) {
  if (value.empty()) return std::unique_ptr<LeaseView>();
  int fd = -1;
  if (!absl::SimpleAtoi(value, &fd) || fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kLeaseFdVariable.name, "=", value, ": not a file descriptor number"));
  }
  absl::StatusOr<std::unique_ptr<LeaseView>> view = Open(fd);
  if (!view.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kLeaseFdVariable.name, "=", value, ": ", view.status().message()));
  }
  return view;
}

LeaseView::~LeaseView() { munmap(const_cast<void*>(page_), kLeasePageSize); }

int64_t LeaseView::valid_until_ns() const {
  // The writer's single aligned store (LocalLease); an atomic_ref would say the same in C++20.
  const auto* word = reinterpret_cast<const std::atomic<int64_t>*>(static_cast<const char*>(page_) +
                                                                   kLeaseValidUntilOffset);
  return word->load(std::memory_order_acquire);
}

}  // namespace ddprun
