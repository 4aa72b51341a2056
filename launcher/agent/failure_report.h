// The one summary printed when a job fails: the root cause (first failure in time) with host,
// rank, local rank, pid, exit code or signal name, the tail of its stderr, and the message of
// its TORCHELASTIC_ERROR_FILE when it wrote one (torch's @record format; ddp-train writes it
// too). Pure formatting: the agent gathers the facts.
#ifndef DDPRUN_LAUNCHER_AGENT_FAILURE_REPORT_H_
#define DDPRUN_LAUNCHER_AGENT_FAILURE_REPORT_H_

#include <optional>
#include <string>
#include <vector>

#include "common/message_limit.h"
#include "common/signal_names.h"  // SignalName, for the exits described here
#include "launcher/workers/worker_exit.h"

namespace ddprun::launcher {

// What a worker's error file says (torch.distributed.elastic's ProcessFailure reads the same).
struct ErrorFileContents {
  std::string message;    // e.g. "ValueError: learning rate must be positive"
  std::string traceback;  // extraInfo.py_callstack, when present
  std::string timestamp;
};

// Parses an error file; nullopt when absent or unreadable (a warning is the caller's choice).
std::optional<ErrorFileContents> ReadErrorFile(const std::string& path);

// At most `max_bytes` of `text`, and when cut, how much more there was: an error message can be
// megabytes (a worker's own doing), and goes into the summary and to the rendezvous, whose
// messages are bounded. The whole message stays in the worker's error file.
inline constexpr size_t kMaxSummaryMessageBytes = kMaxMessageBytes;  // common/message_limit.h
std::string Abbreviate(const std::string& text, size_t max_bytes = kMaxSummaryMessageBytes);

// "exit code 3" / "signal SIGKILL (9)".
std::string DescribeExit(const WorkerExit& exit);

struct FailureReport {
  std::string headline;  // why the agent exits
  std::string hostname;
  int restarts_used = 0;
  int max_restarts = 0;
  std::optional<WorkerExit> root_cause;
  std::string start_error;  // when the root cause could not even be started
  std::string error_file;   // path given to the root-cause worker
  std::optional<ErrorFileContents> error;
  std::vector<std::string> stderr_tail;
  std::vector<WorkerExit> other_failures;
  // A hang: where the root cause's stacks are, and its innermost frames.
  std::string stacks_file;
  std::vector<std::string> innermost_frames;
  std::string straggler;  // from the rendezvous: the rank furthest behind, job-wide
};

std::string FormatFailureReport(const FailureReport& report);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_AGENT_FAILURE_REPORT_H_
