// Holds a TCP port the way ddprun holds its master port: bound with SO_REUSEADDR, never
// listening, so nothing else can take it while a server that also sets SO_REUSEADDR (a
// TCPStore, gRPC) still can. For tests that must name a port up front (static mode, an agent
// hosting the rendezvous) without a find-a-free-port-then-close race.
#ifndef DDPRUN_TESTS_TESTING_RESERVED_PORT_H_
#define DDPRUN_TESTS_TESTING_RESERVED_PORT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>

namespace ddprun::testing {

class ReservedPort {
 public:
  // Any free port; ReservedPort(p): port p, if it is free (else port() is 0).
  explicit ReservedPort(int port = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      socklen_t len = sizeof(addr);
      getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
      port_ = ntohs(addr.sin_port);
    }
  }
  ~ReservedPort() { close(fd_); }
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;
  int port() const { return port_; }  // 0 if the bind failed

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A free port and the one above it, both held: a static job's MASTER_PORT and MASTER_PORT + 1,
// where node 0's agent serves the job's rendezvous. port() is 0 when no pair was found.
class ReservedPortPair {
 public:
  ReservedPortPair() {
    for (int attempt = 0; attempt < 100; ++attempt) {
      auto first = std::make_unique<ReservedPort>();
      if (first->port() == 0 || first->port() == 65535) continue;
      auto second = std::make_unique<ReservedPort>(first->port() + 1);
      if (second->port() == 0) continue;
      first_ = std::move(first);
      second_ = std::move(second);
      return;
    }
  }
  int port() const { return first_ != nullptr ? first_->port() : 0; }

 private:
  std::unique_ptr<ReservedPort> first_, second_;
};

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_RESERVED_PORT_H_
