// Per-task mode (slurm_env.h): several Slurm tasks per node, each task one worker. ddprun
// computes torchrun's worker environment from the task's Slurm variables and replaces itself
// with the training program (execve): no agent, no restarts of its own — Slurm owns the tasks,
// delivers their signals directly and restarts (requeues) the job.
#ifndef DDPRUN_LAUNCHER_CMD_SLURM_PER_TASK_H_
#define DDPRUN_LAUNCHER_CMD_SLURM_PER_TASK_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/environment.h"
#include "launcher/config/options.h"
#include "launcher/config/slurm_env.h"

namespace ddprun::launcher {

struct ExecSpec {
  std::string program;  // a path or a name to look up in PATH
  std::vector<std::string> argv;
  Environment env;
};

// What per-task mode execs: `base` plus RANK=SLURM_PROCID, LOCAL_RANK=SLURM_LOCALID,
// WORLD_SIZE=SLURM_NTASKS, GROUP_RANK=SLURM_NODEID, LOCAL_WORLD_SIZE = this node's tasks,
// GROUP_WORLD_SIZE = the step's nodes, MASTER_ADDR/MASTER_PORT from the options (the step's
// first host and a port derived from the job unless given), TORCHELASTIC_RESTART_COUNT =
// SLURM_RESTART_COUNT, and the rest of torchrun's variables (worker_env.h).
ExecSpec PerTaskExecSpec(const SlurmPlan& plan, const LaunchOptions& options,
                         const Environment& base);

// Replaces this process with the worker. Returns only on failure (kInvalidArgument naming the
// program, as the agent reports a missing one).
absl::Status ExecPerTask(const SlurmPlan& plan, const LaunchOptions& options,
                         const Environment& base);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CMD_SLURM_PER_TASK_H_
