#include "rendezvous/grpc/run_status_query.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/grpc/channel_args.h"

namespace ddprun::rendezvous {
namespace {

RunPhase PhaseOf(const std::string& phase) {
  return phase == "running"      ? RunPhase::kRunning
         : phase == "recovering" ? RunPhase::kRecovering
         : phase == "closed"     ? RunPhase::kClosed
                                 : RunPhase::kJoining;
}

RunStatus FromResponse(const proto::StatusResponse& response) {
  RunStatus s;
  s.run_id = response.run_id();
  s.round = response.round();
  s.phase = PhaseOf(response.phase());
  s.restarts_used = response.restarts_used();
  s.max_restarts = response.max_restarts();
  s.min_nodes = response.min_nodes();
  s.max_nodes = response.max_nodes();
  s.close_message = response.close_message();
  s.server_instance = response.server_instance();
  for (const proto::Member& m : response.members()) {
    s.members.push_back(
        {m.node_id(), m.hostname(), m.addr(), m.group_rank(), m.nproc_per_node(), m.state()});
  }
  return s;
}

}  // namespace

absl::StatusOr<RunStatus> QueryRunStatus(const ClientOptions& options, const std::string& run_id) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeRendezvousChannel(options);
  if (!channel.ok()) return channel.status();
  auto stub = proto::RendezvousService::NewStub(*channel);
  grpc::ClientContext context;
  AddRendezvousAuth(&context, options.token);
  context.set_deadline(std::chrono::system_clock::now() + options.rpc_timeout);
  proto::StatusRequest request;
  request.set_run_id(run_id);
  proto::StatusResponse response;
  grpc::Status status = stub->Status(&context, request, &response);
  if (status.ok()) return FromResponse(response);
  const std::string what = absl::StrCat("status of run '", run_id, "' from ", options.endpoint,
                                        ": ", status.error_message());
  switch (status.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return absl::UnauthenticatedError(what);
    case grpc::StatusCode::NOT_FOUND:
      return absl::NotFoundError(what);
    default:
      return absl::UnavailableError(what);
  }
}

}  // namespace ddprun::rendezvous
