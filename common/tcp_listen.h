// A listening TCP socket on the wildcard address, the way ddprun's agent listens for its peers
// (the c10d store, the preflight's probes): IPv6 dual-stack, or IPv4 where the host has no IPv6.
#ifndef DDPRUN_COMMON_TCP_LISTEN_H_
#define DDPRUN_COMMON_TCP_LISTEN_H_

#include "absl/status/statusor.h"

namespace ddprun {

// A non-blocking, close-on-exec socket listening on every address at `port` (0: a port of the
// kernel's choosing). SO_REUSEADDR only lets the agent re-listen past TIME_WAIT; no one can bind
// a port a socket listens on. kUnavailable "port P is in use", else kInternal naming the call.
absl::StatusOr<int> ListenOnEveryAddress(int port);

// The port `fd` is bound to (0 when it cannot be read).
int BoundPort(int fd);

}  // namespace ddprun

#endif  // DDPRUN_COMMON_TCP_LISTEN_H_
