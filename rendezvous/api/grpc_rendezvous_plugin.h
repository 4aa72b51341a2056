// The boundary between ddprun and its gRPC rendezvous, which lives in a plugin
// (lib/ddprun/libddprun_grpc.so beside the bin/ folder of ddprun) loaded with dlopen only when a
// job needs it (--rdzv-backend=c10d, `ddprun status`). Standalone and static jobs never load gRPC,
// protobuf or OpenSSL: those libraries alone would more than double the agent's memory
// (measured: 5.5 -> 13 MiB RSS) and add their relocation time to every start.
//
// Only this header is shared by both sides; it names no gRPC type. Both sides are built together
// by this project with the same compiler and the same Abseil, so C++ types cross the boundary.
#ifndef DDPRUN_RENDEZVOUS_API_GRPC_RENDEZVOUS_PLUGIN_H_
#define DDPRUN_RENDEZVOUS_API_GRPC_RENDEZVOUS_PLUGIN_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/executor.h"
#include "rendezvous/api/rendezvous.h"
#include "rendezvous/api/run_config.h"

namespace ddprun::launcher {

// Everything the c10d backend needs, parsed from the options by the agent.
struct C10dSettings {
  std::string run_id;
  std::string endpoint_host;
  int endpoint_port = 0;
  // The rest of a --rdzv-endpoint list ("host:port"): where the run may be served after its
  // hosting agent was lost (a successor serves at its own address). An agent that does not
  // find the run at the first endpoint looks for it there before hosting or waiting.
  std::vector<std::string> other_endpoints;
  bool host_here = false;  // start the server in this process (if the port is free)
  bool must_host = false;  // is_host=1: failing to serve is an error
  rendezvous::HostLoss host_loss = rendezvous::HostLoss::kFailOver;
  std::string token_file;  // empty: the token comes from $DDPRUN_RDZV_TOKEN (or none)
  std::string tls_cert, tls_key, tls_ca, tls_client_ca, tls_server_name;
  bool tls_required = false;  // protocol=https: TLS to the server even without tls_ca
  rendezvous::RunTimeouts timeouts;
  std::chrono::milliseconds read_timeout{60000};
  std::chrono::milliseconds rpc_timeout{10000};
  std::optional<std::chrono::milliseconds> close_timeout;  // unset: the client's default
  // When hosting: the server's /metrics and status page on http_host:http_port; unset: off.
  std::optional<int> http_port;
  std::string http_host = "127.0.0.1";
  // Called on the client's thread each time the server vouches for this node, with the time
  // the agent sent what it answered (launcher/fence/local_lease.h). Unset: nobody listens.
  std::function<void(TimePoint heard_from)> on_server_heard;
  // Likewise for each liveness ack, on the liveness sender's thread (ClientOptions).
  std::function<void(TimePoint heard_from, rendezvous::SilenceVerdict offered)> on_liveness_ack;
};

// Everything the etcd v3 backend needs (--rdzv-backend=etcd), parsed from the options.
struct EtcdSettings {
  std::vector<std::string> endpoints;  // "host:port" of any members of the cluster
  std::string prefix = "/ddprun";      // --rdzv-conf etcd_prefix
  std::string user;                    // --rdzv-conf etcd_user; empty: no authentication
  // --rdzv-conf etcd_password_file (first line); empty: $DDPRUN_ETCD_PASSWORD.
  std::string password_file;
  std::string tls_cert, tls_key, tls_ca, tls_server_name;
  bool tls_required = false;  // protocol=https: TLS to etcd even without tls_ca
  rendezvous::RunTimeouts timeouts;
  std::chrono::milliseconds read_timeout{60000};
  std::optional<std::chrono::milliseconds> close_timeout;  // unset: the backend's default
  // As C10dSettings': each renewal of this agent's etcd lease (with when it was asked for), and
  // each ack of the coordinator's liveness receiver.
  std::function<void(TimePoint heard_from)> on_server_heard;
  std::function<void(TimePoint heard_from, rendezvous::SilenceVerdict offered)> on_liveness_ack;
};

// A rendezvous client, and the server too when this agent hosts it.
class GrpcRendezvous : public rendezvous::Rendezvous {
 public:
  // Whether this process serves the run's rendezvous.
  virtual bool hosting() const = 0;
  // Other agents still connected to the run (when hosting); 0 when none or unknown.
  virtual int OtherAgents(const std::string& run_id) = 0;
};

class GrpcRendezvousPlugin {
 public:
  virtual ~GrpcRendezvousPlugin() = default;
  // The plugin links its own copy of common/log: the agent's --quiet must reach it too.
  virtual void SetVerbose(bool verbose) = 0;
  virtual absl::StatusOr<std::unique_ptr<GrpcRendezvous>> Create(const C10dSettings& settings,
                                                                 Executor* executor) = 0;
  // The etcd v3 backend (never hosting).
  virtual absl::StatusOr<std::unique_ptr<GrpcRendezvous>> CreateEtcd(const EtcdSettings& settings,
                                                                     Executor* executor) = 0;
  // `ddprun status --rdzv-backend=etcd`: as QueryRun, read from etcd.
  virtual absl::StatusOr<std::string> QueryEtcdRun(const EtcdSettings& settings,
                                                   const std::string& run_id) = 0;
  // `ddprun status`: the run's phase, round, members, ranks and addresses, restarts used, as
  // the JSON object `ddprun status --json` prints (status_command.h names its fields).
  virtual absl::StatusOr<std::string> QueryRun(const C10dSettings& settings,
                                               const std::string& run_id) = 0;
};

// The symbol the plugin exports, and the loader the agent calls.
inline constexpr char kGrpcPluginEntryPoint[] = "DdprunGrpcRendezvousPlugin";
using GrpcPluginEntryPoint = GrpcRendezvousPlugin* (*)();

// Where the plugin lies relative to the folder of the ddprun executable, in the build tree and
// in an installed prefix alike (CMake puts it there: launcher/CMakeLists.txt).
inline constexpr char kGrpcPluginRelativePath[] = "../lib/ddprun/libddprun_grpc.so";

// Loads the plugin from kGrpcPluginRelativePath (or $DDPRUN_GRPC_PLUGIN). A missing plugin is an
// error naming the file looked for. The plugin stays loaded for the life of the process.
absl::StatusOr<GrpcRendezvousPlugin*> LoadGrpcRendezvousPlugin();

}  // namespace ddprun::launcher

#endif  // DDPRUN_RENDEZVOUS_API_GRPC_RENDEZVOUS_PLUGIN_H_
