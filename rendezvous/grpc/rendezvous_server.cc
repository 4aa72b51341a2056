#include "rendezvous/grpc/rendezvous_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/loop_thread.h"
#include "common/strings.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "rendezvous/grpc/connection_acceptor.h"
#include "rendezvous/grpc/rendezvous_service.h"
#include "rendezvous/grpc/tls_check.h"

namespace ddprun::rendezvous {

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(
    const ServerOptions& options, const Clock* clock) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port=", options.port, " is out of range"));
  }
  if (options.handshake_timeout <= std::chrono::milliseconds(0) ||
      options.max_handshaking_per_address < 1 || options.max_connections_per_address < 0) {
    return absl::InvalidArgumentError(
        "the handshake timeout and the connection limits per address must be positive");
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
      MakeServerCredentials(options.tls);
  if (!creds.ok()) return creds.status();
  if (absl::Status tls = CheckServerTlsFiles(options.tls); !tls.ok()) return tls;

  AcceptorOptions accepting;
  accepting.handshake_window = options.handshake_timeout;
  accepting.max_handshaking_per_address = options.max_handshaking_per_address;
  accepting.max_connections_per_address = options.max_connections_per_address;
  auto listener = ConnectionAcceptor::Listen(options.host, options.port, accepting);
  if (!listener.ok()) return listener.status();

  std::unique_ptr<RendezvousServer> server(new RendezvousServer());
  server->host_ = options.host;
  server->listener_ = *std::move(listener);
  server->port_ = server->listener_->port();
  server->loop_ = std::make_unique<LoopThread>();
  server->service_ = std::make_unique<RendezvousServiceImpl>(
      server->loop_.get(), clock, options.token, options.limits, options.default_timeouts,
      options.embedded, options.round_quorum);
  // Beside the gRPC listener, on the same address: an agent sends its heartbeats where it
  // reached the server. Its reports go to the service's loop.
  RendezvousServiceImpl* reported_to = server->service_.get();
  LivenessReceiver::Callbacks liveness_reports;
  liveness_reports.on_silent = [reported_to](uint64_t conn, Duration silent_for, size_t suspected,
                                             size_t watched) {
    reported_to->PostSilent(conn, silent_for, suspected, watched);
  };
  liveness_reports.on_heard = [reported_to](uint64_t conn) { reported_to->PostHeard(conn); };
  auto liveness = LivenessReceiver::Start(options.host, std::move(liveness_reports));
  if (!liveness.ok()) {
    server->loop_->Stop();
    return liveness.status();
  }
  server->liveness_ = *std::move(liveness);
  server->service_->set_liveness(server->liveness_.get());

  // Process-wide switch read by the builder; every server of this process serves health.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // No listening port of gRPC's own: connections come from listener_ (see the header).
  server->handoff_ = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, *creds);
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  builder.SetMaxSendMessageSize(options.max_receive_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(options.keepalive_time.count()));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(options.keepalive_timeout.count()));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Agents ping every few seconds; do not punish them for it.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(options.handshake_timeout.count()));
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    server->loop_->Stop();
    return absl::UnavailableError(absl::StrCat("cannot serve on ", server->address()));
  }
  grpc::experimental::ExternalConnectionAcceptor* handoff = server->handoff_.get();
  server->listener_->Start([handoff](int listen_fd, int fd) {
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters connection;
    connection.listener_fd = listen_fd;
    connection.fd = fd;  // gRPC's from here on, closed by it
    handoff->HandleNewConnection(&connection);
  });
  if (grpc::HealthCheckServiceInterface* health = server->server_->GetHealthCheckService()) {
    health->SetServingStatus(true);
    health->SetServingStatus(proto::RendezvousService::service_full_name(), true);
  }
  if (options.http.has_value()) {
    HttpOptions http = *options.http;
    http.token = options.token;
    RendezvousServiceImpl* service = server->service_.get();
    const std::string name = server->address();
    auto endpoint = HttpEndpoint::Start(
        http, [service] { return service->RenderMetrics(); },
        [service, name] { return service->RenderStatusPage(name); });
    if (!endpoint.ok()) {
      server->Shutdown();
      return endpoint.status();
    }
    server->http_ = *std::move(endpoint);
  }
  return server;
}

RendezvousServer::~RendezvousServer() { Shutdown(); }

std::string RendezvousServer::address() const { return FormatHostPort(host_, port_); }

void RendezvousServer::SetHostNodeId(const std::string& node_id) {
  RendezvousServiceImpl* service = service_.get();
  loop_->Post([service, node_id] { service->set_host_node_id(node_id); });
}

int RendezvousServer::http_port() const { return http_ != nullptr ? http_->port() : 0; }

void RendezvousServer::Shutdown(std::chrono::milliseconds grace) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  // No new connections first; gRPC closes any handed over after its shutdown.
  if (listener_ != nullptr) listener_->Stop();
  http_.reset();  // its pages are rendered on the loop, which stops below
  if (server_ != nullptr) {
    if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
      health->SetServingStatus(false);
    }
    // Agent streams live as long as their runs: end them now rather than wait out `grace`.
    service_->EndAllStreams();
    // Cancels what is still running after `grace`; returns once every RPC is done, which
    // needs the loop (Status calls finish there), so the loop stops only afterwards.
    server_->Shutdown(std::chrono::system_clock::now() + grace);
  }
  if (loop_ != nullptr) loop_->Stop();
  liveness_.reset();  // its last reports are dropped by the stopped loop
}

void RendezvousServer::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&shut_down_));
}

}  // namespace ddprun::rendezvous
