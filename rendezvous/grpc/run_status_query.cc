#include "rendezvous/grpc/run_status_query.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/grpc/channel_args.h"
#include "rendezvous/grpc/proto_convert.h"

namespace ddprun::rendezvous {

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
  if (status.ok()) return FromProto(response);
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
