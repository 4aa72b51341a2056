// The environment of one worker: the agent's own environment plus exactly the variables torchrun
// sets (docs/reference/worker-environment.md), plus ddprun's DDPRUN_* extras.
#ifndef DDPRUN_LAUNCHER_WORKERS_WORKER_ENV_H_
#define DDPRUN_LAUNCHER_WORKERS_WORKER_ENV_H_

#include <optional>
#include <string>

#include "common/env_variables.h"
#include "common/environment.h"
#include "rendezvous/api/rendezvous.h"

namespace ddprun::launcher {

// Who serves the job's c10d TCPStore at MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE).
enum class StoreHost {
  kAgent,          // "True": the agent whose node holds group rank 0 (launcher/store/)
  kRankZeroWorker  // "False": the worker of rank 0 (Slurm's per-task mode: no agent runs)
};

struct WorkerEnvSpec {
  std::string run_id;
  std::string role = "default";
  int local_rank = 0;
  int local_world_size = 1;
  int max_restarts = 0;
  std::string error_file;  // TORCHELASTIC_ERROR_FILE for this worker
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";  // as --signals-to-handle
  // --virtual-local-rank: this worker's only GPU; it then sees LOCAL_RANK=0.
  std::optional<std::string> virtual_gpu;
  StoreHost store_host = StoreHost::kAgent;
};

// `base` is the agent's environment (inherited by every worker).
Environment BuildWorkerEnv(const Environment& base, const WorkerEnvSpec& spec,
                           const rendezvous::Assignment& assignment);

// Variables of ddprun's environment that BuildWorkerEnv removes: the rendezvous token
// (rendezvous/auth/token.h's kTokenEnv) is the agent's credential, not the job's.
inline constexpr const char* kAgentOnlyVariables[] = {kRdzvTokenVariable.name};

// `env` without kAgentOnlyVariables: the environment of every child of the agent (workers,
// health checks, nvidia-smi).
Environment WithoutAgentOnlyVariables(Environment env);

// The variables BuildWorkerEnv sets anew for every start (they depend on the assignment or the
// attempt); every other variable of a worker is the same at every start on this node.
inline constexpr const char* kPerStartVariables[] = {"RANK",
                                                     "GROUP_RANK",
                                                     "ROLE_RANK",
                                                     "WORLD_SIZE",
                                                     "GROUP_WORLD_SIZE",
                                                     "ROLE_WORLD_SIZE",
                                                     "MASTER_ADDR",
                                                     "MASTER_PORT",
                                                     "TORCHELASTIC_RESTART_COUNT",
                                                     "TORCHELASTIC_ERROR_FILE",
                                                     kRoundVariable.name};

// The environment a --preload spare starts with: the worker's, without kPerStartVariables
// (which the hand-over brings).
Environment BuildSpareEnv(const Environment& base, const WorkerEnvSpec& spec);

// True when ddprun should set OMP_NUM_THREADS=1 (and warn, as torchrun does): unset in the
// agent's environment and more than one worker per node.
bool ShouldDefaultOmpThreads(const Environment& base, int nproc_per_node);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_WORKERS_WORKER_ENV_H_
