#include "launcher/health/health_verdict.h"

#include <sys/wait.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ddprun::launcher {

namespace {

// The shell's own codes: 127 "command not found", 126 "found but not executable".
constexpr int kShellNotFound = 127;
constexpr int kShellNotExecutable = 126;

}  // namespace

std::string SecondsText(Duration d) {
  return absl::StrFormat("%.2f s", std::chrono::duration<double>(d).count());
}

HealthVerdict VerdictFromStatus(int wait_status, Duration took) {
  HealthVerdict v;
  v.took = took;
  if (WIFEXITED(wait_status)) {
    v.exit_code = WEXITSTATUS(wait_status);
    v.outcome = v.exit_code == 0 ? HealthVerdict::Outcome::kPassed
                : v.exit_code == kShellNotFound || v.exit_code == kShellNotExecutable
                    ? HealthVerdict::Outcome::kCannotRun
                    : HealthVerdict::Outcome::kFailed;
  } else if (WIFSIGNALED(wait_status)) {
    v.signal = WTERMSIG(wait_status);
    v.outcome = HealthVerdict::Outcome::kFailed;
  }
  return v;
}

std::string HealthVerdict::Describe() const {
  std::string how;
  switch (outcome) {
    case Outcome::kPassed:
      how = absl::StrCat("passed after ", SecondsText(took));
      break;
    case Outcome::kTimedOut:
      how = absl::StrCat("timed out after ", SecondsText(took), " (killed)");
      break;
    case Outcome::kFailed:
    case Outcome::kCannotRun:
      how = absl::StrCat(outcome == Outcome::kCannotRun ? "cannot run it: " : "",
                         signal != 0 ? absl::StrCat("killed by signal ", signal)
                                     : absl::StrCat("exit code ", exit_code),
                         " after ", SecondsText(took));
      break;
  }
  if (tail.empty()) return how;
  return absl::StrCat(how, ": ", absl::StrJoin(tail, " | "));
}

Duration HealthRetryDelay(int failures) {
  const int doublings = std::clamp(failures - 1, 0, 5);  // 2^5 s > 30 s
  return std::min<Duration>(std::chrono::seconds(1 << doublings), std::chrono::seconds(30));
}

}  // namespace ddprun::launcher
