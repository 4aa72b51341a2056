#include "launcher/workers/worker_command.h"

#include "absl/strings/str_cat.h"
#include "launcher/config/template_macros.h"

namespace ddprun::launcher {

std::string PythonExecutable(const Environment& env) {
  auto it = env.find("PYTHON_EXEC");
  return it != env.end() && !it->second.empty() ? it->second : "python3";
}

WorkerCommand BuildWorkerCommand(const LaunchOptions& options, const Environment& env,
                                 int local_rank) {
  WorkerCommand c;
  std::vector<std::string> args;
  switch (options.entrypoint_kind) {
    case EntrypointKind::kBinary:
      c.program = options.entrypoint;
      break;
    case EntrypointKind::kPythonScript:
      c.program = PythonExecutable(env);
      args = {"-u", options.entrypoint};
      break;
    case EntrypointKind::kPythonModule:
      c.program = PythonExecutable(env);
      args = {"-u", "-m", options.entrypoint};
      break;
  }
  if (!options.local_rank_arg.empty() && !options.use_env) {
    args.push_back(absl::StrCat("--", options.local_rank_arg, "=${local_rank}"));
  }
  args.insert(args.end(), options.entrypoint_args.begin(), options.entrypoint_args.end());
  c.argv.push_back(c.program);
  for (const std::string& a : args) c.argv.push_back(SubstituteMacros(a, local_rank));
  return c;
}

}  // namespace ddprun::launcher
