#include "launcher/preflight/pair_probe.h"

#include <errno.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "launcher/preflight/probe_wire.h"

namespace ddprun::launcher {
namespace {

using SteadyClock = ProbeClock;

// A connected socket to addr:port (the first address that accepts).
absl::StatusOr<int> Connect(const std::string& addr, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  std::string host = addr;  // the server's addresses are bare; a bracketed one is welcome too
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list); rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", host, ": ", gai_strerror(rc)));
  }
  int err = 0;
  for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    PrepareProbeSocket(fd);  // SO_SNDTIMEO bounds the connect too
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      freeaddrinfo(list);
      return fd;
    }
    err = errno;
    close(fd);
  }
  freeaddrinfo(list);
  return absl::UnavailableError(
      absl::StrCat("connect ", FormatHostPort(host, port), ": ", strerror(err)));
}

// The probe over a connected `fd`, into `out`.
absl::Status Measure(int fd, Duration probe_time, ProbeClock::time_point budget,
                     rendezvous::PairProbe* out) {
  const ProbeClock::time_point deadline = std::min(ProbeDeadline(), budget);
  const auto probe_ms =
      std::min(std::chrono::duration_cast<std::chrono::milliseconds>(probe_time), kMaxProbeTime);
  if (absl::Status s = WriteU32(fd, kProbeMagic, deadline); !s.ok()) return s;
  if (absl::Status s = WriteU32(fd, static_cast<uint32_t>(probe_ms.count()), deadline); !s.ok()) {
    return s;
  }
  std::vector<double> rtts;
  for (int i = 0; i < kPings; ++i) {
    const SteadyClock::time_point sent = SteadyClock::now();
    char byte = 'p';
    if (absl::Status s = WriteAll(fd, &byte, 1, deadline); !s.ok()) return s;
    if (absl::Status s = ReadAll(fd, &byte, 1, deadline); !s.ok()) return s;
    rtts.push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - sent).count());
  }
  std::sort(rtts.begin(), rtts.end());
  out->rtt_ms = rtts[rtts.size() / 2];
  if (absl::Status s = SendFrames(fd, probe_ms, deadline); !s.ok()) return s;
  absl::StatusOr<uint64_t> up_bytes = ReadU64(fd, deadline);
  if (!up_bytes.ok()) return up_bytes.status();
  absl::StatusOr<uint64_t> up_micros = ReadU64(fd, deadline);
  if (!up_micros.ok()) return up_micros.status();
  out->send_mbps = Received{*up_bytes, *up_micros}.Mbps();
  absl::StatusOr<Received> down = ReceiveFrames(fd, deadline);
  if (!down.ok()) return down.status();
  out->recv_mbps = down->Mbps();
  return absl::OkStatus();
}

}  // namespace

rendezvous::PairProbe ProbePeer(const rendezvous::PreflightPeer& peer, Duration probe_time,
                                std::chrono::steady_clock::time_point deadline) {
  rendezvous::PairProbe result;
  result.peer_node_id = peer.node_id;
  if (ProbeClock::now() >= deadline) {
    result.error = "not started: the node's preflight budget was spent";
    return result;
  }
  absl::StatusOr<int> fd = Connect(peer.addr, peer.port);
  if (!fd.ok()) {
    result.error = std::string(fd.status().message());
    return result;
  }
  absl::Status measured = Measure(*fd, probe_time, deadline, &result);
  close(*fd);
  if (!measured.ok()) {
    result = rendezvous::PairProbe{};
    result.peer_node_id = peer.node_id;
    result.error = std::string(measured.message());
  }
  return result;
}

}  // namespace ddprun::launcher
