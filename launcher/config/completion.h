// Shell completion scripts for ddprun (`ddprun --print-completion=bash|zsh`), generated from the
// same flag table as --help (cli.cc), so a new flag completes without anyone editing a script.
// The package installs their output (share/bash-completion, share/zsh/vendor-completions).
#ifndef DDPRUN_LAUNCHER_CONFIG_COMPLETION_H_
#define DDPRUN_LAUNCHER_CONFIG_COMPLETION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddprun::launcher {

// What a flag's value is, for the shell to offer candidates.
enum class ValueKind {
  kNone,    // a switch: takes no value
  kText,    // a value the shell cannot guess (a number, an address): nothing offered
  kChoice,  // one of `choices`
  kFile,    // a file name
  kFolder,  // a folder name
};

struct CompletionFlag {
  std::vector<std::string> spellings;  // "--nnodes", or "-m", "--module"
  ValueKind value = ValueKind::kNone;
  std::vector<std::string> choices;  // for kChoice
  std::string help;                  // one line; the first sentence is shown by zsh
};

// The completion script for `shell` ("bash" or "zsh"); InvalidArgument naming
// --print-completion and the value otherwise. After the training script (the first word that is
// neither a flag nor a flag's value) every word belongs to the script: file names are offered.
absl::StatusOr<std::string> CompletionScript(const std::string& shell,
                                             const std::vector<CompletionFlag>& flags);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_COMPLETION_H_
