// Slurm support: what a Slurm job step tells ddprun through its environment, and the defaults
// and mode ddprun derives from it. Pure functions of an Environment (no scontrol, no I/O), so
// every case is unit-tested with a made-up environment.
//
// Variables read (only when SLURM_JOB_ID is set and neither --no-slurm nor DDPRUN_NO_SLURM=1
// turns this off):
//   SLURM_JOB_ID                     run id (with the step id) and the derived ports
//   SLURM_STEP_ID, SLURM_STEPID      step id; unset in the batch script itself (outside srun)
//   SLURM_STEP_NODELIST              the step's hosts (the first one hosts the rendezvous),
//     else SLURM_JOB_NODELIST, else SLURM_NODELIST
//   SLURM_STEP_NUM_NODES             node count, else SLURM_NNODES, else SLURM_JOB_NUM_NODES
//   SLURM_NODEID                     node rank
//   SLURMD_NODENAME                  this node's name (decides which agent hosts the server)
//   SLURM_STEP_TASKS_PER_NODE        tasks per node ("2(x3),1"), else SLURM_NTASKS_PER_NODE,
//     else SLURM_TASKS_PER_NODE      (more than one anywhere -> per-task mode)
//   SLURM_STEP_NUM_TASKS, SLURM_NTASKS   WORLD_SIZE in per-task mode
//   SLURM_PROCID, SLURM_LOCALID      RANK and LOCAL_RANK in per-task mode
//   SLURM_STEP_GPUS, SLURM_GPUS_ON_NODE, CUDA_VISIBLE_DEVICES   the step's GPUs on this node
//   SLURM_RESTART_COUNT              TORCHELASTIC_RESTART_COUNT in per-task mode (requeues)
#ifndef DDPRUN_LAUNCHER_CONFIG_SLURM_ENV_H_
#define DDPRUN_LAUNCHER_CONFIG_SLURM_ENV_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/environment.h"
#include "launcher/config/flag_value.h"
#include "launcher/config/options.h"

namespace ddprun::launcher {

// The facts of the job step this process runs in.
struct SlurmStep {
  std::string job_id;
  std::string step_id;  // empty outside srun (the batch script)
  std::vector<std::string> nodes;
  std::string nodelist_var;  // the variable `nodes` came from, for messages
  int num_nodes = 1;
  std::string num_nodes_var;
  int node_id = 0;
  std::string node_name;            // SLURMD_NODENAME, may be empty
  std::vector<int> tasks_per_node;  // one entry per node of the step, when known
  std::string tasks_per_node_var;
  int ntasks = 1;
  int procid = 0;
  int localid = 0;
  int gpus = 0;  // the step's GPUs on this node
  std::string gpus_var;
  int restart_count = 0;

  bool in_step() const { return !step_id.empty(); }
  // Tasks of this step on this node (1 when unknown).
  int LocalTasks() const;
  // The most tasks any node of the step runs.
  int MaxTasksPerNode() const;
};

// Reads the step. Unusable values (a node list ddprun cannot parse, a non-numeric
// SLURM_NODEID) are kInvalidArgument naming the variable and its value.
absl::StatusOr<SlurmStep> ReadSlurmStep(const Environment& env);

// "2(x3),1" -> {2, 2, 2, 1} (Slurm's SLURM_TASKS_PER_NODE format).
absl::StatusOr<std::vector<int>> ParseTasksPerNode(const std::string& what,
                                                   const std::string& value);

enum class SlurmMode {
  kAgent,    // one srun task per node: ddprun is the agent as usual
  kPerTask,  // several tasks per node: each task is one worker, exec'd in place
};

// True when Slurm support applies: SLURM_JOB_ID is set, DDPRUN_NO_SLURM is not a true value
// and the last no-slurm flag in `given` (--no-slurm, PET_NO_SLURM, YAML no-slurm) is not true.
bool SlurmWanted(const Environment& env, const std::vector<FlagValue>& given);

struct SlurmPlan {
  SlurmStep step;
  SlurmMode mode = SlurmMode::kAgent;
  std::string run_id;      // "JOB.STEP", or "JOB" outside srun
  std::string first_host;  // of the step's node list
  int rdzv_port = 0;       // derived from the job and step ids (c10d endpoint)
  int master_port = 0;     // derived likewise (per-task mode and --rdzv-backend=static)
  // Flag values Slurm implies, to be applied below every explicit source (PET_*, YAML, command
  // line); only flags the user did not give.
  std::vector<FlagValue> defaults;
  std::vector<std::string> warnings;  // printed, not fatal
};

// Ports ddprun derives from a job so that concurrent jobs (and steps) sharing a node do not
// collide and every node of a step computes the same one. Below 32768, the start of Linux's
// default ephemeral range, so an outgoing connection never holds them.
int SlurmRdzvPort(const std::string& job_id, const std::string& step_id);
int SlurmMasterPort(const std::string& job_id, const std::string& step_id);

// Chooses the mode and the defaults for `step`, given the flags the user set explicitly
// (weakest first; for a flag given twice the last one counts). A contradiction between an
// explicit flag and the step (--nnodes=3 in a 2-node step, --node-rank other than SLURM_NODEID,
// --nproc-per-node=gpu with no GPU in the step, --standalone in a multi-node step, several
// workers per task in per-task mode) is kInvalidArgument naming both sides.
absl::StatusOr<SlurmPlan> PlanSlurm(const SlurmStep& step,
                                    const std::vector<FlagValue>& explicit_flags);

// The one line ddprun prints about the chosen mode, from the final options, e.g.
//   Slurm job 123 step 0: agent mode, 2 nodes, node rank 1, rendezvous n1:21968
//   Slurm job 123 step 0: per-task mode, rank 3 of 4 (no agent; Slurm restarts)
std::string DescribeSlurmPlan(const SlurmPlan& plan, const LaunchOptions& options);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_SLURM_ENV_H_
