#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/failure_record.h"
#include "launcher/agent/failure_report.h"
#include "launcher/workers/error_file_relay.h"

namespace ddprun::launcher {

void Agent::OnWorkerExited(const WorkerExit& reported) {
  WorkerExit exit = reported;
  if (KindOf(exit) == FailureKind::kSignal && explainer_ != nullptr) {
    exit.cause = explainer_->Explain(DeathOf(exit));
  }
  if (exit.local_rank >= 0 && exit.local_rank < static_cast<int>(ranks_.size())) {
    ranks_[exit.local_rank].exit = exit;
  }
  hangs_.OnExited(exit.local_rank, exit.pid);
  if (reform_) reform_->OnWorkerExited(exit.local_rank);
  // Posted, not handled inline: the group that reports the exit may be replaced by the actions
  // that follow (a restart starts a new group).
  loop_.Post([this, exit] {
    if (stopping_ && group_ && group_->live() == 0) {
      stopping_ = false;
      RecordStep(StepEvent{Step::kStopFinished});
    }
    Execute(state_.OnWorkerExited(exit));
  });
}

void Agent::OnHang(const HangVerdict& verdict) {
  if (!group_) return;
  WorkerExit hung;
  hung.local_rank = verdict.local_rank;
  hung.rank = current_.rank_offset + verdict.local_rank;
  hung.pid = group_->Pid(verdict.local_rank);
  hung.hang = verdict.Describe();
  hung.when = std::chrono::steady_clock::now();
  LogWarning(absl::StrCat("worker rank ", hung.rank, " (local rank ", hung.local_rank, ", pid ",
                          hung.pid, ") is hung: ", hung.hang));
  // The rendezvous must know every rank's progress before it names the straggler.
  ReportProgress(hangs_.Progress(), /*urgent=*/true);
  Execute(state_.OnHang(hung, verdict.signal));
}

void Agent::ReportFailure(const AgentAction& action) {
  const WorkerExit& e = action.failure;
  FailureMessageSources sources;
  sources.kill_reason = reform_ ? reform_->KillReason(e.local_rank) : "";
  sources.error_file_message = [this, &e]() -> std::optional<std::string> {
    std::optional<ErrorFileContents> err = ReadErrorFile(WorkerErrorFile(e.local_rank));
    if (!err.has_value()) return std::nullopt;
    return Abbreviate(err->message);
  };
  if (group_) {
    sources.start_error = group_->StartError(e.local_rank);
    sources.stderr_tail = group_->StderrTail(e.local_rank);
  }
  FailureContext context;
  context.hostname = host_.hostname;
  context.message = FailureMessage(e, sources);
  context.crash_loop = options_.crash_loop;
  context.made_progress = progress_in_attempt_;
  const rendezvous::WorkerFailure failure = ReportOf(e, context);
  RecordStep(FailureStepOf(e, action.round, host_.hostname));
  if (KindOf(e) != FailureKind::kHang) {
    LogWarning(absl::StrCat("worker rank ", e.rank, " (local rank ", e.local_rank, ", pid ", e.pid,
                            ") failed with ", DescribeExit(e), failure.message.empty() ? "" : ": ",
                            failure.message));
  }
  rendezvous_->ReportGroupState(action.round, rendezvous::GroupState::kFailed, failure);
}

void Agent::WriteFailureReport(const std::string& reason) {
  FailureReport report;
  report.headline = reason;
  report.hostname = host_.hostname;
  report.restarts_used = current_.restart_count;
  report.max_restarts = options_.max_restarts;
  report.root_cause = state_.root_cause();
  report.other_failures = state_.other_failures();
  if (report.root_cause.has_value()) {
    const int lr = report.root_cause->local_rank;
    report.error_file = WorkerErrorFile(lr);
    report.error = ReadErrorFile(report.error_file);
    RelayErrorFileToParent(report.error_file, *report.root_cause);
    if (group_) {
      report.stderr_tail = group_->StderrTail(lr);
      report.start_error = group_->StartError(lr);
      report.stacks_file = group_->StacksPath(lr);
      report.innermost_frames = group_->InnermostFrames(lr, 6);
    }
  }
  report.straggler = straggler_;
  if (const std::string glob = StacksGlob(); !glob.empty() && report.stacks_file.empty()) {
    report.stacks_file = absl::StrCat(glob, " (this node's workers)");
  }
  stderr_writer_.Write(FormatFailureReport(report));
}

std::string Agent::WorkerErrorFile(int lr) const {
  const int attempt =
      lr >= 0 && lr < static_cast<int>(ranks_.size()) ? ranks_[lr].attempt : attempt_;
  return ErrorFilePath(attempt, lr);
}

std::string Agent::ErrorFilePath(int attempt, int local_rank) const {
  return absl::StrCat(log_root_, "/attempt_", attempt, "/", local_rank, "/error.json");
}

void Agent::RelayErrorFileToParent(const std::string& worker_file, const WorkerExit& cause) {
  auto parent = env_.find("TORCHELASTIC_ERROR_FILE");
  if (parent == env_.end() || parent->second.empty()) return;
  // torch's ProcessFailure.exitcode: the exit code, or minus the signal that killed it.
  const int code = cause.signal != 0 ? -cause.signal : cause.exit_code;
  const absl::Status s = RelayErrorFile(worker_file, parent->second, code);
  if (!s.ok() && !absl::IsNotFound(s)) LogWarning(s.message());
}

std::string Agent::StacksGlob() const {
  if (!group_ || attempt_ < 0) return "";
  for (int lr = 0; lr < options_.nproc_per_node; ++lr) {
    if (!group_->StacksPath(lr).empty()) {
      return absl::StrCat(log_root_, "/attempt_", attempt_, "/*/stacks.txt");
    }
  }
  return "";
}

}  // namespace ddprun::launcher
