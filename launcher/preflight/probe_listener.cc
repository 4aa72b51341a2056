#include "launcher/preflight/probe_listener.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/tcp_listen.h"
#include "launcher/preflight/probe_wire.h"

namespace ddprun::launcher {
namespace {

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
  absl::StatusOr<int> fd = ListenOnEveryAddress(0);
  if (!fd.ok()) {
    return absl::Status(fd.status().code(),
                        absl::StrCat("preflight probe listener: ", fd.status().message()));
  }
  const int port = BoundPort(*fd);
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
