#include "rendezvous/liveness/udp_socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace ddprun::rendezvous {
namespace {

// Tries each address `host`:`port` resolves to with `use` (bind or connect); the first socket
// that works.
absl::StatusOr<UdpSocket> Open(const std::string& host, int port, bool passive, const char* verb) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  const std::string where = FormatHostPort(host, port);
  const std::string service = std::to_string(port);
  const char* node = host.empty() ? nullptr : host.c_str();
  if (int rc = getaddrinfo(node, service.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("liveness: cannot resolve ", where, ": ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    UdpSocket s(socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (s.fd() < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    if (a->ai_family == AF_INET6 && passive) {
      const int off = 0;  // "::" serves IPv4 agents too
      setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    }
    const int rc = passive ? bind(s.fd(), a->ai_addr, a->ai_addrlen)
                           : connect(s.fd(), a->ai_addr, a->ai_addrlen);
    if (rc == 0) {
      freeaddrinfo(found);
      return s;
    }
    last_error = std::strerror(errno);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(
      absl::StrCat("liveness: cannot ", verb, " a UDP socket to ", where, ": ", last_error));
}

}  // namespace

UdpSocket& UdpSocket::operator=(UdpSocket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

UdpSocket::~UdpSocket() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<UdpSocket> BindUdp(const std::string& host, int port) {
  return Open(host, port, /*passive=*/true, "bind");
}

absl::StatusOr<UdpSocket> ConnectUdp(const std::string& host, int port) {
  return Open(host, port, /*passive=*/false, "connect");
}

int LocalPort(const UdpSocket& socket) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

}  // namespace ddprun::rendezvous
