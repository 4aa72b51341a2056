// The preflight's probe protocol on one TCP connection (issue 41, docs/design.md §3d). The
// initiator opens it and sends a hello (kProbeMagic, the probe time); then
//   1. kPings round trips of one byte each: the round trip time;
//   2. upload: the initiator sends frames for the probe time, then an empty frame; the target
//      answers with what it received (bytes, microseconds from the first byte to the last);
//   3. download: the same the other way; the initiator counts.
// A frame is a 4-byte length (network order) and that many bytes. Both ends bound every read and
// write by kIoTimeout and the whole probe by a deadline (ProbeDeadline), so a peer that stops
// answering, or trickles a byte at a time, costs seconds, never a hung thread.
#ifndef DDPRUN_LAUNCHER_PREFLIGHT_PROBE_WIRE_H_
#define DDPRUN_LAUNCHER_PREFLIGHT_PROBE_WIRE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rendezvous/api/preflight.h"

namespace ddprun::launcher {

inline constexpr uint32_t kProbeMagic = 0x44505046;  // "DPPF"
inline constexpr int kPings = 16;
inline constexpr size_t kFrameBytes = 256 * 1024;
using rendezvous::kMaxProbeTime;  // the longest a direction sends, whatever the hello says
inline constexpr std::chrono::seconds kIoTimeout{3};

using ProbeClock = std::chrono::steady_clock;
// When a probe that starts now must be over, whatever its peer does: both directions at the
// longest, and the pings and answers with room to spare.
inline ProbeClock::time_point ProbeDeadline() {
  return ProbeClock::now() + 2 * kMaxProbeTime + 2 * kIoTimeout;
}

// What one side received in one direction.
struct Received {
  uint64_t bytes = 0;
  uint64_t micros = 0;  // from the first byte to the end frame
  double Mbps() const { return micros == 0 ? 0 : static_cast<double>(bytes) * 8 / micros; }
};

// Sets kIoTimeout on `fd`'s reads and writes (the connect's bound; the calls below wait with
// poll), and TCP_NODELAY (the pings are one byte).
void PrepareProbeSocket(int fd);
// All of `len` bytes, or an error naming what failed.
// Every call below fails (kDeadlineExceeded) once `deadline` has passed.
absl::Status WriteAll(int fd, const void* data, size_t len, ProbeClock::time_point deadline);
absl::Status ReadAll(int fd, void* data, size_t len, ProbeClock::time_point deadline);
absl::Status WriteU32(int fd, uint32_t value, ProbeClock::time_point deadline);
absl::StatusOr<uint32_t> ReadU32(int fd, ProbeClock::time_point deadline);
absl::Status WriteU64(int fd, uint64_t value, ProbeClock::time_point deadline);
absl::StatusOr<uint64_t> ReadU64(int fd, ProbeClock::time_point deadline);
// Sends frames for `duration`, then the end frame.
absl::Status SendFrames(int fd, std::chrono::milliseconds duration,
                        ProbeClock::time_point deadline);
// Reads frames up to the end frame.
absl::StatusOr<Received> ReceiveFrames(int fd, ProbeClock::time_point deadline);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_PREFLIGHT_PROBE_WIRE_H_
