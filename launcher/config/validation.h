// The checks that need every source merged: rules across flags (--nnodes against the backend,
// --hang-startup-timeout only with --hang-timeout), --rdzv-conf parsed into its typed form
// (LaunchOptions::rdzv), torch's hang variables, the entrypoint found on disk, and what is
// derived from them (the virtual GPUs, the kind of --preload spare). Reads only `env` and the
// file system.
#ifndef DDPRUN_LAUNCHER_CONFIG_VALIDATION_H_
#define DDPRUN_LAUNCHER_CONFIG_VALIDATION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/environment.h"
#include "launcher/config/options.h"

namespace ddprun::launcher {

// Checks and completes `o`. Errors are kInvalidArgument, one line naming the flag (or variable)
// and the value. What is worth a warning, not an error, goes to `warnings`.
absl::Status Validate(const Environment& env, LaunchOptions* o, std::vector<std::string>* warnings);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_VALIDATION_H_
