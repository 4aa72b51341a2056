#include "launcher/fence/local_lease.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/lease_page.h"
#include "rendezvous/detector/phi_accrual.h"

namespace ddprun::launcher::fence {
namespace {

int64_t Ns(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

absl::Status Errno(const char* what) {
  return absl::InternalError(absl::StrCat("local lease: ", what, ": ", strerror(errno)));
}

}  // namespace

Duration LeaseLength(const rendezvous::RunTimeouts& timeouts) {
  if (timeouts.liveness.on()) {
    const rendezvous::LivenessSettings& l = timeouts.liveness;
    return rendezvous::EarliestSuspicion(l.phi, l.pause, l.min_sd);
  }
  return StreamLeaseLength(timeouts);
}

Duration StreamLeaseLength(const rendezvous::RunTimeouts& timeouts) {
  const Duration interval = timeouts.keep_alive_interval;
  const int attempts = std::max(1, timeouts.keep_alive_max_attempt);
  if (attempts == 1) return interval + interval / 2;
  return interval * attempts - interval / 2;
}

absl::StatusOr<std::unique_ptr<LocalLease>> LocalLease::Create(
    Duration stream_length, std::optional<Duration> liveness_length) {
  const int fd = memfd_create("ddprun-lease", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Errno("memfd_create");
  if (ftruncate(fd, kLeasePageSize) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    absl::Status s = Errno("sizing the page");
    close(fd);
    return s;
  }
  void* page = mmap(nullptr, kLeasePageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (page == MAP_FAILED) {
    absl::Status s = Errno("mmap");
    close(fd);
    return s;
  }
  const uint32_t head[2] = {kLeaseMagic, kLeaseVersion};
  std::memcpy(page, head, sizeof(head));
  // The workers' descriptor opens the same file read-only: they can map it but never write it.
  // No O_CLOEXEC: every worker inherits it at this number.
  const int read_fd = open(absl::StrCat("/proc/self/fd/", fd).c_str(), O_RDONLY);
  if (read_fd < 0) {
    absl::Status s = Errno("reopening the page read-only");
    munmap(page, kLeasePageSize);
    close(fd);
    return s;
  }
  return std::unique_ptr<LocalLease>(
      new LocalLease(fd, read_fd, page, stream_length, liveness_length));
}

LocalLease::~LocalLease() {
  munmap(page_, kLeasePageSize);
  close(read_fd_);
  close(fd_);
}

int64_t* LocalLease::word() const {
  return reinterpret_cast<int64_t*>(static_cast<char*>(page_) + kLeaseValidUntilOffset);
}

void LocalLease::Renew(TimePoint heard_from, Voucher by) {
  absl::MutexLock lock(&mu_);
  switch (by) {
    case Voucher::kStream:
      if (!stream_heard_ || *stream_heard_ < heard_from) stream_heard_ = heard_from;
      // While the liveness acks rule, the short lease would be masked by the stream's.
      if (follows_ == Follows::kStream) MoveEnd(Ns(heard_from + stream_length_), false);
      return;
    case Voucher::kLivenessBySilence: {
      const bool first = std::exchange(follows_, Follows::kLiveness) == Follows::kStream;
      MoveEnd(Ns(heard_from + liveness_length_.value_or(stream_length_)), /*replace=*/first);
      return;
    }
    case Voucher::kLivenessByLease:
      // The server's lease decides again: what the stream last vouched for holds.
      if (std::exchange(follows_, Follows::kStream) == Follows::kLiveness && stream_heard_) {
        MoveEnd(Ns(*stream_heard_ + stream_length_), false);
      }
      return;
  }
}

void LocalLease::MoveEnd(int64_t next, bool replace) {
  auto* until = reinterpret_cast<std::atomic<int64_t>*>(word());
  if (replace || until->load(std::memory_order_relaxed) < next) {
    until->store(next, std::memory_order_release);
  }
}

int64_t LocalLease::valid_until_ns() const {
  return reinterpret_cast<std::atomic<int64_t>*>(word())->load(std::memory_order_acquire);
}

bool LocalLease::ValidAt(TimePoint now) const { return Ns(now) < valid_until_ns(); }

}  // namespace ddprun::launcher::fence
