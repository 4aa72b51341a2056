// The steps of a run as one agent lives them, with millisecond timestamps: rendezvous joined
// and rounds completed, workers started, their first sign of life, failures detected and their
// cause, stops begun and finished, stacks taken, the run closed. Each step is one JSON object
// (LOG_DIR/RUN_ID/events.jsonl); after a restart the cycle reads as one line:
//
//   restart 2: rank 5 on n2 exited 1 -> all stopped +11 ms -> round 3 complete +24 ms ->
//   4 workers running +31 ms
//
// Pure: the agent says what happened and when; nothing here reads a clock or writes a file.
#ifndef DDPRUN_LAUNCHER_AGENT_RUN_TIMELINE_H_
#define DDPRUN_LAUNCHER_AGENT_RUN_TIMELINE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "launcher/agent/goodput_ledger.h"
#include "rendezvous/api/cause.h"
#include "rendezvous/api/preflight.h"

namespace ddprun::launcher {

enum class Step {
  kJoining,          // the agent asked to join the run
  kRoundComplete,    // an assignment: round, world_size, group_rank
  kWorkersStarted,   // workers of the round are running
  kFirstProgress,    // the first sign of life of any worker of the round (output, a step)
  kFailureDetected,  // cause, and where known rank, host, detail
  kStopBegun,
  kStacksTaken,   // the workers' stacks were written before they were stopped
  kStopFinished,  // every worker of the group has exited
  kResumed,       // a restarted rendezvous server took the round back; no worker restarted
  kClosed,        // the run is over for this agent: detail says how
  // In-process recovery (docs/design.md §6b):
  kRoundAborted,   // the surviving workers were told that their round is over
  kStateRestored,  // every local worker of the round is ready: state_step's state, re-formed
  kRecovered,      // the first step after a failure: `recovery` (goodput_ledger.h)
  kPreflight,      // this node's preflight figures were sent (detail says them)
};

// What made a cycle end (kFailureDetected's cause): worker_exit, worker_signal or hang seen by
// this agent, else the cause the rendezvous gave (HeardCause). rendezvous/api/cause.h.

struct StepEvent {
  Step step = Step::kJoining;
  TimePoint when{};     // steady clock: the timeline's durations
  int64_t unix_ms = 0;  // wall clock: the JSON's timestamp
  int64_t round = -1;
  int world_size = -1;
  int group_rank = -1;
  int workers = -1;         // kWorkersStarted: workers started
  int kept = -1;            // kWorkersStarted, in-process recovery: surviving workers kept
  int64_t state_step = -1;  // kStateRestored: the global step whose state the workers hold
  int restart_count = -1;
  std::optional<rendezvous::Cause> cause;  // kFailureDetected, kRecovered; unset: no "cause" field
  int rank = -1;                           // the failed or first-progressing worker's global rank
  std::string host;
  std::string detail;  // "exited 1", "signal SIGKILL (9)", "node n3 was lost: ...", ...
  // kFailureDetected, heard from the rendezvous (RestartFacts): how long the cause took to
  // detect (a lost node's silence), and whether the next round took a spare in its place.
  std::optional<int64_t> detect_ms;
  bool spare_used = false;
  std::optional<RecoveryRecord> recovery;  // kRecovered
  std::optional<double> effective_ratio;   // kRecovered, kClosed: the goodput ledger's
  std::optional<rendezvous::PreflightReport> preflight;  // kPreflight: what this node measured
};

// "recovered (in-process) from worker_signal: stop +0 ms, ..., first step +412 ms; 0 steps
// lost; effective training time 97.1%", for the agent's log.
std::string FormatRecovery(const RecoveryRecord& r, double effective_ratio);

const char* StepName(Step step);  // "failure_detected", ...

// The cause of a restart the rendezvous announced, as this agent's timeline names it: a worker
// failure there is a remote one here; a server that says none (kUnspecified: from before
// Restart.cause) gives hang when it flagged a hang, else other. The reason text is never read.
rendezvous::Cause HeardCause(rendezvous::Cause told, bool hang);

class RunTimeline {
 public:
  // Every line names the run and this agent's host.
  RunTimeline(std::string run_id, std::string node)
      : run_id_(std::move(run_id)), node_(std::move(node)) {}

  // Records `event`; returns its JSON line (without the newline).
  std::string Add(const StepEvent& event);

  // When `event`, just added, is the start of workers that ends a cycle begun by a failure:
  // that cycle as one line, "restart N: <failure> -> all stopped +X ms -> ... running +Z ms".
  std::optional<std::string> CycleLine() const;

  const std::vector<StepEvent>& events() const { return events_; }

 private:
  std::string run_id_;
  std::string node_;
  std::vector<StepEvent> events_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_AGENT_RUN_TIMELINE_H_
