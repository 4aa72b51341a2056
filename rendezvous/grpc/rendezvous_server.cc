#include "rendezvous/grpc/rendezvous_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/loop_thread.h"
#include "common/strings.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "rendezvous/grpc/rendezvous_service.h"

namespace ddprun::rendezvous {

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(
    const ServerOptions& options, const Clock* clock) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port=", options.port, " is out of range"));
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
      MakeServerCredentials(options.tls);
  if (!creds.ok()) return creds.status();

  std::unique_ptr<RendezvousServer> server(new RendezvousServer());
  server->host_ = options.host;
  server->loop_ = std::make_unique<LoopThread>();
  server->service_ = std::make_unique<RendezvousServiceImpl>(
      server->loop_.get(), clock, options.token, options.limits, options.default_timeouts,
      options.embedded);

  // Process-wide switch read by the builder; every server of this process serves health.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string listen = FormatHostPort(options.host, options.port);
  builder.AddListeningPort(listen, *creds, &server->port_);
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
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    server->loop_->Stop();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  }
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

int RendezvousServer::http_port() const { return http_ != nullptr ? http_->port() : 0; }

void RendezvousServer::Shutdown(std::chrono::milliseconds grace) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
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
}

void RendezvousServer::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&shut_down_));
}

}  // namespace ddprun::rendezvous
