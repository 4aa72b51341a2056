// Chooses and builds the agent's rendezvous from its options:
//   --standalone            LocalRendezvous with a random run id; the store listens on a free
//                           port. One node has nobody to agree with, so no server runs (and no
//                           gRPC is loaded: see grpc_rendezvous_plugin.h).
//   --rdzv-backend=static   one node: LocalRendezvous. More: the c10d rendezvous that node 0's
//                           agent hosts at MASTER_ADDR:(MASTER_PORT + 1), wrapped so that the
//                           workers see the flags' master (static_rendezvous.h); with
//                           --rdzv-conf static_coordination=none, LocalRendezvous from
//                           --node-rank / --master-addr / --master-port (each node on its own).
//   --rdzv-backend=c10d     the gRPC client of the server at --rdzv-endpoint; the agent on the
//                           endpoint's host (or with is_host=1) also runs the server, unless
//                           another process on this host already serves that port.
//                           The c10d client renews a local lease (launcher/fence) its workers
//                           check before they commit anything.
//   --rdzv-backend=etcd     (alias etcd-v3) the etcd v3 rendezvous of the same plugin, on the
//                           cluster of --rdzv-endpoint=h1:p1[,h2:p2...].
#ifndef DDPRUN_LAUNCHER_RDZV_RENDEZVOUS_SETUP_H_
#define DDPRUN_LAUNCHER_RDZV_RENDEZVOUS_SETUP_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/executor.h"
#include "launcher/config/host_info.h"
#include "launcher/config/options.h"
#include "launcher/config/rdzv_conf.h"
#include "launcher/fence/local_lease.h"
#include "launcher/store/store_server.h"
#include "rendezvous/api/grpc_rendezvous_plugin.h"
#include "rendezvous/api/rendezvous.h"
#include "rendezvous/api/run_config.h"

namespace ddprun::launcher {

inline constexpr int kDefaultRdzvPort = 29400;

struct RendezvousSetup {
  std::string run_id;
  // c10d and etcd: the local lease the backend renews and the workers check (launcher/fence);
  // null for the other backends (their workers get no DDPRUN_LEASE_FD). Before `rendezvous`,
  // which renews it from its own threads until destroyed.
  std::unique_ptr<fence::LocalLease> lease;
  std::unique_ptr<rendezvous::Rendezvous> rendezvous;
  GrpcRendezvous* grpc = nullptr;  // `rendezvous` when it is the c10d one
  // The job's c10d store (TORCHELASTIC_USE_AGENT_STORE=True), listening before any worker
  // starts and until the agent ends; null where another node's agent hosts it (static jobs:
  // node 0's, at --master-port). With a rendezvous server every agent hosts one on a port of its
  // own, announced when it joins; the round's MASTER_PORT is the one of group rank 0's agent.
  std::unique_ptr<store::StoreServer> store;
};

// --preflight as the run will have it: on, or auto in a multi-node run, where someone compares
// the nodes (the rendezvous server of c10d, ddprun-rdzv and a coordinated static job; etcd's
// coordinating agent).
bool PreflightEnabled(const LaunchOptions& options);

// The c10d settings from the options (token loaded, is_host decided); no gRPC involved.
absl::StatusOr<C10dSettings> MakeC10dSettings(const LaunchOptions& options, const HostInfo& host);

// The settings of a coordinated static job (static_rendezvous.h): node 0 hosts at MASTER_ADDR
// on --rdzv-conf static_port (default MASTER_PORT + 1).
absl::StatusOr<C10dSettings> MakeStaticSettings(const LaunchOptions& options);

// The etcd settings from the options: --rdzv-endpoint=h1:p1,h2:p2,... (port 2379 by default).
absl::StatusOr<EtcdSettings> MakeEtcdSettings(const LaunchOptions& options);

// True when `host` names this machine: localhost, a loopback address, its hostname, or one of
// its interface addresses.
bool IsLocalHost(const std::string& host, const HostInfo& info);

absl::StatusOr<RendezvousSetup> SetUpRendezvous(const LaunchOptions& options, const HostInfo& host,
                                                Executor* executor);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_RDZV_RENDEZVOUS_SETUP_H_
