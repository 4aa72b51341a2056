// ConnectionAcceptor: the rendezvous server's listening sockets and its accept loop, so that
// running out of file descriptors never stops the server for good.
//
// gRPC 1.51's own listener stops accepting forever after one EMFILE (tcp_server_posix.cc logs
// "Failed accept4" and does not re-arm; fixed upstream in 1.57). Here the server owns the
// sockets instead and hands each accepted connection to gRPC (ExternalConnectionAcceptor). On
// EMFILE/ENFILE it logs one line, leaves the connections in the kernel's listen queue and tries
// again every `retry_after_exhaustion` until an accept works, which it logs too. At most
// `max_handshaking_connections` connections are accepted within any `handshake_window` (gRPC
// closes a connection that has not finished its handshake within that window, so this bounds the
// connections that have not authenticated); more wait in the listen queue.
//
// Thread-safety: Listen() and port() from any thread; Start() once; Stop() from any thread but
// the accept thread, idempotent. The handoff runs on the accept thread.
#ifndef DDPRUN_RENDEZVOUS_GRPC_CONNECTION_ACCEPTOR_H_
#define DDPRUN_RENDEZVOUS_GRPC_CONNECTION_ACCEPTOR_H_

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/event_loop.h"

namespace ddprun::rendezvous {

struct AcceptorOptions {
  std::chrono::milliseconds handshake_window{10000};
  int max_handshaking_connections = 2048;
  std::chrono::milliseconds retry_after_exhaustion{100};
};

class ConnectionAcceptor {
 public:
  // Takes the accepted fd (non-blocking, close-on-exec) and owns it from then on.
  using Handoff = std::function<void(int listen_fd, int fd)>;

  // Binds host:port (port 0: the kernel picks one) and listens. A wildcard host ("0.0.0.0",
  // "::") binds [::] accepting IPv4 too where the host has IPv6, as gRPC does; a name binds
  // every address it resolves to. Errors: kUnavailable naming the address when it cannot be
  // bound (a port in use), kInvalidArgument for a host that does not resolve.
  static absl::StatusOr<std::unique_ptr<ConnectionAcceptor>> Listen(const std::string& host,
                                                                    int port,
                                                                    const AcceptorOptions& options);
  ~ConnectionAcceptor();  // Stop()
  ConnectionAcceptor(const ConnectionAcceptor&) = delete;
  ConnectionAcceptor& operator=(const ConnectionAcceptor&) = delete;

  int port() const { return port_; }
  // Starts the accept thread.
  void Start(Handoff handoff);
  // Ends the accept thread and closes the listening sockets.
  void Stop();

 private:
  ConnectionAcceptor() = default;
  // On the accept thread.
  void Watch();
  void Unwatch();
  void AcceptSome(int listen_fd);
  void PauseUntil(TimePoint when);

  AcceptorOptions options_;
  std::string name_;  // "host:port", for the log
  int port_ = 0;
  std::vector<int> listen_fds_;
  Handoff handoff_;
  EventLoop loop_;
  std::thread thread_;
  bool stopped_ = false;  // Stop() is not called concurrently with itself

  // Accept-thread state.
  bool watching_ = false;
  bool paused_ = false;
  std::deque<TimePoint> recent_accepts_;  // within the last handshake_window
  bool out_of_fds_ = false;               // an EMFILE/ENFILE episode is going on
  TimePoint out_of_fds_since_;
  bool at_connection_cap_ = false;
  TimePoint last_cap_warning_;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_CONNECTION_ACCEPTOR_H_
