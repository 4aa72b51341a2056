#include "rendezvous/grpc/channel_args.h"

#include "grpc/grpc.h"
#include "grpcpp/create_channel.h"

namespace ddprun::rendezvous {

void AddRendezvousAuth(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty()) context->AddMetadata(kAuthMetadataKey, AuthMetadataValue(token));
}

grpc::ChannelArguments MakeChannelArguments(const ChannelTuning& tuning) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(kReconnectBackoffInitial.count()));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(kReconnectBackoffInitial.count()));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(kReconnectBackoffMax.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(tuning.keepalive_time.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(tuning.keepalive_timeout.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  if (tuning.max_receive_message_bytes >= 0) {
    args.SetMaxReceiveMessageSize(tuning.max_receive_message_bytes);
  }
  if (!tuning.ssl_target_name_override.empty()) {
    args.SetSslTargetNameOverride(tuning.ssl_target_name_override);
  }
  return args;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeRendezvousChannel(const ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      MakeChannelCredentials(options.tls);
  if (!creds.ok()) return creds.status();
  // Retry an unreachable server quickly: read_timeout bounds the whole attempt anyway.
  ChannelTuning tuning;
  tuning.max_receive_message_bytes = kMaxRendezvousMessageBytes;
  tuning.ssl_target_name_override = options.tls.server_name_override;
  return grpc::CreateCustomChannel(options.endpoint, *creds, MakeChannelArguments(tuning));
}

}  // namespace ddprun::rendezvous
