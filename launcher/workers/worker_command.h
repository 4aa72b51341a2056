// The command line a worker runs, as torchrun builds it: the program (the entrypoint, or the
// Python interpreter with -u [-m]) and its arguments with torchrun's macros substituted.
#ifndef DDPRUN_LAUNCHER_WORKERS_WORKER_COMMAND_H_
#define DDPRUN_LAUNCHER_WORKERS_WORKER_COMMAND_H_

#include <string>
#include <vector>

#include "common/environment.h"
#include "launcher/config/options.h"

namespace ddprun::launcher {

struct WorkerCommand {
  std::string program;  // a path, or a name execvp looks up in PATH
  std::vector<std::string> argv;
};

// PYTHON_EXEC from the environment (as torchrun reads it), else python3.
std::string PythonExecutable(const Environment& env);

// The command of the worker with this local rank: every argument after the program (the script
// or module too, as torchrun does) goes through SubstituteMacros. With --local-rank-arg (and no
// --use-env), --local_rank=N or --local-rank=N follows the script, as torch.distributed.launch
// puts it.
WorkerCommand BuildWorkerCommand(const LaunchOptions& options, const Environment& env,
                                 int local_rank);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_WORKERS_WORKER_COMMAND_H_
