// RendezvousServer: the built-in rendezvous server, embeddable (the agent hosting
// --rdzv-endpoint) and used by the ddprun-rdzv daemon. Owns the gRPC server,
// the event loop that owns all rendezvous state, the rendezvous service and the standard gRPC
// health service. The listening sockets are its own (connection_acceptor.h): running out of file
// descriptors delays connections but never stops the server accepting.
//
// Thread-safety: all methods may be called from any thread. Shutdown() is idempotent.
#ifndef DDPRUN_RENDEZVOUS_GRPC_RENDEZVOUS_SERVER_H_
#define DDPRUN_RENDEZVOUS_GRPC_RENDEZVOUS_SERVER_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "rendezvous/api/run_config.h"
#include "rendezvous/grpc/security.h"
#include "rendezvous/http/http_endpoint.h"
#include "rendezvous/liveness/liveness_receiver.h"

namespace grpc {
class Server;
namespace experimental {
class ExternalConnectionAcceptor;
}  // namespace experimental
}  // namespace grpc

namespace ddprun {
class LoopThread;
}  // namespace ddprun

namespace ddprun::rendezvous {

class ConnectionAcceptor;
class RendezvousServiceImpl;

struct ServerOptions {
  // Address to bind. The daemon binds loopback unless told otherwise; an agent hosting the
  // endpoint of a multi-node run binds "0.0.0.0" (or "::").
  std::string host = "127.0.0.1";
  int port = 0;  // 0: the kernel picks one; port() tells which
  // Shared token; empty: no authentication (only sensible on loopback). Load it with
  // LoadToken(), never from a command-line value.
  std::string token;
  TlsServerFiles tls;
  ServerLimits limits;
  RunTimeouts default_timeouts;  // for joins that leave a timeout at 0
  int max_receive_message_bytes = 64 * 1024;
  // gRPC keepalive pings to agents: a dead TCP peer is noticed even when the kernel is not.
  std::chrono::milliseconds keepalive_time{10000};
  std::chrono::milliseconds keepalive_timeout{5000};
  // A connection must finish its TLS and HTTP/2 handshake (send its HTTP/2 settings) within
  // this, or gRPC closes it; at most `max_handshaking_per_address` from one source address are
  // kept within one such window, and `max_connections_per_address` open at once (0: half of
  // the descriptors left for connections); more from that address are closed at once
  // (connection_acceptor.h). Together they bound the connections that have not authenticated,
  // in time and in number, per address, with no global rate one address could use up.
  std::chrono::milliseconds handshake_timeout{10000};
  int max_handshaking_per_address = 1024;
  int max_connections_per_address = 0;
  // Hosted inside an agent: the agents are told so; when its stream breaks and its address
  // refuses connections, they move to a successor (rendezvous_client.h, failover).
  bool embedded = false;
  // Which nodes may form a round (run_config.h). An embedded server that may fail over takes
  // kMajorityOfLastRound: after a partition it may serve one side while a successor serves the
  // other. One whose agents await its return (a static job's) never has a second.
  RoundQuorum round_quorum = RoundQuorum::kAnyNodes;
  // The HTTP side (/metrics and the status page, http_endpoint.h); off unless set. Its token is
  // the server's.
  std::optional<HttpOptions> http;
};

class RendezvousServer {
 public:
  // Binds and starts serving. Errors: kInvalidArgument for bad options, a host that does not
  // resolve, or TLS files that are not a usable certificate and key; kUnavailable when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> Start(
      const ServerOptions& options, const Clock* clock = SystemClock::Get());
  ~RendezvousServer();  // Shutdown()

  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const { return port_; }
  // The HTTP side's port (0: off).
  int http_port() const;
  // "host:port" ("[::1]:port" for IPv6), with the real port.
  std::string address() const;
  // Embedded: the node of the agent that hosts this server (before that agent joins).
  void SetHostNodeId(const std::string& node_id);
  // Stops accepting calls, ends every stream (agents see the server go away), stops the loop.
  // Waits at most `grace` for in-flight calls.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(500))
      ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until Shutdown() was called (from another thread).
  void Wait() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  RendezvousServer() = default;

  // Set by Start(), then only read (their objects are thread-safe) until the destructor.
  std::string host_;
  int port_ = 0;
  std::unique_ptr<LoopThread> loop_;
  std::unique_ptr<RendezvousServiceImpl> service_;
  std::unique_ptr<ConnectionAcceptor> listener_;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> handoff_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpEndpoint> http_;
  // The liveness path's socket and thread (rendezvous/liveness/), for runs that turn it on;
  // reset once the loop is stopped (its reports are then dropped).
  std::unique_ptr<LivenessReceiver> liveness_;
  absl::Mutex mu_;  // makes Shutdown() idempotent and wakes Wait()
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_RENDEZVOUS_SERVER_H_
