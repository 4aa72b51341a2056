#include "launcher/agent/goodput_ledger.h"

#include <algorithm>

namespace ddprun::launcher {
namespace {

int64_t Millis(TimePoint from, TimePoint to) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
}

}  // namespace

void GoodputLedger::OnFailure(TimePoint t, rendezvous::Cause cause, std::optional<Duration> detect,
                              bool spare_used) {
  last_step_.reset();
  if (open_.has_value()) return;
  Open o;
  o.failed_at = t;
  o.record.cause = cause;
  o.record.spare_used = spare_used;
  if (detect.has_value()) {
    o.record.detect_ms = std::chrono::duration_cast<std::chrono::milliseconds>(*detect).count();
  }
  o.completed_before = max_completed_;
  open_ = o;
}

void GoodputLedger::OnStopped(TimePoint t) {
  if (open_ && !open_->record.stop_ms) open_->record.stop_ms = Millis(open_->failed_at, t);
}

void GoodputLedger::OnRoundComplete(TimePoint t, int64_t round) {
  if (!open_) return;
  open_->record.rendezvous_ms = Millis(open_->failed_at, t);
  open_->record.round = round;
}

void GoodputLedger::OnWorkersStarted(TimePoint t, bool in_process) {
  last_step_.reset();
  // Cold: new processes, whose first report is the step they resumed from. In-process the
  // survivors keep reporting; the restored step comes with the ready messages.
  expect_restore_report_ = !in_process;
  if (!open_) return;
  open_->record.start_ms = Millis(open_->failed_at, t);
  open_->record.mode = in_process ? "in-process" : "cold";
}

void GoodputLedger::OnStateRestored(TimePoint t, int64_t step) {
  expect_restore_report_ = false;
  last_step_ = step;
  last_step_at_ = t;
  if (!open_ || open_->restored) return;
  open_->restored = true;
  open_->record.restore_ms = Millis(open_->failed_at, t);
  open_->record.restored_step = step;
  if (open_->completed_before >= 0) {
    open_->record.steps_lost = std::max<int64_t>(0, open_->completed_before - step);
  }
}

std::optional<RecoveryRecord> GoodputLedger::OnStepReport(TimePoint t, int64_t reported) {
  if (expect_restore_report_) {
    OnStateRestored(t, reported);
    return std::nullopt;
  }
  const int64_t completed = reported - 1;
  OnCompleted(t, completed);
  if (!open_ || !open_->restored || !open_->record.restored_step ||
      completed <= *open_->record.restored_step) {
    return std::nullopt;
  }
  RecoveryRecord done = std::move(open_->record);
  done.first_step_ms = Millis(open_->failed_at, t);
  open_.reset();
  return done;
}

void GoodputLedger::OnCompleted(TimePoint t, int64_t step) {
  if (last_step_.has_value() && step == *last_step_ + 1 && step > max_completed_) {
    productive_ += t - last_step_at_;
  }
  if (!last_step_.has_value() || step > *last_step_) {
    last_step_ = step;
    last_step_at_ = t;
  }
  max_completed_ = std::max(max_completed_, step);
}

double GoodputLedger::EffectiveRatio(TimePoint now) const {
  const double wall = std::chrono::duration<double>(now - started_).count();
  if (wall <= 0) return 0;
  return std::min(1.0, std::chrono::duration<double>(productive_).count() / wall);
}

}  // namespace ddprun::launcher
