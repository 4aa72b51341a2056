// A worker's failure on its way out of this node, as pure functions of one type, WorkerExit
// (made once from the wait status by the worker group; the kernel's explanation filled in by the
// agent): how it failed (classified once), what the death explainer is asked, the message, the
// report that goes to the rendezvous, the step the run timeline records and the crash-loop
// breaker's signature. No processes or files: the agent gathers the facts and sends the results.
#ifndef DDPRUN_LAUNCHER_AGENT_FAILURE_RECORD_H_
#define DDPRUN_LAUNCHER_AGENT_FAILURE_RECORD_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/agent/run_timeline.h"
#include "launcher/causes/death_cause.h"
#include "launcher/config/options.h"
#include "launcher/workers/worker_exit.h"
#include "rendezvous/api/rendezvous.h"

namespace ddprun::launcher {

// How a worker failed; every label and text below follows from this one classification.
enum class FailureKind {
  kExit,          // it exited non-zero
  kSignal,        // a signal killed it (the kernel may say why: WorkerExit::cause)
  kHang,          // it did not exit: no sign of life for too long (WorkerExit::hang)
  kNeverStarted,  // it exited 0 before it began its start (WorkerExit::never_started)
};
FailureKind KindOf(const WorkerExit& exit);

// Why a worker never began its start, for messages ("" for NeverStarted::kNone).
std::string NeverStartedReason(NeverStarted why);

// What the death explainer (launcher/causes) is asked about a worker killed by a signal.
WorkerDeath DeathOf(const WorkerExit& exit);

// Where a failure's one-line message may come from, first that has one wins: the hang, why the
// agent killed it (in-process recovery), its error file's message (read only when asked: the file
// is the worker's), why it could not be started, its last line of stderr.
struct FailureMessageSources {
  std::string kill_reason;
  std::function<std::optional<std::string>()> error_file_message;
  std::string start_error;
  std::vector<std::string> stderr_tail;
};
std::string FailureMessage(const WorkerExit& exit, const FailureMessageSources& sources);

// What the report to the rendezvous needs beside the exit.
struct FailureContext {
  std::string hostname;
  std::string message;  // FailureMessage
  CrashLoop crash_loop = CrashLoop::kRetry;
  bool made_progress = false;  // a step report or stdout line since this node's workers started
};

// The crash-loop breaker's signature (rendezvous/api/crash_loop.h): equal for the same failure,
// "" when it must not count. A hang, a kill from outside or by the OOM killer is no program's
// deterministic failure (MayRepeatByItself); the cause's kind, not its text, goes in, since a
// fault's address differs from one attempt to the next.
std::string CrashLoopSignature(const WorkerExit& exit, const std::string& cause_label,
                               const std::string& message);

// The failure report that goes to the rendezvous.
rendezvous::WorkerFailure ReportOf(const WorkerExit& exit, const FailureContext& context);

// The run timeline's kFailureDetected step for it (times filled in when recorded).
StepEvent FailureStepOf(const WorkerExit& exit, int64_t round, const std::string& hostname);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_AGENT_FAILURE_RECORD_H_
