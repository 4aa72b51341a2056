// Which rendezvous the agent uses (--rdzv-backend), read once where the options are parsed.
#ifndef DDPRUN_LAUNCHER_CONFIG_RDZV_BACKEND_H_
#define DDPRUN_LAUNCHER_CONFIG_RDZV_BACKEND_H_

#include <optional>

#include "absl/strings/string_view.h"

namespace ddprun::launcher {

enum class RdzvBackend {
  kStatic,  // no server: --node-rank, --master-addr, --master-port
  kC10d,    // ddprun's gRPC rendezvous server at --rdzv-endpoint
  kEtcd,    // the etcd v3 rendezvous on the cluster of --rdzv-endpoint
  // kEtcd spelled etcd-v3: the same backend, kept apart only so that messages and the event
  // log repeat the name the user gave.
  kEtcdV3,
};

// kEtcd or kEtcdV3.
inline bool IsEtcd(RdzvBackend backend) {
  return backend == RdzvBackend::kEtcd || backend == RdzvBackend::kEtcdV3;
}

// "static", "c10d", "etcd", "etcd-v3", as the flag spells them.
absl::string_view RdzvBackendName(RdzvBackend backend);

// A --rdzv-backend value, case-insensitive: static, c10d, etcd, etcd-v3, or torchrun's etcd-v2,
// which reads as etcd. nullopt for anything else.
std::optional<RdzvBackend> ParseRdzvBackend(absl::string_view name);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_RDZV_BACKEND_H_
