// The UDP sockets of the liveness path: the server's, bound beside its gRPC listener, and an
// agent's, connected to the server. Owns nothing but a descriptor (closed by UdpSocket).
#ifndef DDPRUN_RENDEZVOUS_LIVENESS_UDP_SOCKET_H_
#define DDPRUN_RENDEZVOUS_LIVENESS_UDP_SOCKET_H_

#include <string>

#include "absl/status/statusor.h"

namespace ddprun::rendezvous {

class UdpSocket {
 public:
  UdpSocket() = default;
  explicit UdpSocket(int fd) : fd_(fd) {}
  UdpSocket(UdpSocket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  UdpSocket& operator=(UdpSocket&& other) noexcept;
  UdpSocket(const UdpSocket&) = delete;
  UdpSocket& operator=(const UdpSocket&) = delete;
  ~UdpSocket();

  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// A non-blocking socket bound to `host` (an address or a name; "0.0.0.0"/"::" any) and
// `port` (0: the kernel picks one). "::" accepts IPv4 too. Errors name the address.
absl::StatusOr<UdpSocket> BindUdp(const std::string& host, int port);
// A non-blocking socket connected to `host`:`port` (only datagrams from there are received).
absl::StatusOr<UdpSocket> ConnectUdp(const std::string& host, int port);
// The port a bound socket has.
int LocalPort(const UdpSocket& socket);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_LIVENESS_UDP_SOCKET_H_
