// Kills the workers' process groups if the agent dies without doing it (kill -9, OOM killer).
//
// PR_SET_PDEATHSIG takes each worker with the agent, but not the worker's own children (a
// DataLoader process, a `sleep &` in a shell worker): they would be re-parented to init and run
// on. The guard is a small process forked from the agent before any worker starts. The agent
// tells it, through a pipe, which process groups are live; when the pipe reaches end of file
// (the agent is gone, however it went), the guard SIGKILLs every group still listed and exits.
// On a normal exit every group has been removed already, so it kills nothing.
#ifndef DDPRUN_LAUNCHER_PROCESS_ORPHAN_GUARD_H_
#define DDPRUN_LAUNCHER_PROCESS_ORPHAN_GUARD_H_

#include <sys/types.h>

#include "absl/status/status.h"

namespace ddprun::launcher {

class OrphanGuard {
 public:
  OrphanGuard() = default;
  ~OrphanGuard();  // closes the pipe and waits for the guard to exit
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  // Forks the guard. Call with the agent's signals blocked (the guard keeps them blocked, so a
  // terminal's Ctrl-C or a SIGTERM to the agent's group leaves it alone).
  absl::Status Start();
  void Add(pid_t pgid);
  void Remove(pid_t pgid);
  pid_t pid() const { return pid_; }

 private:
  int fd_ = -1;
  pid_t pid_ = -1;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_PROCESS_ORPHAN_GUARD_H_
