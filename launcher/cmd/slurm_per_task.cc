#include "launcher/cmd/slurm_per_task.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "launcher/process/spawn.h"
#include "launcher/workers/worker_command.h"
#include "launcher/workers/worker_env.h"
#include "rendezvous/api/rendezvous.h"

namespace ddprun::launcher {

ExecSpec PerTaskExecSpec(const SlurmPlan& plan, const LaunchOptions& options,
                         const Environment& base) {
  const SlurmStep& s = plan.step;
  rendezvous::Assignment a;
  a.round = 0;
  a.group_rank = s.node_id;
  a.group_world_size = s.num_nodes;
  // RANK = rank_offset + LOCAL_RANK must be SLURM_PROCID whatever the task distribution
  // (block or cyclic), so the offset is taken from the task itself.
  a.rank_offset = s.procid - s.localid;
  a.world_size = s.ntasks;
  a.master_addr = options.master_addr;
  a.master_port = options.master_port;
  a.restart_count = s.restart_count;
  a.max_restarts = 0;

  WorkerEnvSpec spec;
  spec.run_id = plan.run_id;
  spec.role = options.role;
  spec.local_rank = s.localid;
  spec.local_world_size = s.LocalTasks();
  spec.max_restarts = 0;
  spec.signals_to_handle = options.signals_to_handle;
  // No agent stays to serve a store: the worker of rank 0 does, as without ddprun.
  spec.store_host = StoreHost::kRankZeroWorker;

  ExecSpec out;
  out.env = BuildWorkerEnv(base, spec, a);
  // No agent collects an error file here; an empty path would only confuse torch's @record.
  out.env.erase("TORCHELASTIC_ERROR_FILE");
  WorkerCommand command = BuildWorkerCommand(options, base, s.localid);
  out.program = std::move(command.program);
  out.argv = std::move(command.argv);
  return out;
}

absl::Status ExecPerTask(const SlurmPlan& plan, const LaunchOptions& options,
                         const Environment& base) {
  ExecSpec spec = PerTaskExecSpec(plan, options, base);
  absl::StatusOr<std::string> program = FindProgramInEnv(spec.program, spec.env);
  if (!program.ok()) return program.status();
  std::vector<std::string> env_strings;
  for (const auto& [key, value] : spec.env) env_strings.push_back(absl::StrCat(key, "=", value));
  std::vector<char*> argv, envp;
  for (std::string& a : spec.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  execve(program->c_str(), argv.data(), envp.data());
  return absl::InvalidArgumentError(absl::StrCat("cannot run ", *program, ": ", strerror(errno)));
}

}  // namespace ddprun::launcher
