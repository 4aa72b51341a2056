#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/strings.h"
#include "launcher/agent/agent.h"

namespace ddprun::launcher {

void Agent::CheckReadiness() {
  if (gpu_release_ != nullptr && gpu_release_->waiting()) return;
  if (gpu_release_ != nullptr && !started_worker_pids_.empty()) {
    if (group_) KillWhatWorkersLeft();  // a detached process may hold GPU memory too
    gpu_release_->Wait(std::exchange(started_worker_pids_, {}), [this](const GpuReleaseResult& r) {
      NoteGpuRelease(r);
      RunHealthCheck();
    });
    return;
  }
  RunHealthCheck();
}

void Agent::NoteGpuRelease(const GpuReleaseResult& r) {
  if (!r.query_failed.empty()) {
    LogWarning(absl::StrCat("nvidia-smi could not list the GPU processes (", r.query_failed,
                            "): not waiting for the previous workers' GPU memory"));
  } else if (!r.released) {
    LogWarning(absl::StrCat(
        "the previous workers' GPU memory is still held after ", SecondsText(r.waited),
        " (--gpu-release-timeout): ", DescribeHeld(r.held), "; starting the new workers anyway"));
  } else if (r.waited >= GpuReleaseWait::kPoll) {
    LogInfo(absl::StrCat("waited ", SecondsText(r.waited),
                         " until the previous workers' GPU memory was released"));
  }
}

void Agent::RunHealthCheck() {
  if (health_ == nullptr) {  // the GPU memory was all there was to wait for
    loop_.Post([this] { Execute(state_.OnHealthChecked(true, "")); });
    return;
  }
  if (health_->running()) return;
  health_->Run([this](const HealthVerdict& v) { OnHealthVerdict(v); });
}

void Agent::OnStandby(const rendezvous::StandbyNotice& standby) {
  // The probe listener stays: a node set aside measures again against it.
  if (!standby.set_aside.empty()) {
    LogWarning(absl::StrCat("set aside: ", standby.set_aside));
    Execute(state_.OnSetAside(standby.set_aside));
    return;
  }
  const bool already = state_.standby();
  Execute(state_.OnStandby());
  if (already || !state_.standby()) return;  // logged once per spell as a spare
  LogInfo(absl::StrCat(
      "waiting as a spare for run ", run_id_, ": ", standby.members, " members running (round ",
      standby.round, "), spare ", standby.position + 1, " in line",
      health_ != nullptr
          ? absl::StrCat("; --health-check re-run every ", SecondsText(kStandbyCheckInterval))
          : ""));
  if (health_ != nullptr) ScheduleStandbyCheck(++standby_generation_);
}

void Agent::ScheduleStandbyCheck(uint64_t generation) {
  loop_.AddTimerAfter(kStandbyCheckInterval, [this, generation] {
    if (generation != standby_generation_ || !state_.standby()) return;
    Execute(state_.OnStandbyCheckDue());
    ScheduleStandbyCheck(generation);
  });
}

void Agent::OnHealthVerdict(const HealthVerdict& v) {
  const std::string described =
      absl::StrCat("--health-check '", health_->command(), "' ", v.Describe());
  if (v.outcome == HealthVerdict::Outcome::kCannotRun) {
    LogError(described);
    Execute(state_.OnHealthAbandoned(kExitUsage, described));
    return;
  }
  if (v.passed()) health_check_s_ = std::chrono::duration<double>(v.took).count();
  if (v.passed() && state_.health_failures_in_row() > 0 && Verbose()) LogInfo(described);
  // The state machine keeps the streak of failures and gives up after join_timeout (Finish
  // logs why, once).
  Execute(state_.OnHealthVerdict({v.passed(), described, std::chrono::steady_clock::now()}));
  if (v.passed() || state_.phase() != AgentStateMachine::Phase::kSittingOut) return;
  const Duration delay = HealthRetryDelay(state_.health_failures_in_row());
  LogWarning(absl::StrCat(described, "; this node stays out of the run (",
                          joined_ ? "the others go on without it" : "not joined yet",
                          "), next try in ", SecondsText(delay)));
  loop_.AddTimerAfter(delay, [this] {
    if (state_.phase() == AgentStateMachine::Phase::kSittingOut) RunHealthCheck();
  });
}

}  // namespace ddprun::launcher
