// The command line a worker runs, as torchrun builds it: the program (the entrypoint, or the
// Python interpreter with -u [-m]) and its arguments with torchrun's macros substituted.
#ifndef DDPRUN_LAUNCHER_WORKER_COMMAND_H_
#define DDPRUN_LAUNCHER_WORKER_COMMAND_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "launcher/host_info.h"
#include "launcher/options.h"

namespace ddprun::launcher {

struct WorkerCommand {
  std::string program;  // a path, or a name execvp looks up in PATH
  std::vector<std::string> argv;
};

// PYTHON_EXEC from the environment (as torchrun reads it), else python3.
std::string PythonExecutable(const Environment& env);

// Python's string.Template.safe_substitute, which torchrun uses for its macros: `${name}` and
// `$name` become values[name], `$$` becomes `$`, and anything else after a `$` (a name not in
// `values`, an unclosed `${`) stays as written; such names are added to `unknown` when given.
std::string SubstituteTemplate(absl::string_view text,
                               const std::map<std::string, std::string>& values,
                               std::vector<std::string>* unknown = nullptr);

// The macros of --log-line-prefix-template for one worker.
std::map<std::string, std::string> LogLinePrefixValues(const std::string& role_name, int rank,
                                                       int local_rank, const std::string& hostname);

// torchrun's argument macros (torch.distributed.elastic.utils.api.macros): `${local_rank}` and
// `$local_rank` become the local rank; see SubstituteTemplate.
std::string SubstituteMacros(absl::string_view arg, int local_rank);

// The command of the worker with this local rank: every argument after the program (the script
// or module too, as torchrun does) goes through SubstituteMacros. With --local-rank-arg (and no
// --use-env), --local_rank=N or --local-rank=N follows the script, as torch.distributed.launch
// puts it.
WorkerCommand BuildWorkerCommand(const LaunchOptions& options, const Environment& env,
                                 int local_rank);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_WORKER_COMMAND_H_
