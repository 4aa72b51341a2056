// Platform launches: platforms that start one container per node and describe the job the way
// torch.distributed.launch expects (Kubeflow's PyTorchJob with a Master replica, SenseCore, ...)
// give each node MASTER_ADDR, MASTER_PORT, WORLD_SIZE = the number of nodes and RANK = this
// node's rank. `ddprun --nproc-per-node=gpu train.py` on such a node forms one multi-node world
// from them (the static rendezvous at MASTER_ADDR:MASTER_PORT). Pure functions of an
// Environment, like slurm_env.h.
//
// Telling a platform node from a worker of another launcher, where RANK and WORLD_SIZE count
// workers, not nodes: every launcher ddprun knows (torchrun, torch.distributed.launch with
// --use_env, ddprun itself) also gives its workers LOCAL_RANK, and torchrun and ddprun
// TORCHELASTIC_RUN_ID and GROUP_RANK; a platform gives a node none of these. So the platform
// reading applies only when MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK are all set and none of
// LOCAL_RANK, GROUP_RANK, TORCHELASTIC_RUN_ID is; not inside Slurm (slurm_env.h decides there);
// not when the command line chooses its own rendezvous (--standalone, --rdzv-backend other than
// static, --rdzv-endpoint); and not with --no-platform-env or DDPRUN_NO_PLATFORM=1.
#ifndef DDPRUN_LAUNCHER_CONFIG_PLATFORM_ENV_H_
#define DDPRUN_LAUNCHER_CONFIG_PLATFORM_ENV_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/environment.h"
#include "launcher/config/flag_value.h"
#include "launcher/config/options.h"

namespace ddprun::launcher {

struct PlatformPlan {
  int nodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  // Flag values the platform implies, applied below every explicit source.
  std::vector<FlagValue> defaults;
};

// nullopt when the platform reading does not apply (see above). Unusable values (a non-numeric
// RANK, RANK >= WORLD_SIZE, a port outside 1..65535) and explicit flags that contradict the
// platform (--nnodes other than WORLD_SIZE, --node-rank other than RANK) are kInvalidArgument
// naming both. An explicit --master-addr or --master-port wins over the variable.
absl::StatusOr<std::optional<PlatformPlan>> PlanPlatform(
    const Environment& env, const std::vector<FlagValue>& explicit_flags);

// The one line ddprun prints about it, e.g.
//   platform environment: node 1 of 2 (RANK, WORLD_SIZE), master 10.0.0.1:23456 (MASTER_ADDR,
//   MASTER_PORT), static rendezvous; --no-platform-env or DDPRUN_NO_PLATFORM=1 ignores it
std::string DescribePlatformPlan(const PlatformPlan& plan, const LaunchOptions& options);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_PLATFORM_ENV_H_
