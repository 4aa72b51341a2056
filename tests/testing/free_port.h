// A loopback TCP port the kernel says is free right now, for a server a test starts right after
// (a TCPStore, torchrun) that cannot report a port it picked itself. The window for another
// process to take it is microseconds, unlike a fixed port's; where a test can hold the port
// until its server binds, ReservedPort (reserved_port.h) closes even that.
#ifndef DDPRUN_TESTS_TESTING_FREE_PORT_H_
#define DDPRUN_TESTS_TESTING_FREE_PORT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ddprun::testing {

// 0 when no port could be had.
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_FREE_PORT_H_
