#include "launcher/workers/worker_env.h"

#include "absl/strings/str_cat.h"
#include "common/env_variables.h"

namespace ddprun::launcher {

Environment BuildSpareEnv(const Environment& base, const WorkerEnvSpec& spec) {
  WorkerEnvSpec node_level = spec;
  node_level.error_file.clear();
  Environment env = BuildWorkerEnv(base, node_level, rendezvous::Assignment{});
  for (const char* name : kPerStartVariables) env.erase(name);
  return env;
}

bool ShouldDefaultOmpThreads(const Environment& base, int nproc_per_node) {
  return nproc_per_node > 1 && base.find("OMP_NUM_THREADS") == base.end();
}

Environment WithoutAgentOnlyVariables(Environment env) {
  // Secrets of the agent that its children never need: a worker (the job's code) must not be
  // able to speak to the rendezvous server as an agent (docs/design.md §5), nor read the token
  // in another child's /proc/PID/environ.
  for (const char* name : kAgentOnlyVariables) env.erase(name);
  return env;
}

Environment BuildWorkerEnv(const Environment& base, const WorkerEnvSpec& spec,
                           const rendezvous::Assignment& a) {
  Environment env = WithoutAgentOnlyVariables(base);
  const int rank = a.rank_offset + spec.local_rank;
  auto set = [&env](const char* key, const std::string& value) { env[key] = value; };
  set("LOCAL_RANK", absl::StrCat(spec.virtual_gpu ? 0 : spec.local_rank));
  if (spec.virtual_gpu) set("CUDA_VISIBLE_DEVICES", *spec.virtual_gpu);
  set("RANK", absl::StrCat(rank));
  set("GROUP_RANK", absl::StrCat(a.group_rank));
  // One role per job, so the role rank and size equal the global ones (as in torchrun).
  set("ROLE_RANK", absl::StrCat(rank));
  set("ROLE_NAME", spec.role);
  set("LOCAL_WORLD_SIZE", absl::StrCat(spec.local_world_size));
  set("WORLD_SIZE", absl::StrCat(a.world_size));
  set("GROUP_WORLD_SIZE", absl::StrCat(a.group_world_size));
  set("ROLE_WORLD_SIZE", absl::StrCat(a.world_size));
  set("MASTER_ADDR", a.master_addr);
  set("MASTER_PORT", absl::StrCat(a.master_port));
  set("TORCHELASTIC_RESTART_COUNT", absl::StrCat(a.restart_count));
  set("TORCHELASTIC_MAX_RESTARTS", absl::StrCat(spec.max_restarts));
  set("TORCHELASTIC_RUN_ID", spec.run_id);
  // "True": torch's env:// init then makes every rank a client of the store at
  // MASTER_ADDR:MASTER_PORT, under the prefix /worker/attempt_<TORCHELASTIC_RESTART_COUNT>.
  set("TORCHELASTIC_USE_AGENT_STORE", spec.store_host == StoreHost::kAgent ? "True" : "False");
  set("TORCHELASTIC_ERROR_FILE", spec.error_file);
  // torch 2.x's launcher exports it; torch.distributed.elastic's worker-side handlers read it.
  set("TORCHELASTIC_SIGNALS_TO_HANDLE", spec.signals_to_handle);
  // Kept if the user set it (torchrun does the same); the modern name, which torch 2.x reads.
  if (env.find("TORCH_NCCL_ASYNC_ERROR_HANDLING") == env.end()) {
    set("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  }
  if (ShouldDefaultOmpThreads(base, spec.local_world_size)) set("OMP_NUM_THREADS", "1");
  // ddprun's own: the rendezvous round, so workers can scope store keys to it.
  set(kRoundVariable.name, absl::StrCat(a.round));
  return env;
}

}  // namespace ddprun::launcher
