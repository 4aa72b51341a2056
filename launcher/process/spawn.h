// Starting one worker process the way the agent needs it: its own process group (so a stop
// reaches its children too), killed if the agent dies (PR_SET_PDEATHSIG), a clean signal mask,
// its stdout/stderr on the given pipes. exec failures come back as a status, not as a silent
// exit 127.
#ifndef DDPRUN_LAUNCHER_PROCESS_SPAWN_H_
#define DDPRUN_LAUNCHER_PROCESS_SPAWN_H_

#include <sys/types.h>

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/environment.h"

namespace ddprun::launcher {

struct SpawnRequest {
  std::string program;            // a path, or a name looked up in env's PATH
  std::vector<std::string> argv;  // argv[0] included
  Environment env;
  int stdout_fd = -1;  // -1: inherit the agent's
  int stderr_fd = -1;
  std::set<int> cpus;  // the CPUs the worker runs on (sched_setaffinity); empty: the agent's
  int keep_fd = -1;    // a close-on-exec descriptor the child keeps, at the same number
};

// Forks and execs. On success the child is running `program` (the exec has happened). Must be
// called from the thread whose death should kill the child (the agent's main thread).
absl::StatusOr<pid_t> Spawn(const SpawnRequest& request);

// Finds `name` in `path` (colon-separated) like execvp. Names with a '/' are returned as is.
absl::StatusOr<std::string> FindProgram(const std::string& name, const std::string& path);
// FindProgram in `env`'s PATH (/usr/local/bin:/usr/bin:/bin when it has none).
absl::StatusOr<std::string> FindProgramInEnv(const std::string& name, const Environment& env);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_PROCESS_SPAWN_H_
