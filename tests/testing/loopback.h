// Plain TCP on 127.0.0.1 for tests and benchmarks that talk to a server ddprun runs (its HTTP
// side): connect, send raw bytes, read until the server closes. Header-only, so that a
// benchmark can use it without linking the test helpers (and GoogleTest).
#ifndef DDPRUN_TESTS_TESTING_LOOPBACK_H_
#define DDPRUN_TESTS_TESTING_LOOPBACK_H_

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace ddprun::testing {

// 127.0.0.1:port.
inline sockaddr_in LoopbackAddress(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// A connection to 127.0.0.1:port, or -1. With read_timeout_s > 0 a read gives up after that.
inline int ConnectLoopback(int port, int read_timeout_s = 0) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = LoopbackAddress(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  if (read_timeout_s > 0) {
    timeval timeout{read_timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }
  return fd;
}

// A connection to 127.0.0.1:port from the loopback address `source` (any of 127/8: the test's
// stand-in for another host), or -1. With `wait_ms` >= 0 the connect is non-blocking and waits
// at most that long for the handshake (the fd is returned either way while it is pending).
inline int ConnectLoopbackFrom(const char* source, int port, int wait_ms = -1) {
  const int fd =
      socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (wait_ms >= 0 ? SOCK_NONBLOCK : 0), 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to = LoopbackAddress(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
    close(fd);
    return -1;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    if (wait_ms < 0 || errno != EINPROGRESS) {
      close(fd);
      return -1;
    }
    pollfd p{fd, POLLOUT, 0};
    poll(&p, 1, wait_ms);
  }
  return fd;
}

// Sends `raw` and reads the whole answer (the server closes: "Connection: close"); "" when the
// connection or the write fails.
inline std::string LoopbackExchange(int port, const std::string& raw, int read_timeout_s = 0) {
  const int fd = ConnectLoopback(port, read_timeout_s);
  if (fd < 0) return "";
  // MSG_NOSIGNAL: a server that refuses a request while it is still being sent (a huge header)
  // closes first, and the rest of the write would otherwise kill the test with SIGPIPE.
  if (send(fd, raw.data(), raw.size(), MSG_NOSIGNAL) < 0) {
    close(fd);
    return "";
  }
  std::string answer;
  char buf[16384];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) answer.append(buf, static_cast<size_t>(n));
  close(fd);
  return answer;
}

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_LOOPBACK_H_
