#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/file_text.h"
#include "common/log.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/event_log.h"
#include "launcher/agent/failure_report.h"
#include "launcher/workers/error_file_relay.h"

namespace ddprun::launcher {

void Agent::RecordStep(StepEvent event) {
  if (timeline_ == nullptr) return;
  event.when = std::chrono::steady_clock::now();
  event.unix_ms = UnixMillisNow();
  const std::string line = timeline_->Add(event);
  if (events_fd_ >= 0) WriteAll(events_fd_, absl::StrCat(line, "\n"));
  if (rendezvous_ != nullptr) rendezvous_->ReportStep(line);
  NoteInLedger(event);
  switch (event.step) {
    case Step::kFailureDetected:
      failure_in_cycle_ = true;
      break;
    case Step::kWorkersStarted:
      if (std::optional<std::string> cycle = timeline_->CycleLine()) LogInfo(*cycle);
      failure_in_cycle_ = false;
      awaiting_first_progress_ = true;
      progress_in_attempt_ = false;
      break;
    default:
      break;
  }
}

void Agent::NoteInLedger(const StepEvent& e) {
  if (ledger_ == nullptr) return;
  switch (e.step) {
    case Step::kFailureDetected:
      ledger_->OnFailure(e.when, e.cause.value_or(rendezvous::Cause::kUnspecified),
                         e.detect_ms
                             ? std::optional<Duration>(std::chrono::milliseconds(*e.detect_ms))
                             : std::nullopt,
                         e.spare_used);
      break;
    case Step::kStopFinished:
    case Step::kRoundAborted:
      ledger_->OnStopped(e.when);
      break;
    case Step::kRoundComplete:
      ledger_->OnRoundComplete(e.when, e.round);
      break;
    case Step::kWorkersStarted:
      ledger_->OnWorkersStarted(e.when, e.kept >= 0);
      break;
    case Step::kStateRestored:
      ledger_->OnStateRestored(e.when, e.state_step);
      break;
    default:
      break;
  }
}

// How often the node's figures go to the rendezvous: the slow-node judge names a node after 3
// reports in a row (SlowNodeOptions::windows), so within about 15 s.
constexpr Duration kFiguresReportInterval = std::chrono::seconds(5);

void Agent::ReportFigures() {
  loop_.AddTimerAfter(kFiguresReportInterval, [this] { ReportFigures(); });
  const std::vector<LocalCompute> window = compute_.Take();  // dropped while no group runs
  if (rendezvous_ == nullptr || group_ == nullptr) return;
  rendezvous::NodeFigures figures;
  for (const LocalCompute& c : window) {
    figures.compute.push_back({current_.rank_offset + c.local_rank, c.median_ms, c.steps});
  }
  if (ledger_ != nullptr) {
    checkpoint_.effective_ratio = ledger_->EffectiveRatio(std::chrono::steady_clock::now());
    figures.checkpoint = std::exchange(checkpoint_, {});
  }
  if (!figures.empty()) rendezvous_->ReportFigures(figures);
}

void Agent::OnStepReport(int local_rank, const StepReport& report) {
  progress_in_attempt_ = true;
  if (report.compute_ms.has_value()) compute_.Add(local_rank, *report.compute_ms);
  if (report.checkpoint_ms.has_value()) {
    // The job waits for its slowest saver: the longest save reported since the last report.
    checkpoint_.save_s = std::max(checkpoint_.save_s.value_or(0), *report.checkpoint_ms / 1000);
  }
  if (ledger_ == nullptr) return;
  const TimePoint now = std::chrono::steady_clock::now();
  std::optional<RecoveryRecord> done = ledger_->OnStepReport(now, report.step);
  if (!done.has_value()) return;
  StepEvent recovered{Step::kRecovered};
  recovered.round = done->round;
  recovered.cause = done->cause;
  recovered.recovery = *done;
  recovered.effective_ratio = ledger_->EffectiveRatio(now);
  // Its cost for the checkpoint advice: from the failure's detection (the cause's own detection
  // time included) to the first step after it.
  checkpoint_.recovery_s = (done->first_step_ms + done->detect_ms.value_or(0)) / 1000.0;
  RecordStep(recovered);
  LogInfo(FormatRecovery(*done, *recovered.effective_ratio));
}

void Agent::OnWorkerOutput(int local_rank, WorkerStream stream) {
  hangs_.OnOutput(local_rank);
  if (stream == WorkerStream::kStdout) progress_in_attempt_ = true;
  if (awaiting_first_progress_) {
    awaiting_first_progress_ = false;
    StepEvent first{Step::kFirstProgress};
    first.rank = current_.rank_offset + local_rank;
    first.round = current_.round;
    RecordStep(first);
    if (spares_) spares_->WorkersSettled();
  }
}

void Agent::OnStacksTaken() { RecordStep(StepEvent{Step::kStacksTaken}); }

void Agent::ReportProgress(const std::vector<LocalProgress>& progress, bool urgent) {
  std::vector<rendezvous::RankProgress> out;
  out.reserve(progress.size());
  for (const LocalProgress& p : progress) {
    out.push_back({current_.rank_offset + p.local_rank, p.step, ToMillis(p.idle)});
  }
  rendezvous_->ReportProgress(out, urgent);
}

void Agent::WriteEventLog(int exit_code, const std::string& reason) {
  RunFacts run;
  run.run_id = run_id_;
  run.role = options_.role;
  run.hostname = host_.hostname;
  run.rdzv_backend = std::string(RdzvBackendName(options_.rdzv_backend));
  run.entry_point = std::filesystem::path(options_.entrypoint).filename().string();
  run.group_rank = current_.group_rank;
  run.group_world_size = current_.group_world_size;
  run.world_size = current_.world_size;
  run.agent_restarts = current_.restart_count;
  run.total_run_time =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_)
          .count();
  run.timestamp_ms = UnixMillisNow();
  // As torch: the workers' events only when the agent's run returned (the group succeeded or
  // failed for good); a signal or a rendezvous error ends it with the agent's FAILED alone.
  const bool run_returned =
      exit_code == kExitSuccess || exit_code == kExitWorkersFailed || exit_code == kExitCrashLoop;
  std::string out;
  if (run_returned && group_ != nullptr) {
    // The failure as the state machine classified it (an exit 0 before the start is one).
    auto failure_of = [&](int local_rank) -> const WorkerExit* {
      if (state_.root_cause().has_value() && state_.root_cause()->local_rank == local_rank) {
        return &*state_.root_cause();
      }
      for (const WorkerExit& e : state_.other_failures()) {
        if (e.local_rank == local_rank) return &e;
      }
      return nullptr;
    };
    for (int lr = 0; lr < static_cast<int>(ranks_.size()); ++lr) {
      WorkerEventFacts w;
      w.local_rank = lr;
      w.global_rank = current_.rank_offset + lr;
      w.pid = group_->Pid(lr);
      const std::optional<WorkerExit>& e = ranks_[lr].exit;
      if (e.has_value() && e->signal == 0) w.exit_code = e->exit_code;
      if (exit_code == kExitSuccess) {
        w.state = "SUCCEEDED";
      } else if (const WorkerExit* failure = failure_of(lr)) {
        w.state = "FAILED";
        w.raw_error = ReadBoundedFile(WorkerErrorFile(lr), kMaxErrorFileBytes).value_or("");
        if (w.raw_error.empty()) {
          w.raw_error = nlohmann::json({{"message", DescribeExit(*failure)}}).dump();
        }
      } else {
        w.state = "TERMINATED";
      }
      absl::StrAppend(&out, FormatWorkerEvent(run, w), "\n");
    }
  }
  absl::StrAppend(&out, FormatAgentEvent(run, run_returned, run_returned ? "" : reason), "\n");
  stderr_writer_.Write(std::move(out));
}

}  // namespace ddprun::launcher
