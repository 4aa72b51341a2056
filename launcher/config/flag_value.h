// One flag's value from one source, as the planners that derive defaults from a job's
// environment (slurm_env.h, platform_env.h) see the flags the user gave explicitly, and the
// parsers of the values that both they and the command line (cli.h) read.
#ifndef DDPRUN_LAUNCHER_CONFIG_FLAG_VALUE_H_
#define DDPRUN_LAUNCHER_CONFIG_FLAG_VALUE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "launcher/config/options.h"

namespace ddprun::launcher {

// `where` names the source for messages: "--nnodes", "PET_NNODES", "job.yaml:3: nnodes",
// "SLURM_STEP_NUM_NODES". Lists of them go weakest first.
struct FlagValue {
  std::string flag;  // canonical name, dashes: "nproc-per-node"
  std::string value;
  std::string where;
};

// The value of flag `name` that counts (the last one in `flags`), or nullptr.
const FlagValue* LastFlagValue(const std::vector<FlagValue>& flags, absl::string_view name);

// Whether the value of flag `name` that counts is a true boolean; false when absent or not one.
bool FlagIsTrue(const std::vector<FlagValue>& flags, absl::string_view name);

// Parses "N" or "MIN:MAX" (--nnodes). Errors are kInvalidArgument "WHAT=VALUE: why".
absl::Status ParseNnodes(const std::string& what, const std::string& value, int* min_nodes,
                         int* max_nodes);

// Parses "0".."3" or "LOCAL_RANK:MASK,..." (torchrun's --redirects / --tee).
absl::StatusOr<StdSpec> ParseStdSpec(const std::string& what, const std::string& value);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_FLAG_VALUE_H_
