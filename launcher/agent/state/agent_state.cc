#include "launcher/agent/state/agent_state.h"

#include <csignal>

#include "absl/strings/str_cat.h"
#include "launcher/health/health_verdict.h"  // SecondsText
#include "rendezvous/api/crash_loop.h"
#include "rendezvous/api/eviction.h"

namespace ddprun::launcher {

using Type = AgentAction::Type;

namespace {

// A round that ended in a hang anywhere wants every worker's stacks before the stop.
StopMode StopModeFor(const std::optional<rendezvous::HangNotice>& hang) {
  return hang.has_value() ? StopMode::kTakeStacksFirst : StopMode::kGracefully;
}

}  // namespace

AgentStateMachine::AgentStateMachine(int nproc_per_node, RestartMode mode, HealthGate gate,
                                     Duration health_give_up_after)
    : nproc_(nproc_per_node),
      mode_(mode),
      gate_(gate),
      health_give_up_after_(health_give_up_after),
      ranks_(nproc_per_node),
      phase_(gate == HealthGate::kBeforeEachRound ? Phase::kSittingOut : Phase::kRendezvous) {}

void AgentStateMachine::OnWorkerSpeaks(int local_rank) {
  if (local_rank >= 0 && local_rank < nproc_) ranks_[local_rank].hello = Hello::kSaid;
}

bool AgentStateMachine::Speaks(int local_rank) const {
  return local_rank >= 0 && local_rank < nproc_ && ranks_[local_rank].hello == Hello::kSaid;
}

bool AgentStateMachine::AnyDying() const {
  for (const RankState& rank : ranks_) {
    if (rank.dying) return true;
  }
  return false;
}

bool AgentStateMachine::CanRecoverInProcess() const {
  if (mode_ != RestartMode::kInProcess) return false;
  // Every worker of the round, live or not: a dead one that never spoke is a script that does
  // not speak the protocol, and its replacement would not either.
  for (int lr = 0; lr < nproc_; ++lr) {
    if (ranks_[lr].hello != Hello::kSaid) return false;
  }
  return true;
}

void AgentStateMachine::BeginRound(const rendezvous::Assignment& a) {
  phase_ = Phase::kRunning;
  health_passed_ = false;  // the next cold start wants a check of its own
  round_ = a.round;
  live_ = nproc_;
  succeeded_ = 0;
  // The summary describes the attempt that ends the job: a failure here in an earlier round
  // is not the cause when the budget is spent by another node's failure in this one.
  previous_root_cause_ = std::move(root_cause_);
  root_cause_.reset();
  other_failures_.clear();
}

std::vector<AgentAction> AgentStateMachine::AwaitRound(const std::string& why) {
  phase_ = Phase::kAwaitingRound;
  AgentAction abort{Type::kAbortRound};
  abort.round = round_;
  abort.message = why;
  return {abort};
}

std::vector<AgentAction> AgentStateMachine::Reform(const rendezvous::Assignment& a) {
  AgentAction reform{Type::kReformWorkers};
  reform.assignment = a;
  for (int lr = 0; lr < nproc_; ++lr) {
    if (!ranks_[lr].alive) {
      reform.local_ranks.push_back(lr);
      // A new process: it has to say hello itself, as its predecessor did (every worker had:
      // CanRecoverInProcess).
      ranks_[lr].hello = Hello::kExpected;
    }
    ranks_[lr].alive = true;
  }
  BeginRound(a);
  return {reform};
}

int AgentStateMachine::ExitCodeForClose(const absl::Status& status) {
  if (status.ok()) return kExitSuccess;
  if (status.code() == absl::StatusCode::kResourceExhausted) return kExitWorkersFailed;
  // The crash loop by its mark, not by kAborted alone (which also means a stale round).
  if (rendezvous::IsCrashLoopStop(status)) return kExitCrashLoop;
  if (rendezvous::IsEvictedStop(status)) return kExitEvicted;
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

std::vector<AgentAction> AgentStateMachine::OnStandby() {
  set_aside_.reset();  // requalified
  if (phase_ == Phase::kRendezvous) standby_ = true;
  return {};
}

std::vector<AgentAction> AgentStateMachine::OnSetAside(const std::string& why) {
  set_aside_ = why;
  standby_ = false;
  switch (phase_) {
    case Phase::kCheckingHealth:  // the assignment it checked for went to another node
      pending_assignment_.reset();
      phase_ = Phase::kRendezvous;
      return {};
    case Phase::kRunning:
    case Phase::kAwaitingRound:
      return BeginStop(std::nullopt, why, StopMode::kGracefully);
    default:
      return {};
  }
}

std::vector<AgentAction> AgentStateMachine::OnStandbyCheckDue() {
  if (!standby() || gate_ != HealthGate::kBeforeEachRound) return {};
  return {AgentAction{Type::kCheckHealth}};
}

std::vector<AgentAction> AgentStateMachine::OnAssignment(const rendezvous::Assignment& a) {
  standby_ = false;
  set_aside_.reset();
  switch (phase_) {
    case Phase::kRendezvous: {
      if (gate_ == HealthGate::kBeforeEachRound && !health_passed_) {
        pending_assignment_ = a;
        phase_ = Phase::kCheckingHealth;
        return {AgentAction{Type::kCheckHealth}};
      }
      BeginRound(a);
      ranks_.assign(nproc_, RankState{/*alive=*/true, Hello::kNotExpected, /*dying=*/false});
      AgentAction start{Type::kStartWorkers};
      start.assignment = a;
      return {start};
    }
    case Phase::kAwaitingRound:
      if (AnyDying()) {
        pending_assignment_ = a;
        return {};
      }
      return Reform(a);
    case Phase::kRunning: {
      if (CanRecoverInProcess()) {
        std::vector<AgentAction> actions = AwaitRound("a new rendezvous round formed");
        for (auto& r : Reform(a)) actions.push_back(r);
        return actions;
      }
      // A new round while ours still runs: the server restarted us without a separate restart
      // message. Stop, then start with it.
      pending_assignment_ = a;
      return BeginStop(std::nullopt, "a new rendezvous round formed", StopMode::kGracefully);
    }
    case Phase::kStopping:
    case Phase::kCheckingHealth:  // the newest round is the one to start once the check passes
      pending_assignment_ = a;
      return {};
    case Phase::kSittingOut:  // sent before the step-out: the run goes on without this node
    case Phase::kDone:
      return {};
  }
  return {};
}

std::vector<AgentAction> AgentStateMachine::OnHealthChecked(bool passed, const std::string& why) {
  switch (phase_) {
    case Phase::kCheckingHealth:
      if (passed) {
        health_passed_ = true;
        phase_ = Phase::kRendezvous;
        rendezvous::Assignment next = *pending_assignment_;
        pending_assignment_.reset();
        return OnAssignment(next);
      }
      break;
    case Phase::kRendezvous:  // the round it was for ended during the check
      if (passed) {
        health_passed_ = true;
        return {};
      }
      break;
    case Phase::kSittingOut:
      if (passed) {
        health_passed_ = true;
        phase_ = Phase::kRendezvous;
        return {AgentAction{Type::kStepIn}};
      }
      return {};  // still out; the agent tries again later
    default:
      return {};  // workers run (or the agent is done): a late verdict changes nothing
  }
  pending_assignment_.reset();
  phase_ = Phase::kSittingOut;
  standby_ = false;  // back in, it joins as a new node: a spare again only when told
  AgentAction out{Type::kStepOut};
  out.message = why;
  return {out};
}

std::vector<AgentAction> AgentStateMachine::OnHealthVerdict(const HealthCheckResult& result) {
  if (result.passed) {
    health_failures_ = 0;
    health_failing_since_.reset();
    return OnHealthChecked(true, result.described);
  }
  ++health_failures_;
  if (!health_failing_since_.has_value()) health_failing_since_ = result.at;
  const Duration failing = result.at - *health_failing_since_;
  if (failing >= health_give_up_after_) {
    return OnHealthAbandoned(
        kExitRendezvous,
        absl::StrCat("the health check has failed for ", health_failures_, " tries in a row over ",
                     SecondsText(failing), " (join_timeout ", SecondsText(health_give_up_after_),
                     "); last: ", result.described));
  }
  return OnHealthChecked(false, absl::StrCat("health check failed: ", result.described));
}

std::vector<AgentAction> AgentStateMachine::OnHealthAbandoned(int exit_code,
                                                              const std::string& why) {
  if (!WithoutWorkers()) return {};
  AgentAction leave{Type::kLeave};
  leave.message = why;
  std::vector<AgentAction> actions = {leave};
  for (auto& a : Exit(exit_code, why)) actions.push_back(a);
  return actions;
}

std::vector<AgentAction> AgentStateMachine::OnWorkerExited(const WorkerExit& reported) {
  if (phase_ != Phase::kRunning && phase_ != Phase::kStopping && phase_ != Phase::kAwaitingRound) {
    return {};
  }
  WorkerExit exit = reported;
  if (exit.local_rank >= 0 && exit.local_rank < nproc_) {
    RankState& rank = ranks_[exit.local_rank];
    if (!rank.alive) return {};  // already counted
    rank.alive = false;
    // The round was re-formed for it, and waits for it: leaving before the hello is no success.
    if (rank.hello == Hello::kExpected && exit.never_started == NeverStarted::kNone) {
      exit.never_started = NeverStarted::kNoHello;
    }
  }
  if (live_ > 0) --live_;
  if (phase_ == Phase::kAwaitingRound) {
    // A survivor died between rounds, or the hung worker is gone: the next round replaces it.
    // The round it belonged to is already over, so there is nothing to report.
    const bool was_dying =
        exit.local_rank >= 0 && exit.local_rank < nproc_ && ranks_[exit.local_rank].dying;
    if (was_dying) ranks_[exit.local_rank].dying = false;
    if (!was_dying && !exit.ok() && root_cause_ && other_failures_.size() < 64) {
      other_failures_.push_back(exit);
    }
    if (AnyDying()) return {};
    if (pending_assignment_.has_value()) {
      rendezvous::Assignment next = *pending_assignment_;
      pending_assignment_.reset();
      return Reform(next);
    }
    return {};
  }
  if (phase_ == Phase::kStopping) {
    // Failures other than ddprun's own SIGTERM/SIGKILL, for the summary's "other failures". A
    // hung worker that in-process mode was stopping alone (stacks first) ends by our hand too,
    // even when a close or a signal turned that into a graceful stop of the group.
    const bool was_dying =
        exit.local_rank >= 0 && exit.local_rank < nproc_ && ranks_[exit.local_rank].dying;
    if (was_dying) ranks_[exit.local_rank].dying = false;
    const bool ours = exit.signal == SIGTERM || exit.signal == SIGKILL ||
                      (stopping_for_hang_ && exit.signal == SIGABRT) || was_dying;
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
  // kAwaitingRound: survivors wait for the next round, which is no sign of life; not a hang.
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
  if (CanRecoverInProcess()) {
    if (hung) {
      // Only the hung worker goes (stacks first); the others re-form without it.
      ranks_[cause.local_rank].dying = true;
      AgentAction stop{Type::kStopWorkers};
      stop.stop_mode = StopMode::kTakeStacksFirst;
      stop.local_rank = cause.local_rank;
      stop.failure = cause;
      stop.hang_signal = hang_signal;
      stop.message = "a worker hung";
      actions.push_back(stop);
    }
    for (auto& a : AwaitRound(hung ? "a worker hung" : "a worker failed")) actions.push_back(a);
    return actions;
  }
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
  if (phase_ == Phase::kCheckingHealth) {  // that round is over before it started here
    pending_assignment_.reset();
    phase_ = Phase::kRendezvous;
    return {};
  }
  if (phase_ != Phase::kRunning) return {};
  if (CanRecoverInProcess()) return AwaitRound(reason);
  return BeginStop(std::nullopt, reason, StopModeFor(hang));
}

std::vector<AgentAction> AgentStateMachine::OnClosed(
    const absl::Status& status, const std::optional<rendezvous::HangNotice>& hang) {
  int code = ExitCodeForClose(status);
  std::string why = status.ok() ? "the rendezvous closed the run" : std::string(status.message());
  if (status.ok() && set_aside_.has_value()) {
    // The job went on without this node to its end: what set it aside is its outcome.
    code = kExitEvicted;
    why = absl::StrCat("the run ended with this node set aside: ", *set_aside_);
  }
  switch (phase_) {
    case Phase::kRendezvous:
    case Phase::kCheckingHealth:
    case Phase::kSittingOut:
      return Exit(code, why);
    case Phase::kRunning:
    case Phase::kAwaitingRound:
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
    case Phase::kRendezvous:
    case Phase::kCheckingHealth:
    case Phase::kSittingOut: {
      std::vector<AgentAction> actions = {leave};
      for (auto& a : Exit(code, why)) actions.push_back(a);
      return actions;
    }
    case Phase::kRunning:
    case Phase::kAwaitingRound: {
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
