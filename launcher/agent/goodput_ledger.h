// The goodput ledger: what every failure cost this node, and how much of the run's wall time
// went into steps that count. Pure: fed with the run timeline's steps (run_timeline.h) and the
// workers' step reports (DDPRUN_PROGRESS_FILE), with their times; no clock of its own.
//
// A recovery is measured from the failure's detection on this node (its kFailureDetected) to
// the first optimizer step completed after it:
//   stop        the failed group stopped (cold) / the survivors were told (in-process)
//   rendezvous  the next round formed
//   start       its workers were started (cold: all; in-process: the replacements)
//   restore     the workers hold their state: in-process, every local worker's ready; cold,
//               the workers' first step report (ddp-train reports the step it resumed from)
//   first_step  the first step completed after the restored one: the recovery's total
// `steps_lost`: steps completed before the failure minus the step restored (work done again).
//
// Step reports: a worker writes the step it starts (completed + 1) before each step, and the
// completed step once at start-up; the first report after a (re)start is therefore read as the
// restored step, every later one r as r - 1 steps completed.
//
// Effective training time: the time between consecutive completed steps, counted only for steps
// beyond the highest completed before (a step done again after a failure does not count), over
// the wall time since the agent started.
#ifndef DDPRUN_LAUNCHER_AGENT_GOODPUT_LEDGER_H_
#define DDPRUN_LAUNCHER_AGENT_GOODPUT_LEDGER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "common/clock.h"
#include "rendezvous/api/cause.h"

namespace ddprun::launcher {

struct RecoveryRecord {
  int64_t round = -1;  // the round the recovery ran into
  std::string mode;    // "cold" or "in-process": how this node recovered
  rendezvous::Cause cause = rendezvous::Cause::kUnspecified;  // the failure's (run_timeline.h)
  // The cause's own detection time, where known: for a lost node, how long the rendezvous took
  // to declare it lost (RestartFacts::lost_silent_s).
  std::optional<int64_t> detect_ms;
  std::optional<int64_t> stop_ms, rendezvous_ms, start_ms, restore_ms;
  int64_t first_step_ms = 0;
  std::optional<int64_t> restored_step;
  std::optional<int64_t> steps_lost;
  bool spare_used = false;  // the round it ran into took a spare in the lost node's place
};

class GoodputLedger {
 public:
  explicit GoodputLedger(TimePoint started) : started_(started) {}

  // The first failure of a cycle opens a recovery; later ones before it closes are its
  // consequences. `detect` is how long the cause took to be noticed, where known; `spare_used`:
  // the next round took a spare (RestartFacts).
  void OnFailure(TimePoint t, rendezvous::Cause cause, std::optional<Duration> detect,
                 bool spare_used = false);
  void OnStopped(TimePoint t);
  void OnRoundComplete(TimePoint t, int64_t round);
  void OnWorkersStarted(TimePoint t, bool in_process);
  // In-process: every local worker is ready with the state of completed step `step`.
  void OnStateRestored(TimePoint t, int64_t step);
  // A worker's step report (the value it wrote). Returns the recovery it completes, if any.
  std::optional<RecoveryRecord> OnStepReport(TimePoint t, int64_t reported);

  // Time on steps that count over the wall time since the start, in [0, 1].
  double EffectiveRatio(TimePoint now) const;
  Duration productive() const { return productive_; }

 private:
  // A completed step `step` seen at `t`, counted when it is the next new one.
  void OnCompleted(TimePoint t, int64_t step);

  const TimePoint started_;
  Duration productive_{0};
  int64_t max_completed_ = -1;  // the highest step completed in the run, before any failure
  // The latest completed step of the current cycle and when it was first seen; nullopt right
  // after a failure (the interval across it is no step's).
  std::optional<int64_t> last_step_;
  TimePoint last_step_at_{};
  bool expect_restore_report_ = false;  // the next report is the restored step (cold start)

  struct Open {
    TimePoint failed_at{};
    RecoveryRecord record;
    int64_t completed_before = -1;
    bool restored = false;
  };
  std::optional<Open> open_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_AGENT_GOODPUT_LEDGER_H_
