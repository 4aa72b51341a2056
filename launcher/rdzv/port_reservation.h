// Holds a TCP port for the rank-0 worker's TCPStore: the socket is bound with SO_REUSEADDR but
// never listens, so no other process can bind the port, while the worker (whose TCPStore also
// sets SO_REUSEADDR) still can. Closes the race of torchrun's "find a free port, close it, hope".
#ifndef DDPRUN_LAUNCHER_RDZV_PORT_RESERVATION_H_
#define DDPRUN_LAUNCHER_RDZV_PORT_RESERVATION_H_

#include "absl/status/statusor.h"

namespace ddprun::launcher {

class PortReservation {
 public:
  // port 0: any free port. Binds the IPv4 wildcard.
  static absl::StatusOr<PortReservation> Reserve(int port);

  PortReservation(PortReservation&& other) noexcept;
  PortReservation& operator=(PortReservation&& other) noexcept;
  ~PortReservation();

  int port() const { return port_; }

 private:
  PortReservation(int fd, int port) : fd_(fd), port_(port) {}
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_RDZV_PORT_RESERVATION_H_
