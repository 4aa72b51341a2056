#include "launcher/preflight/probe_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ddprun::launcher {
namespace {

using SteadyClock = ProbeClock;

// Waits until `fd` is ready for `events` (POLLIN, POLLOUT): at most kIoTimeout, and never past
// `deadline`.
absl::Status WaitReady(int fd, short events, const char* what, ProbeClock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - ProbeClock::now());
    if (left.count() <= 0) return absl::DeadlineExceededError("the probe ran past its deadline");
    const auto wait = std::min<std::chrono::milliseconds>(left, kIoTimeout);
    pollfd p{fd, events, 0};
    const int ready = poll(&p, 1, static_cast<int>(wait.count()));
    if (ready > 0) return absl::OkStatus();
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return absl::UnavailableError(absl::StrCat(what, ": poll: ", strerror(errno)));
    if (wait < left) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": nothing for ", kIoTimeout.count(), " s"));
    }
  }
}

absl::Status IoError(const char* what, int err) {
  return absl::UnavailableError(absl::StrCat(what, ": ", strerror(err)));
}

}  // namespace

void PrepareProbeSocket(int fd) {
  timeval tv{};
  tv.tv_sec = kIoTimeout.count();
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::Status WriteAll(int fd, const void* data, size_t len, ProbeClock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    if (absl::Status s = WaitReady(fd, POLLOUT, "send", deadline); !s.ok()) return s;
    const ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("send", errno);
    p += n;
    len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, void* data, size_t len, ProbeClock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    if (absl::Status s = WaitReady(fd, POLLIN, "recv", deadline); !s.ok()) return s;
    const ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("recv", errno);
    if (n == 0) return absl::UnavailableError("recv: the peer closed the connection");
    p += n;
    len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status WriteU32(int fd, uint32_t value, ProbeClock::time_point deadline) {
  const uint32_t wire = htonl(value);
  return WriteAll(fd, &wire, sizeof(wire), deadline);
}

absl::StatusOr<uint32_t> ReadU32(int fd, ProbeClock::time_point deadline) {
  uint32_t wire = 0;
  if (absl::Status s = ReadAll(fd, &wire, sizeof(wire), deadline); !s.ok()) return s;
  return ntohl(wire);
}

absl::Status WriteU64(int fd, uint64_t value, ProbeClock::time_point deadline) {
  if (absl::Status s = WriteU32(fd, static_cast<uint32_t>(value >> 32), deadline); !s.ok()) {
    return s;
  }
  return WriteU32(fd, static_cast<uint32_t>(value & 0xffffffffu), deadline);
}

absl::StatusOr<uint64_t> ReadU64(int fd, ProbeClock::time_point deadline) {
  absl::StatusOr<uint32_t> high = ReadU32(fd, deadline);
  if (!high.ok()) return high.status();
  absl::StatusOr<uint32_t> low = ReadU32(fd, deadline);
  if (!low.ok()) return low.status();
  return (static_cast<uint64_t>(*high) << 32) | *low;
}

absl::Status SendFrames(int fd, std::chrono::milliseconds duration,
                        ProbeClock::time_point deadline) {
  static const std::vector<char> frame(kFrameBytes, 'x');
  const SteadyClock::time_point end = SteadyClock::now() + std::min(duration, kMaxProbeTime);
  while (SteadyClock::now() < end) {
    if (absl::Status s = WriteU32(fd, kFrameBytes, deadline); !s.ok()) return s;
    if (absl::Status s = WriteAll(fd, frame.data(), frame.size(), deadline); !s.ok()) return s;
  }
  return WriteU32(fd, 0, deadline);
}

absl::StatusOr<Received> ReceiveFrames(int fd, ProbeClock::time_point deadline) {
  std::vector<char> buffer(kFrameBytes);
  Received got;
  std::optional<SteadyClock::time_point> first;
  while (true) {
    absl::StatusOr<uint32_t> len = ReadU32(fd, deadline);
    if (!len.ok()) return len.status();
    if (!first.has_value()) first = SteadyClock::now();
    if (*len == 0) break;
    if (*len > kFrameBytes) return absl::DataLossError(absl::StrCat("a frame of ", *len, " bytes"));
    if (absl::Status s = ReadAll(fd, buffer.data(), *len, deadline); !s.ok()) return s;
    got.bytes += *len;
  }
  got.micros = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - *first).count());
  return got;
}

}  // namespace ddprun::launcher
