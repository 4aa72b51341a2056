// The local lease page: the one shared-memory page through which an agent tells its workers
// until when the rendezvous server has vouched for this node (docs/design.md, "Fencing").
// The agent writes it (launcher/fence/local_lease.h); a worker maps it read-only from the
// descriptor named by DDPRUN_LEASE_FD and reads it with LeaseView.
//
// Layout (little-endian, 4096 bytes, the rest zero):
//   bytes 0..3   magic "DDPL"
//   bytes 4..7   version (uint32, 1)
//   bytes 8..15  valid_until: CLOCK_MONOTONIC nanoseconds (int64); 0: never valid
// valid_until is 8-byte aligned and written with one atomic store, so a reader never sees a
// torn value (python/ddprun_inprocess.py reads the same 8 bytes).
//
// LeaseView is thread-safe once open (reads only); it owns its mapping.
#ifndef DDPRUN_COMMON_LEASE_PAGE_H_
#define DDPRUN_COMMON_LEASE_PAGE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace ddprun {

inline constexpr uint32_t kLeaseMagic = 0x4c504444;  // "DDPL" little-endian
inline constexpr uint32_t kLeaseVersion = 1;
inline constexpr size_t kLeasePageSize = 4096;
inline constexpr size_t kLeaseValidUntilOffset = 8;

// CLOCK_MONOTONIC now, in nanoseconds (the lease's clock; steady_clock on Linux).
int64_t MonotonicNowNs();

class LeaseView {
 public:
  // Maps `fd` read-only (the descriptor stays the caller's). An error names the descriptor.
  static absl::StatusOr<std::unique_ptr<LeaseView>> Open(int fd);
  // From DDPRUN_LEASE_FD's value: nullptr when empty (unset: no lease, a worker commits as
  // without ddprun's fencing); an error names the variable and its value.
  static absl::StatusOr<std::unique_ptr<LeaseView>> FromVariable(const std::string& value);
  ~LeaseView();
  LeaseView(const LeaseView&) = delete;
  LeaseView& operator=(const LeaseView&) = delete;

  int64_t valid_until_ns() const;
  bool ValidAt(int64_t now_ns) const { return now_ns < valid_until_ns(); }
  bool ValidNow() const { return ValidAt(MonotonicNowNs()); }

 private:
  explicit LeaseView(const void* page) : page_(page) {}
  const void* page_;
};

}  // namespace ddprun

#endif  // DDPRUN_COMMON_LEASE_PAGE_H_
