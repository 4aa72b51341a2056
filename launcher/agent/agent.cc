#include "launcher/agent/agent.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/env_variables.h"
#include "common/log.h"
#include "launcher/config/rdzv_conf.h"
#include "launcher/workers/worker_env.h"

namespace ddprun::launcher {
namespace {

// nvidia-smi in the agent's PATH, or "" (no NVIDIA driver tools: no GPU memory to wait for).
std::string FindNvidiaSmi(const Environment& env) {
  absl::StatusOr<std::string> found = FindProgramInEnv("nvidia-smi", env);
  return found.ok() ? *found : "";
}

}  // namespace

Agent::Agent(LaunchOptions options, Environment env, HostInfo host)
    : options_(std::move(options)),
      env_(std::move(env)),
      host_(std::move(host)),
      nvidia_smi_(options_.gpu_release_timeout.count() > 0 ? FindNvidiaSmi(env_) : ""),
      state_(options_.nproc_per_node, options_.restart_mode,
             options_.health_check.empty() && nvidia_smi_.empty() ? HealthGate::kNone
                                                                  : HealthGate::kBeforeEachRound,
             // A failing --health-check keeps this node out for at most join_timeout.
             options_.rdzv.timeouts.join_timeout),
      ranks_(options_.nproc_per_node),
      hangs_(
          &loop_, options_, [this](const HangVerdict& v) { OnHang(v); },
          [this](const std::vector<LocalProgress>& p) { ReportProgress(p, false); },
          [this](int lr, const StepReport& report) { OnStepReport(lr, report); }) {
  SetLogSink(&stderr_writer_);  // our lines stay in order with the workers' stderr
}

Agent::~Agent() {
  group_.reset();
  KillWhatWorkersLeft();
  for (int fd : filtered_fds_) {
    if (fd >= 0) close(fd);
  }
  if (signal_fd_ >= 0) close(signal_fd_);
  if (events_fd_ >= 0) close(events_fd_);
  std::error_code ec;
  hangs_.ClosePipes();  // their folder is not listable: removed by its owner first
  if (!ipc_dir_.empty()) std::filesystem::remove_all(ipc_dir_, ec);
  if (log_root_is_temp_ && !log_root_.empty()) {
    if (stacks_taken_) {
      // Evidence of a hang outlives the job even without --log-dir.
      LogInfo(absl::StrCat("stacks of hung workers kept in ", log_root_));
    } else {
      std::filesystem::remove_all(log_root_, ec);
    }
  }
  // Our last lines behind the workers' output, then straight to stderr again (the writers are
  // members, destroyed after this body, and still flush what they hold).
  stdout_writer_.FlushFor(std::chrono::seconds(2));
  stderr_writer_.FlushFor(std::chrono::seconds(2));
  SetLogSink(nullptr);
}

int Agent::Run() {
  started_ = std::chrono::steady_clock::now();
  ledger_ = std::make_unique<GoodputLedger>(started_);
  if (absl::Status s = Prepare(); !s.ok()) {
    LogError(s.message());
    return s.code() == absl::StatusCode::kInvalidArgument ||
                   s.code() == absl::StatusCode::kUnimplemented
               ? kExitUsage
               : kExitRendezvous;
  }
  {
    explainer_ = std::make_unique<DeathExplainer>(ReadVariable(env_, kKernelLogVariable));
    if (!explainer_->readable() && Verbose()) {
      LogInfo(
          absl::StrCat("a worker killed by a signal will have a cause only from its memory "
                       "cgroup's OOM kill count: ",
                       explainer_->unreadable_because()));
    }
    DrainKernelLog();
  }
  ReportFigures();  // and every kFiguresReportInterval from now on
  if (ShouldDefaultOmpThreads(env_, options_.nproc_per_node)) {
    LogWarning(
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
        "avoid your system being overloaded, please further tune the variable for optimal "
        "performance in your application as needed.");
  }
  if (absl::Status listening = StartProbeListener(); !listening.ok()) {
    // The node is then measured but not probed: its peers' figures still are.
    LogWarning(absl::StrCat("preflight: ", listening.message()));
  }
  node_ = MakeNodeInfo();
  RecordStep(StepEvent{Step::kJoining});
  if (state_.phase() == AgentStateMachine::Phase::kSittingOut) {
    CheckReadiness();  // the join waits for it
  } else {
    joined_ = true;
    rendezvous_->Join(node_, this);
  }
  loop_.Run();
  return exit_code_;
}

void Agent::Finish(int exit_code, const std::string& reason) {
  awaiting_close_ = false;
  exit_code_ = exit_code;
  if (exit_code == kExitWorkersFailed || exit_code == kExitCrashLoop) {
    WriteFailureReport(reason);
  } else if (exit_code == kExitRendezvous) {
    LogError(absl::StrCat("rendezvous failed: ", reason));
  } else if (exit_code == kExitEvicted) {
    LogWarning(absl::StrCat("evicted: ", reason));
  } else if (exit_code >= kExitSignalBase) {
    LogInfo(absl::StrCat("workers stopped; exiting with ", exit_code, " (", reason, ")"));
  }
  spares_.reset();  // no start follows; a node that keeps serving others needs no spares
  StepEvent closed{Step::kClosed};
  closed.detail = absl::StrCat("exit ", exit_code, ": ", reason);
  if (ledger_ != nullptr)
    closed.effective_ratio = ledger_->EffectiveRatio(std::chrono::steady_clock::now());
  RecordStep(closed);
  if (options_.event_log_handler == "console") WriteEventLog(exit_code, reason);
  // A node that hosts the run's server and leaves it well (done, or evicted for a spare: the
  // job goes on without it) serves the others until they are done; gone, it would cost them a
  // failover.
  const bool leaves_a_running_job = exit_code == kExitSuccess || exit_code == kExitEvicted;
  if (setup_.grpc != nullptr && setup_.grpc->hosting() && leaves_a_running_job) {
    StopLoopWhenServerIdle();
  } else {
    loop_.Stop();
  }
}

void Agent::StopLoopWhenServerIdle() {
  const int others = setup_.grpc->OtherAgents(run_id_);
  if (others == 0) {
    loop_.Stop();
    return;
  }
  if (!waiting_for_peers_) {
    waiting_for_peers_ = true;
    LogInfo(exit_code_ == kExitEvicted
                ? "this node is out of the run; serving the rendezvous until the other nodes finish"
                : "this node is done; serving the rendezvous until the other nodes finish");
  }
  // Peers may run for hours after this node: ask a few times a second, not continuously.
  loop_.AddTimerAfter(std::chrono::milliseconds(200), [this] { StopLoopWhenServerIdle(); });
}

void Agent::OnAssignment(const rendezvous::Assignment& assignment) {
  // The probe listener stays open: a node set aside measures again against the run's nodes.
  StepEvent complete{Step::kRoundComplete};
  complete.round = assignment.round;
  complete.world_size = assignment.world_size;
  complete.group_rank = assignment.group_rank;
  complete.restart_count = assignment.restart_count;
  RecordStep(complete);
  Execute(state_.OnAssignment(assignment));
}

void Agent::OnRestart(rendezvous::Cause cause, const std::string& reason,
                      const std::optional<rendezvous::HangNotice>& hang,
                      const rendezvous::RestartFacts& facts) {
  LogInfo(facts.spare_used ? absl::StrCat(reason, "; a spare takes its place") : reason);
  if (!failure_in_cycle_) {  // else the restart is the consequence of this node's own failure
    StepEvent detected{Step::kFailureDetected};
    detected.cause = HeardCause(cause, hang.has_value());
    detected.detail = reason;
    if (facts.lost_silent_s) detected.detect_ms = std::llround(*facts.lost_silent_s * 1000);
    detected.spare_used = facts.spare_used;
    RecordStep(detected);
  }
  NoteHangNotice(hang);
  Execute(state_.OnRestart(reason, hang));
}

void Agent::OnReconnecting(const std::string& why) { LogInfo(why); }

void Agent::OnResumed(int64_t round) {
  StepEvent resumed{Step::kResumed};
  resumed.round = round;
  RecordStep(resumed);
  LogInfo(absl::StrCat("re-registered with the rendezvous: round ", round,
                       " goes on, no worker restarted"));
}

void Agent::OnCheckpointAdvice(double interval_s) {
  checkpoint_advice_s_ = interval_s;
  if (reform_) reform_->Advise(interval_s);  // workers started later find it in their env
  // It moves at every report as the run trains on: logged when it moved by a fifth.
  const double logged = checkpoint_advice_logged_s_;
  if (logged > 0 && interval_s > 0.8 * logged && interval_s < 1.2 * logged) return;
  checkpoint_advice_logged_s_ = interval_s;
  LogInfo(
      absl::StrFormat("checkpoint advice: every %.1f s of training (the run's measured MTBF "
                      "and save time; `ddprun status` shows the figures)",
                      interval_s));
}

void Agent::OnClosed(const absl::Status& status,
                     const std::optional<rendezvous::HangNotice>& hang) {
  if (awaiting_close_) {
    awaiting_close_ = false;
    Finish(kExitSuccess, "all workers exited 0");
    return;
  }
  NoteHangNotice(hang);
  Execute(state_.OnClosed(status, hang));
}

void Agent::NoteHangNotice(const std::optional<rendezvous::HangNotice>& hang) {
  if (!hang.has_value() || hang->straggler.empty()) return;
  straggler_ = hang->straggler;
  LogWarning(absl::StrCat("straggler of the hang (lowest step, then oldest progress, all nodes): ",
                          straggler_));
}

}  // namespace ddprun::launcher
