// ConnectionAcceptor: the rendezvous server's listening sockets and its accept loop, so that
// running out of file descriptors never stops the server for good, and no one source address
// can lock the others out.
//
// gRPC 1.51's own listener stops accepting forever after one EMFILE (tcp_server_posix.cc logs
// "Failed accept4" and does not re-arm; fixed upstream in 1.57). Here the server owns the
// sockets instead and hands each accepted connection to gRPC (ExternalConnectionAcceptor). On
// EMFILE/ENFILE it logs one line, leaves the connections in the kernel's listen queue and tries
// again every `retry_after_exhaustion` until an accept works, which it logs too.
// Every connection is accepted as soon as it arrives and then kept or closed at once by a
// ConnectionBudget (connection_budget.h): per source address, connections within one handshake
// window (gRPC closes a connection that has not finished its handshake within it, so this bounds
// the connections that have not authenticated) and connections open; over all, the descriptors
// the process may use less a headroom, shared fairly. Nothing over a budget waits in the listen
// queue, so it delays no other address.
//
// Thread-safety: Listen() and port() from any thread; Start() once; Stop() from any thread but
// the accept thread, idempotent. The handoff runs on the accept thread.
#ifndef DDPRUN_RENDEZVOUS_GRPC_CONNECTION_ACCEPTOR_H_
#define DDPRUN_RENDEZVOUS_GRPC_CONNECTION_ACCEPTOR_H_

#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/event_loop.h"
#include "rendezvous/grpc/connection_budget.h"

namespace ddprun::rendezvous {

struct AcceptorOptions {
  std::chrono::milliseconds handshake_window{10000};
  // Connections kept from one source address (IPv4 address, IPv6 /64) within one window.
  int max_handshaking_per_address = 1024;
  // Connections open at once from one source address; 0: half the connection budget.
  int max_connections_per_address = 0;
  // Descriptors left for everything but connections (gRPC's own, the HTTP side, files); the
  // connection budget is the soft RLIMIT_NOFILE less this. 0: an eighth of the limit, 16 to 1024.
  int descriptor_headroom = 0;
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
  // Keeps `fd` (accepted from `peer`) and hands it over, or closes it at once (logged).
  void Admit(int listen_fd, int fd, const sockaddr_storage& peer, TimePoint now);
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
  std::unique_ptr<ConnectionBudget> budget_;  // made by Start() from the descriptor limit
  bool out_of_fds_ = false;                   // an EMFILE/ENFILE episode is going on
  TimePoint out_of_fds_since_;
  TimePoint last_refusal_warning_{};
  int refusals_not_logged_ = 0;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_CONNECTION_ACCEPTOR_H_
