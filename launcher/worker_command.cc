#include "launcher/worker_command.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace ddprun::launcher {
namespace {

// Python's string.Template identifier: [_a-zA-Z][_a-zA-Z0-9]* (ASCII, as Template's flags say).
size_t IdentifierLength(absl::string_view s) {
  if (s.empty() || !(absl::ascii_isalpha(s[0]) || s[0] == '_')) return 0;
  size_t n = 1;
  while (n < s.size() && (absl::ascii_isalnum(s[n]) || s[n] == '_')) ++n;
  return n;
}

}  // namespace

std::string PythonExecutable(const Environment& env) {
  auto it = env.find("PYTHON_EXEC");
  return it != env.end() && !it->second.empty() ? it->second : "python3";
}

std::string SubstituteMacros(absl::string_view arg, int local_rank) {
  constexpr absl::string_view kName = "local_rank";
  std::string out;
  out.reserve(arg.size());
  size_t i = 0;
  while (i < arg.size()) {
    if (arg[i] != '$') {
      out.push_back(arg[i++]);
      continue;
    }
    absl::string_view rest = arg.substr(i + 1);
    if (!rest.empty() && rest[0] == '$') {  // $$ -> $
      out.push_back('$');
      i += 2;
      continue;
    }
    if (!rest.empty() && rest[0] == '{') {  // ${name}
      const size_t n = IdentifierLength(rest.substr(1));
      if (n > 0 && rest.size() > n + 1 && rest[n + 1] == '}' && rest.substr(1, n) == kName) {
        absl::StrAppend(&out, local_rank);
        i += n + 3;
        continue;
      }
    } else {  // $name
      const size_t n = IdentifierLength(rest);
      if (n > 0 && rest.substr(0, n) == kName) {
        absl::StrAppend(&out, local_rank);
        i += n + 1;
        continue;
      }
    }
    out.push_back('$');  // not a macro ddprun knows: left as written
    ++i;
  }
  return out;
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
