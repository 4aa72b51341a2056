#include "trainer/io/dist_env.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/env_variables.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace ddprun::trainer {
namespace {

constexpr int kMaxWorld = 1 << 20;
constexpr int kDefaultMasterPort = 29500;  // torch's default

absl::StatusOr<std::optional<int>> OptionalInt(const EnvGetter& getenv, const std::string& name,
                                               int min, int max) {
  std::optional<std::string> v = getenv(name);
  if (!v.has_value() || v->empty()) return std::optional<int>();
  DDPRUN_ASSIGN_OR_RETURN(int64_t n, ParseInt(name, *v, min, max));
  return std::optional<int>(static_cast<int>(n));
}

}  // namespace

EnvGetter ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

absl::StatusOr<DistEnv> ReadDistEnv(const EnvGetter& getenv) {
  DistEnv env;
  DDPRUN_ASSIGN_OR_RETURN(std::optional<int> rank, OptionalInt(getenv, "RANK", 0, kMaxWorld));
  DDPRUN_ASSIGN_OR_RETURN(std::optional<int> world,
                          OptionalInt(getenv, "WORLD_SIZE", 1, kMaxWorld));
  DDPRUN_ASSIGN_OR_RETURN(std::optional<int> local,
                          OptionalInt(getenv, "LOCAL_RANK", 0, kMaxWorld));
  DDPRUN_ASSIGN_OR_RETURN(std::optional<int> local_world,
                          OptionalInt(getenv, "LOCAL_WORLD_SIZE", 1, kMaxWorld));
  std::string rank_var = "RANK";
  std::string world_var = "WORLD_SIZE";
  if (!rank.has_value()) {
    // Started directly by srun: one task per process.
    DDPRUN_ASSIGN_OR_RETURN(rank, OptionalInt(getenv, "SLURM_PROCID", 0, kMaxWorld));
    if (rank.has_value()) {
      env.from_slurm = true;
      rank_var = "SLURM_PROCID";
      world_var = "SLURM_NTASKS";
      DDPRUN_ASSIGN_OR_RETURN(world, OptionalInt(getenv, "SLURM_NTASKS", 1, kMaxWorld));
      DDPRUN_ASSIGN_OR_RETURN(local, OptionalInt(getenv, "SLURM_LOCALID", 0, kMaxWorld));
      // Slurm writes e.g. "4" or "2(x3),1"; only the thread default depends on it, so the
      // leading count is enough and anything else is ignored.
      int per_node = 0;
      const std::string tasks = getenv("SLURM_NTASKS_PER_NODE").value_or("");
      if (absl::SimpleAtoi(tasks.substr(0, tasks.find_first_not_of("0123456789")), &per_node) &&
          per_node > 0) {
        local_world = per_node;
      }
    }
  }
  env.rank = rank.value_or(0);
  env.world_size = world.value_or(1);
  env.local_rank = local.value_or(0);
  env.local_world_size = local_world.value_or(env.world_size);
  if (rank.has_value() && !world.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(rank_var, " is set but ", world_var, " is not"));
  }
  if (env.rank >= env.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(rank_var, "=", env.rank, " is not below ", world_var, "=", env.world_size));
  }
  env.master_addr = getenv("MASTER_ADDR").value_or("");
  if (env.master_addr.empty() && env.from_slurm) {
    env.master_addr = getenv("SLURM_LAUNCH_NODE_IPADDR").value_or("");
  }
  DDPRUN_ASSIGN_OR_RETURN(std::optional<int> port, OptionalInt(getenv, "MASTER_PORT", 1, 65535));
  env.master_port = port.value_or(kDefaultMasterPort);
  if (env.world_size > 1 && env.master_addr.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("WORLD_SIZE=", env.world_size, " but MASTER_ADDR is not set"));
  }
  DDPRUN_ASSIGN_OR_RETURN(std::optional<int> restart,
                          OptionalInt(getenv, "TORCHELASTIC_RESTART_COUNT", 0, 1 << 30));
  env.restart_count = restart.value_or(0);
  env.use_agent_store = getenv("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  DDPRUN_ASSIGN_OR_RETURN(std::optional<int> round,
                          OptionalInt(getenv, kRoundVariable.name, 0, 1 << 30));
  if (env.use_agent_store) {
    // torch.distributed.rendezvous._create_c10d_store uses exactly this prefix.
    env.store_prefix = absl::StrCat("/worker/attempt_", env.restart_count);
  } else if (round.has_value()) {
    env.store_prefix = absl::StrCat("/ddp-train/round_", *round);
  } else {
    // Rank 0 hosts a fresh store each round, so no round scope is needed (torch's env:// store
    // has none either). The restart count would not do as one: a launcher that counts restarts
    // per agent (torchrun) gives a node that joined later another count than the survivors, and
    // its worker would wait on keys nobody writes.
    env.store_prefix = "/ddp-train";
  }
  env.error_file = getenv("TORCHELASTIC_ERROR_FILE").value_or("");
  DDPRUN_ASSIGN_OR_RETURN(env.omp_num_threads, OptionalInt(getenv, "OMP_NUM_THREADS", 1, 4096));
  env.gloo_socket_ifname = getenv("GLOO_SOCKET_IFNAME").value_or("");
  env.progress_file = getenv(kProgressFileVariable.name).value_or("");
  env.control_socket = getenv(kControlSocketVariable.name).value_or("");
  env.lease_fd = getenv(kLeaseFdVariable.name).value_or("");
  if (std::optional<std::string> advice = getenv(kCheckpointIntervalAdviceVariable.name)) {
    double seconds = 0;
    if (!absl::SimpleAtod(*advice, &seconds) || !(seconds > 0) || seconds > 1e9) {
      return absl::InvalidArgumentError(absl::StrCat(kCheckpointIntervalAdviceVariable.name, "=",
                                                     *advice,
                                                     ": not a positive number of seconds"));
    }
    env.checkpoint_advice_s = seconds;
  }
  return env;
}

}  // namespace ddprun::trainer
