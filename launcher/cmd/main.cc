// ddprun: parse the options, build the agent, run it (or `ddprun status ...`).
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/environment.h"
#include "common/kernel_version.h"
#include "common/log.h"
#include "launcher/agent/agent.h"
#include "launcher/cmd/agent_secrets.h"
#include "launcher/cmd/slurm_per_task.h"
#include "launcher/cmd/status_command.h"
#include "launcher/config/cli.h"

namespace {

// The agent finds its workers' process trees, their threads' states and the orphans it must
// reap in /proc. In a root without it (a chroot, a bare container; the static binaries run
// there) none of that would work and jobs would misbehave quietly, so ddprun refuses to start.
bool ProcMounted() { return access("/proc/self/stat", R_OK) == 0; }

}  // namespace

int main(int argc, char** argv) {
  using namespace ddprun::launcher;
  const ddprun::Environment env = ddprun::CurrentEnvironment();
  const HostInfo host = DetectHostInfo(env);
  if (argc > 1 && std::string(argv[1]) == "status") {
    return RunStatusCommand(std::vector<std::string>(argv + 2, argv + argc), host);
  }
  const bool as_launch = std::filesystem::path(argv[0]).filename() == kLaunchProgramName;
  auto parsed = ParseCommandLine(std::vector<std::string>(argv + 1, argv + argc),
                                 as_launch ? WithLaunchDefaults(env) : env, host);
  if (!parsed.ok()) {
    ddprun::WriteAll(
        2, std::string("ddprun: error: ") + std::string(parsed.status().message()) + "\n");
    return kExitUsage;
  }
  if (parsed->exit_now) {
    ddprun::WriteAll(1, parsed->text);
    return 0;
  }
  ddprun::SetVerbose(parsed->options.verbose);
  for (const std::string& w : parsed->warnings) ddprun::LogWarning(w);
  if (parsed->platform) {
    ddprun::LogInfo(DescribePlatformPlan(*parsed->platform, parsed->options));
  }
  if (parsed->slurm) {
    for (const std::string& w : parsed->slurm->warnings) ddprun::LogWarning(w);
    ddprun::LogInfo(DescribeSlurmPlan(*parsed->slurm, parsed->options));
    if (parsed->slurm->mode == SlurmMode::kPerTask) {
      if (parsed->options.preload_kind != ddprun::launcher::PreloadKind::kOff) {
        // Each task becomes its worker in place: there is no agent to keep a spare.
        ddprun::LogWarning(absl::StrCat(parsed->options.preload_given,
                                        ": not used when each Slurm task runs its worker in "
                                        "place (no agent, no restarts)"));
      }
      const absl::Status s = ExecPerTask(*parsed->slurm, parsed->options, env);  // on failure
      ddprun::WriteAll(2, absl::StrCat("ddprun: error: ", s.message(), "\n"));
      return kExitUsage;
    }
  }
  if (absl::Status kernel = ddprun::CheckKernelVersion(); !kernel.ok()) {
    ddprun::WriteAll(2, absl::StrCat("ddprun: error: ", kernel.message(), "\n"));
    return kExitUsage;
  }
  if (!ProcMounted()) {
    ddprun::WriteAll(2,
                     "ddprun: error: /proc is not mounted (no /proc/self/stat): the agent needs it "
                     "to follow its workers; mount it (mount -t proc proc /proc) in this root\n");
    return kExitUsage;
  }
  // Before the agent forks anything (its orphan guard shares this memory).
  AgentSecretsOptions secrets;
  secrets.token_file = !parsed->options.rdzv.token_file.empty();
  HideAgentSecrets(secrets);
  Agent::BlockAgentSignals(parsed->options);
  Agent agent(std::move(parsed->options), env, host);
  return agent.Run();
}
