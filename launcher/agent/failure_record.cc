#include "launcher/agent/failure_record.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/signal_names.h"
#include "rendezvous/api/cause.h"

namespace ddprun::launcher {
namespace {

int64_t Micros(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

// Why the worker died, as the report names it (rendezvous/api/cause.h kDeathCauses).
rendezvous::Cause DeathCauseOfExit(const WorkerExit& exit) {
  switch (KindOf(exit)) {
    case FailureKind::kHang:
      return rendezvous::Cause::kHang;
    case FailureKind::kSignal:
      return DeathCauseOf(exit.cause.kind);
    case FailureKind::kExit:
    case FailureKind::kNeverStarted:
      break;
  }
  return rendezvous::Cause::kExit;
}

}  // namespace

FailureKind KindOf(const WorkerExit& exit) {
  if (!exit.hang.empty()) return FailureKind::kHang;
  if (exit.signal != 0) return FailureKind::kSignal;
  // A non-zero exit says more than where it came to: it stays kExit.
  if (exit.exit_code == 0 && exit.never_started != NeverStarted::kNone) {
    return FailureKind::kNeverStarted;
  }
  return FailureKind::kExit;
}

std::string NeverStartedReason(NeverStarted why) {
  switch (why) {
    case NeverStarted::kNone:
      break;
    case NeverStarted::kHandOverUnread:
      return "it ended without reading the start handed to its --preload spare";
    case NeverStarted::kNoHello:
      return "an in-process replacement, it ended before its hello on the control channel";
  }
  return "";
}

WorkerDeath DeathOf(const WorkerExit& exit) {
  WorkerDeath death;
  death.pid = exit.pid;
  death.signal = exit.signal;
  death.started_us = Micros(exit.started);
  death.died_us = Micros(exit.when);
  death.killed_by_agent = exit.signalled_by_agent;
  death.comm = exit.comm;
  return death;
}

std::string FailureMessage(const WorkerExit& exit, const FailureMessageSources& sources) {
  if (KindOf(exit) == FailureKind::kHang) return exit.hang;
  if (KindOf(exit) == FailureKind::kNeverStarted) return NeverStartedReason(exit.never_started);
  if (!sources.kill_reason.empty()) return sources.kill_reason;
  if (sources.error_file_message) {
    if (std::optional<std::string> message = sources.error_file_message()) return *message;
  }
  if (!sources.start_error.empty()) return sources.start_error;
  if (!sources.stderr_tail.empty()) return sources.stderr_tail.back();
  return "";
}

std::string CrashLoopSignature(const WorkerExit& exit, const std::string& cause_label,
                               const std::string& message) {
  std::string how;
  switch (KindOf(exit)) {
    case FailureKind::kHang:
    case FailureKind::kNeverStarted:  // a hand-over lost or a round left: not the program's own
      return "";
    case FailureKind::kSignal:
      if (!MayRepeatByItself(exit.cause.kind, exit.signal)) return "";
      how = absl::StrCat("signal ", SignalName(exit.signal));
      break;
    case FailureKind::kExit:
      how = absl::StrCat("exit code ", exit.exit_code);
      break;
  }
  return absl::StrCat(how, " (", cause_label, ")", message.empty() ? "" : ": ", message);
}

rendezvous::WorkerFailure ReportOf(const WorkerExit& exit, const FailureContext& context) {
  rendezvous::WorkerFailure failure;
  failure.hostname = context.hostname;
  failure.rank = exit.rank;
  failure.local_rank = exit.local_rank;
  failure.pid = exit.pid;
  failure.exit_code = exit.exit_code;
  failure.signal = exit.signal;
  failure.hang = KindOf(exit) == FailureKind::kHang;
  failure.cause_kind = DeathCauseOfExit(exit);
  failure.cause = exit.cause.text;
  failure.message = context.message;
  if (context.crash_loop == CrashLoop::kStop) {
    failure.signature =
        CrashLoopSignature(exit, rendezvous::CauseLabel(failure.cause_kind), failure.message);
    if (!failure.signature.empty()) failure.made_progress = context.made_progress;
  }
  return failure;
}

StepEvent FailureStepOf(const WorkerExit& exit, int64_t round, const std::string& hostname) {
  StepEvent detected{Step::kFailureDetected};
  switch (KindOf(exit)) {
    case FailureKind::kHang:
      detected.cause = rendezvous::Cause::kHang;
      detected.detail = absl::StrCat("hung (", exit.hang, ")");
      break;
    case FailureKind::kSignal:
      detected.cause = rendezvous::Cause::kWorkerSignal;
      detected.detail = absl::StrCat("was killed by ", SignalName(exit.signal),
                                     exit.cause.text.empty() ? "" : ": ", exit.cause.text);
      break;
    case FailureKind::kExit:
      detected.cause = rendezvous::Cause::kWorkerExit;
      detected.detail = absl::StrCat("exited ", exit.exit_code);
      break;
    case FailureKind::kNeverStarted:
      detected.cause = rendezvous::Cause::kWorkerExit;
      detected.detail =
          absl::StrCat("exited 0 before it started (", NeverStartedReason(exit.never_started), ")");
      break;
  }
  detected.rank = exit.rank;
  detected.host = hostname;
  detected.round = round;
  return detected;
}

}  // namespace ddprun::launcher
