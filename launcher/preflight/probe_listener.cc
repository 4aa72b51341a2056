#include "launcher/preflight/probe_listener.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "launcher/preflight/probe_wire.h"

namespace ddprun::launcher {
namespace {

// A dual-stack socket on [::]:0, or 0.0.0.0:0 where IPv6 is off.
absl::StatusOr<int> ListenAnywhere() {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    const int zero = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && listen(fd, 16) == 0) {
      return fd;
    }
    close(fd);
  }
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 16) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("preflight probe listener: ", strerror(err)));
  }
  return fd;
}

int LocalPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

// The target's side of one probe (probe_wire.h).
absl::Status AnswerProbe(int fd) {
  const ProbeClock::time_point deadline = ProbeDeadline();
  absl::StatusOr<uint32_t> magic = ReadU32(fd, deadline);
  if (!magic.ok()) return magic.status();
  if (*magic != kProbeMagic) return absl::InvalidArgumentError("not a preflight probe");
  absl::StatusOr<uint32_t> probe_ms = ReadU32(fd, deadline);
  if (!probe_ms.ok()) return probe_ms.status();
  for (int i = 0; i < kPings; ++i) {
    char byte = 0;
    if (absl::Status s = ReadAll(fd, &byte, 1, deadline); !s.ok()) return s;
    if (absl::Status s = WriteAll(fd, &byte, 1, deadline); !s.ok()) return s;
  }
  absl::StatusOr<Received> up = ReceiveFrames(fd, deadline);
  if (!up.ok()) return up.status();
  if (absl::Status s = WriteU64(fd, up->bytes, deadline); !s.ok()) return s;
  if (absl::Status s = WriteU64(fd, up->micros, deadline); !s.ok()) return s;
  return SendFrames(fd, std::chrono::milliseconds(*probe_ms), deadline);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProbeListener>> ProbeListener::Start() {
  absl::StatusOr<int> fd = ListenAnywhere();
  if (!fd.ok()) return fd.status();
  const int port = LocalPort(*fd);
  if (port == 0) {
    close(*fd);
    return absl::InternalError("preflight probe listener: no port");
  }
  return std::unique_ptr<ProbeListener>(new ProbeListener(*fd, port));
}

ProbeListener::ProbeListener(int fd, int port)
    : fd_(fd), port_(port), answering_(std::make_shared<Answering>()) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

ProbeListener::~ProbeListener() {
  stopping_ = true;
  shutdown(fd_, SHUT_RDWR);  // wakes the accept loop's poll at once
  accept_thread_.join();
  close(fd_);
  // Probes still being answered hold `answering_` and their socket only, and end by their
  // deadline (probe_wire.h): nothing waits for them here.
}

void ProbeListener::AcceptLoop() {
  while (!stopping_) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    {
      absl::MutexLock lock(&answering_->mu);
      if (answering_->count >= kMaxConcurrent) {
        close(conn);
        continue;
      }
      ++answering_->count;
    }
    std::thread([answering = answering_, conn] {
      PrepareProbeSocket(conn);
      AnswerProbe(conn).IgnoreError();  // the initiator reports what failed
      close(conn);
      absl::MutexLock lock(&answering->mu);
      --answering->count;
    }).detach();
  }
}

}  // namespace ddprun::launcher
