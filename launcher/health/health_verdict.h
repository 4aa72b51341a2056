// How one run of the --health-check command ended, and how long a node that failed it waits
// before the next try. Pure.
#ifndef DDPRUN_LAUNCHER_HEALTH_HEALTH_VERDICT_H_
#define DDPRUN_LAUNCHER_HEALTH_HEALTH_VERDICT_H_

#include <string>
#include <vector>

#include "common/clock.h"

namespace ddprun::launcher {

struct HealthVerdict {
  enum class Outcome {
    kPassed,     // exit 0
    kFailed,     // a non-zero exit, or killed by a signal it did not get from ddprun
    kTimedOut,   // still running at --health-check-timeout: killed with its process group
    kCannotRun,  // the shell found no such command or could not execute it (126, 127), or no sh
  };
  Outcome outcome = Outcome::kFailed;
  int exit_code = 0;
  int signal = 0;
  Duration took{};
  // The last lines of its stdout and stderr together (HealthCheckOptions::tail_lines at most,
  // each cut to kMaxLineBytes), or why it could not start.
  std::vector<std::string> tail;

  static constexpr size_t kTailLines = 5;
  static constexpr size_t kMaxLineBytes = 300;

  bool passed() const { return outcome == Outcome::kPassed; }
  // "exit code 1 after 0.02 s", "timed out after 60 s (killed)", "cannot run it: exit code
  // 127 after 0.00 s"; then, when it printed anything, ": " and its last lines joined by " | ".
  std::string Describe() const;
};

// The exit status of a finished check (waitpid's), as a verdict without its output.
HealthVerdict VerdictFromStatus(int wait_status, Duration took);

// "1.25 s": a duration in the verdict's and the agent's health messages.
std::string SecondsText(Duration d);

// The wait before the next try of a node whose check failed `failures` times in a row (>= 1):
// 1 s, doubling, at most 30 s.
Duration HealthRetryDelay(int failures);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_HEALTH_HEALTH_VERDICT_H_
