// The gRPC channel arguments of ddprun's clients (the rendezvous client, `ddprun status`, the
// etcd backend): a quick reconnect backoff and keepalive pings. One copy, so that the two
// clients cannot drift apart in how they notice a dead peer.
//
// Stateless functions; thread-safe.
#ifndef DDPRUN_RENDEZVOUS_GRPC_CHANNEL_ARGS_H_
#define DDPRUN_RENDEZVOUS_GRPC_CHANNEL_ARGS_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/channel_arguments.h"
#include "rendezvous/grpc/client_options.h"

namespace ddprun::rendezvous {

// Reconnecting to an unreachable server: 100 ms, growing to 1 s (whatever bounds the whole
// attempt — read_timeout, an etcd call's deadline — stays the caller's).
inline constexpr std::chrono::milliseconds kReconnectBackoffInitial{100};
inline constexpr std::chrono::milliseconds kReconnectBackoffMax{1000};

// The largest message a rendezvous client accepts (a status with its members, an assignment).
inline constexpr int kMaxRendezvousMessageBytes = 1 << 20;

struct ChannelTuning {
  // A keepalive ping after this long without traffic, and the wait for its answer.
  std::chrono::milliseconds keepalive_time{10000};
  std::chrono::milliseconds keepalive_timeout{5000};
  int max_receive_message_bytes = -1;    // -1: gRPC's default
  std::string ssl_target_name_override;  // empty: none
};

// The shared token as call metadata (none when `token` is empty).
void AddRendezvousAuth(grpc::ClientContext* context, const std::string& token);

// Pings also without calls and without data; the reconnect backoff above.
grpc::ChannelArguments MakeChannelArguments(const ChannelTuning& tuning);

// A channel to `options.endpoint` with the client's credentials, keepalive and reconnect
// arguments, and a 1 MiB limit on a message received. Several clients may share one (the load
// generator does).
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeRendezvousChannel(const ClientOptions& options);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_CHANNEL_ARGS_H_
