// Waiting, with a deadline, for a child the test started with fork or Spawn (not Subprocess):
// its wait status, or nullopt when it is still running when the deadline passes. Header-only.
#ifndef DDPRUN_TESTS_TESTING_CHILD_EXIT_H_
#define DDPRUN_TESTS_TESTING_CHILD_EXIT_H_

#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>

#include <cerrno>
#include <chrono>
#include <optional>

namespace ddprun::testing {

// Reaps `pid` (-1: any child) once it has exited; polls every millisecond until `timeout`.
// `reaped` (optional) receives the pid reaped.
inline std::optional<int> WaitForChild(pid_t pid, std::chrono::milliseconds timeout,
                                       pid_t* reaped = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r > 0) {
      if (reaped != nullptr) *reaped = r;
      return status;
    }
    if (r < 0 && errno != EINTR) return std::nullopt;  // no such child
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    const timespec pause{0, 1000 * 1000};  // a child's exit raises no event the test can poll
    nanosleep(&pause, nullptr);
  }
}

// Whether `pid` has exited but is not yet reaped, or is gone: false while it runs.
inline bool ExitedOrGone(pid_t pid) {
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) return true;
  return info.si_pid == pid;
}

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_CHILD_EXIT_H_
