// Children a test starts itself with fork or Spawn (not Subprocess): waiting for one with a
// deadline, and orphaning one through a middle process. Header-only.
#ifndef DDPRUN_TESTS_TESTING_CHILD_EXIT_H_
#define DDPRUN_TESTS_TESTING_CHILD_EXIT_H_

#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <utility>

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

// Forks a middle process that calls `start` (which starts a process of its own and returns its
// pid), tells the parent that pid and exits 0, orphaning what it started. Returns {the middle
// process, what it started}; the second is -1 when nothing was reported.
template <typename Start>
std::pair<pid_t, pid_t> ForkMiddle(Start start) {
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return {-1, -1};
  const pid_t middle = fork();
  if (middle == 0) {
    const pid_t started = start();
    (void)!write(report[1], &started, sizeof(started));
    _exit(0);
  }
  close(report[1]);
  pid_t started = -1;
  if (middle < 0 || read(report[0], &started, sizeof(started)) != sizeof(started)) started = -1;
  close(report[0]);
  return {middle, started};
}

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_CHILD_EXIT_H_
