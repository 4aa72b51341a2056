#include "launcher/agent/agent_state.h"

#include <csignal>

#include "absl/strings/str_cat.h"

namespace ddprun::launcher {

using Type = AgentAction::Type;

namespace {

// A round that ended in a hang anywhere wants every worker's stacks before the stop.
StopMode StopModeFor(const std::optional<rendezvous::HangNotice>& hang) {
  return hang.has_value() ? StopMode::kTakeStacksFirst : StopMode::kGracefully;
}

}  // namespace

AgentStateMachine::AgentStateMachine(int nproc_per_node) : nproc_(nproc_per_node) {}

int AgentStateMachine::ExitCodeForClose(const absl::Status& status) {
  if (status.ok()) return kExitSuccess;
  if (status.code() == absl::StatusCode::kResourceExhausted) return kExitWorkersFailed;
  return kExitRendezvous;
}

std::vector<AgentAction> AgentStateMachine::Exit(int code, const std::string& why) {
  phase_ = Phase::kDone;
  exit_reason_ = why;
  AgentAction exit{Type::kExit};
  exit.exit_code = code;
  exit.message = why;
  return {exit};
}

std::vector<AgentAction> AgentStateMachine::OnAssignment(const rendezvous::Assignment& a) {
  switch (phase_) {
    case Phase::kRendezvous: {
      phase_ = Phase::kRunning;
      round_ = a.round;
      live_ = nproc_;
      succeeded_ = 0;
      // The summary describes the attempt that ends the job: a failure here in an earlier round
      // is not the cause when the budget is spent by another node's failure in this one.
      previous_root_cause_ = std::move(root_cause_);
      root_cause_.reset();
      other_failures_.clear();
      AgentAction start{Type::kStartWorkers};
      start.assignment = a;
      return {start};
    }
    case Phase::kRunning: {
      // A new round while ours still runs: the server restarted us without a separate restart
      // message. Stop, then start with it.
      pending_assignment_ = a;
      return BeginStop(std::nullopt, "a new rendezvous round formed", StopMode::kGracefully);
    }
    case Phase::kStopping:
      pending_assignment_ = a;
      return {};
    case Phase::kDone:
      return {};
  }
  return {};
}

std::vector<AgentAction> AgentStateMachine::OnWorkerExited(const WorkerExit& exit) {
  if (phase_ != Phase::kRunning && phase_ != Phase::kStopping) return {};
  if (live_ > 0) --live_;
  if (phase_ == Phase::kStopping) {
    // Failures other than ddprun's own SIGTERM/SIGKILL, for the summary's "other failures".
    const bool ours = exit.signal == SIGTERM || exit.signal == SIGKILL ||
                      (stopping_for_hang_ && exit.signal == SIGABRT);
    if (!exit.ok() && !ours && root_cause_ && other_failures_.size() < 64) {
      other_failures_.push_back(exit);
    }
    return live_ == 0 ? GroupStopped() : std::vector<AgentAction>{};
  }
  // kRunning
  if (exit.ok()) {
    ++succeeded_;
    if (live_ > 0) return {};
    // Reporting success ends this node's membership (the server closes its stream); a separate
    // leave could overtake it and read as a membership change.
    AgentAction report{Type::kReportSucceeded};
    report.round = round_;
    std::vector<AgentAction> actions = {report};
    for (auto& a : Exit(kExitSuccess, "all workers exited 0")) actions.push_back(a);
    return actions;
  }
  return Fail(exit, 0);
}

std::vector<AgentAction> AgentStateMachine::OnHang(const WorkerExit& hung, int signal) {
  if (phase_ != Phase::kRunning) return {};
  return Fail(hung, signal);
}

std::vector<AgentAction> AgentStateMachine::Fail(const WorkerExit& cause, int hang_signal) {
  const bool hung = !cause.hang.empty();
  root_cause_ = cause;
  other_failures_.clear();
  AgentAction report{Type::kReportFailed};
  report.round = round_;
  report.failure = cause;
  std::vector<AgentAction> actions = {report};
  const StopMode how = hung ? StopMode::kTakeStacksFirst : StopMode::kGracefully;
  for (auto& a : BeginStop(std::nullopt, hung ? "a worker hung" : "a worker failed", how)) {
    if (a.type == Type::kStopWorkers) {
      a.failure = cause;
      a.hang_signal = hang_signal;
    }
    actions.push_back(a);
  }
  return actions;
}

std::vector<AgentAction> AgentStateMachine::OnRestart(
    const std::string& reason, const std::optional<rendezvous::HangNotice>& hang) {
  if (phase_ != Phase::kRunning) return {};
  return BeginStop(std::nullopt, reason, StopModeFor(hang));
}

std::vector<AgentAction> AgentStateMachine::OnClosed(
    const absl::Status& status, const std::optional<rendezvous::HangNotice>& hang) {
  const int code = ExitCodeForClose(status);
  const std::string why =
      status.ok() ? "the rendezvous closed the run" : std::string(status.message());
  switch (phase_) {
    case Phase::kRendezvous:
      return Exit(code, why);
    case Phase::kRunning:
      return BeginStop(code, why, StopModeFor(hang));
    case Phase::kStopping:
      if (!pending_exit_is_signal_) {
        pending_exit_ = code;
        pending_reason_ = why;
      }
      return {};
    case Phase::kDone:
      return {};
  }
  return {};
}

std::vector<AgentAction> AgentStateMachine::OnStopSignal(int signal) {
  const int code = kExitSignalBase + signal;
  const std::string why = absl::StrCat("stopped by signal ", signal);
  AgentAction leave{Type::kLeave};
  leave.message = why;
  switch (phase_) {
    case Phase::kRendezvous: {
      std::vector<AgentAction> actions = {leave};
      for (auto& a : Exit(code, why)) actions.push_back(a);
      return actions;
    }
    case Phase::kRunning: {
      std::vector<AgentAction> actions = {leave};
      pending_exit_is_signal_ = true;
      for (auto& a : BeginStop(code, why, StopMode::kGracefully)) actions.push_back(a);
      return actions;
    }
    case Phase::kStopping:
      if (pending_exit_is_signal_) {
        // A second stop signal: the user is impatient; do not wait out the grace period.
        return {AgentAction{Type::kKillWorkers}};
      }
      pending_exit_ = code;
      pending_exit_is_signal_ = true;
      pending_reason_ = why;
      return {leave};
    case Phase::kDone:
      return {};
  }
  return {};
}

std::vector<AgentAction> AgentStateMachine::BeginStop(std::optional<int> exit_code,
                                                      const std::string& why, StopMode how) {
  phase_ = Phase::kStopping;
  stopping_for_hang_ = how == StopMode::kTakeStacksFirst;
  if (exit_code.has_value()) {
    pending_exit_ = exit_code;
    pending_reason_ = why;
  }
  if (live_ == 0) return GroupStopped();
  AgentAction stop{Type::kStopWorkers};
  stop.stop_mode = how;
  stop.message = why;
  return {stop};
}

std::vector<AgentAction> AgentStateMachine::GroupStopped() {
  if (pending_exit_.has_value()) return Exit(*pending_exit_, pending_reason_);
  if (pending_assignment_.has_value()) {
    rendezvous::Assignment next = *pending_assignment_;
    pending_assignment_.reset();
    phase_ = Phase::kRendezvous;
    return OnAssignment(next);
  }
  phase_ = Phase::kRendezvous;
  return {};
}

}  // namespace ddprun::launcher
