// The ddprun command line: every torchrun flag with the same meaning, in both spellings
// (--nproc-per-node / --nproc_per_node), plus ddprun's own. Parsed once, in main, into
// LaunchOptions: the flags are one table (flag_table.h), the sources are merged in one order
// (precedence.h: defaults < Slurm or a platform < PET_* < YAML < command line), and the merged
// options are checked once (validation.h). Everything after the training script is passed to it
// untouched.
#ifndef DDPRUN_LAUNCHER_CONFIG_CLI_H_
#define DDPRUN_LAUNCHER_CONFIG_CLI_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/config/host_info.h"
#include "launcher/config/options.h"
#include "launcher/config/platform_env.h"
#include "launcher/config/slurm_env.h"

namespace ddprun::launcher {

struct CommandLine {
  // --help / --version / --print-completion: print `text` to stdout and exit 0, running nothing.
  bool exit_now = false;
  std::string text;
  LaunchOptions options;
  std::optional<SlurmPlan> slurm;  // set inside a Slurm job (unless --no-slurm)
  // Set on a node a platform describes with MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK.
  std::optional<PlatformPlan> platform;
  // Said once on ddprun's log before it starts (e.g. an --rdzv-conf key it does not read).
  std::vector<std::string> warnings;
};

// `args` excludes argv[0]. Errors are kInvalidArgument with one line naming the flag (or
// FILE:LINE, or the PET_ variable) and the value.
// The name that replaces `python -m torch.distributed.launch` in a command line (a link to
// ddprun). Invoked under it, ddprun takes launch's one different default: the script gets
// --local-rank=N (torch 2.x's launch) as PET_LOCAL_RANK_ARG would give it, so that --use-env
// turns it off and --local-rank-arg=local_rank gives torch 1.x's spelling, as with launch.
inline constexpr char kLaunchProgramName[] = "ddprun-launch";
Environment WithLaunchDefaults(Environment env);

absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                             const Environment& env, const HostInfo& host);

// The --help text.
std::string HelpText();

// docs/reference/flags.md: the flag table as Markdown, the same flags as --help (written by
// `make flag-reference`, checked by a test).
std::string FlagReferenceMarkdown();

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_CLI_H_
