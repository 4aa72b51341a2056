// Where an option's value comes from, and which source wins. Weakest first:
//   torchrun's defaults (LaunchOptions) < the job's environment (a Slurm step or a platform's
//   MASTER_ADDR/RANK..., slurm_env.h, platform_env.h) < torch 2.x's two variables
//   (TORCH_ELASTIC_SHUTDOWN_TIMEOUT, TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE) < PET_<FLAG>
//   variables < the YAML file of --config < the command line.
// Pure: the caller reads the environment, the file and the arguments; these functions only
// order what was read.
#ifndef DDPRUN_LAUNCHER_CONFIG_PRECEDENCE_H_
#define DDPRUN_LAUNCHER_CONFIG_PRECEDENCE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/environment.h"
#include "launcher/config/flag_value.h"
#include "launcher/config/yaml_config.h"

namespace ddprun::launcher {

// Every source's values, each list in its own order (a later value of one flag wins).
struct FlagSources {
  std::vector<FlagValue> job;          // Slurm's or a platform's defaults
  std::vector<FlagValue> environment;  // torch 2.x's variables, then PET_* (EnvironmentValues)
  std::vector<FlagValue> yaml;         // --config FILE (ConfigFileValues)
  std::vector<FlagValue> command_line;
};

// The values the user gave (environment < YAML < command line), weakest first: what the
// planners of the job's environment (slurm_env.h, platform_env.h) must not override.
std::vector<FlagValue> ExplicitValues(const FlagSources& sources);

// Every value in precedence order, weakest first: applied in this order, the last one wins.
std::vector<FlagValue> InPrecedenceOrder(const FlagSources& sources);

// The flag values `env` gives: torch 2.x's variables for two flags (weaker), then PET_<FLAG>
// for every flag of the table, each named by its variable ("PET_NNODES").
std::vector<FlagValue> EnvironmentValues(const Environment& env);

// A --config file's contents: flag values ("job.yaml:3: nnodes") and the entrypoint it names.
struct ConfigFileValues {
  std::vector<FlagValue> flags;
  std::string entrypoint;                    // script / entrypoint; empty: none
  std::vector<std::string> entrypoint_args;  // script-args / args
};
// The values of `file`'s keys. A key that is no flag, or a value of the wrong shape, is
// kInvalidArgument naming FILE:LINE.
absl::StatusOr<ConfigFileValues> FromConfigFile(const std::string& file,
                                                const std::vector<ConfigValue>& values);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_PRECEDENCE_H_
