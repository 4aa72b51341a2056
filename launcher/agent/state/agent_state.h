// The agent's decisions as a pure state machine: events in (assignment, worker exit, restart,
// close, signal), actions out (start/stop/kill workers, report to the rendezvous, exit). No
// processes, no sockets, no clock reads: the Agent (agent.h) performs the actions, and tests
// drive this class directly.
//
//   kRendezvous --assignment--> kRunning --all exit 0--> kDone(0)
//        ^                        |  worker fails / restart / close / signal
//        |                        v
//        +---(no exit pending)-- kStopping --(exit pending)--> kDone(code)
//                                  |  pending assignment
//                                  +--> kRunning
//
// --restart-mode=in-process (docs/design.md §6b): when every live worker speaks the control
// protocol, a failure or a restart does not stop them:
//
//   kRunning --worker fails / restart--> kAwaitingRound --assignment--> kRunning
//            (abort to the survivors)                    (round to the survivors, the
//                                                         missing local ranks started)
//
// Anything else (a live worker that does not speak it, a close, a stop signal) stops the group
// as in cold mode.
//
// HealthGate::kBeforeEachRound (--health-check, or nvidia-smi with --gpu-release-timeout): the
// node starts out of the run and joins once a check passes; a cold start of workers waits for
// a check since the last start (the agent's check: the previous workers' GPU memory released,
// bounded, then the --health-check command):
//
//   kSittingOut --passed: step in (join)--> kRendezvous --assignment--> kCheckingHealth
//       ^   | failed: retry later                                          |  passed: start
//       |                                                                   v
//       +------------------- failed: step out ------------------------- kRunning
//
// In-process recovery's survivors keep running: a re-formed round is not gated.
//
// Spares (issue 40): the rendezvous tells a node that waits beyond the running round that it is
// a spare (OnStandby). With the health gate, a spare's check is re-run every
// kStandbyCheckInterval (OnStandbyCheckDue): a failure steps it out (the run will not pick a
// node that is not ready), and the sitting-out retries step it back in once a check passes (a
// spare again). The check before a cold start stays the backstop.
#ifndef DDPRUN_LAUNCHER_AGENT_STATE_AGENT_STATE_H_
#define DDPRUN_LAUNCHER_AGENT_STATE_AGENT_STATE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "launcher/config/options.h"
#include "launcher/workers/worker_exit.h"
#include "rendezvous/api/rendezvous.h"

namespace ddprun::launcher {

// Exit codes (docs/design.md, "Failure reporting and exit codes").
inline constexpr int kExitSuccess = 0;
inline constexpr int kExitWorkersFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitRendezvous = 3;
// The same failure twice before any progress (--crash-loop=stop): a retry cannot succeed, so a
// batch script should not requeue the job.
inline constexpr int kExitCrashLoop = 4;
// This node was evicted from the run as slow (--evict-slow): the job goes on without it.
inline constexpr int kExitEvicted = 5;
inline constexpr int kExitSignalBase = 128;

// Whether a cold start of workers waits for the node's readiness check to pass.
enum class HealthGate { kNone, kBeforeEachRound };

// How often a spare re-runs its --health-check. The default keep-alive interval (5 s): a spare's
// readiness is proved as often as its liveness, so a GPU that went bad while the node waited is
// found before the next lease could lose a member; a check costing a fraction of a second is a
// few percent of one core, on a node that runs nothing else.
inline constexpr Duration kStandbyCheckInterval = std::chrono::seconds(5);

// How kStopWorkers stops the group.
enum class StopMode {
  kGracefully,       // SIGTERM every worker's process group, SIGKILL after the grace period
  kTakeStacksFirst,  // a worker hung here or on another node: every worker's stacks first
};

// One run of the node's readiness check (--health-check), as the agent saw it.
struct HealthCheckResult {
  bool passed = false;
  std::string described;  // "--health-check 'cmd' exited 1 after 0.2 s: ..."
  TimePoint at{};         // when the verdict came (steady clock)
};

struct AgentAction {
  enum class Type {
    kStartWorkers,     // `assignment`
    kStopWorkers,      // as `stop_mode` says; only `local_rank`'s worker when >= 0
    kAbortRound,       // in-process: tell every speaking worker that `round` is over (`message`)
    kReformWorkers,    // in-process: `assignment` to the survivors; start `local_ranks`' workers
    kKillWorkers,      // SIGKILL now (a second stop signal)
    kReportFailed,     // tell the rendezvous: `round` failed, root cause `failure`
    kReportSucceeded,  // tell the rendezvous: `round` succeeded on this node
    kLeave,            // leave the rendezvous, `message` says why
    kCheckHealth,      // run the --health-check; its verdict comes back as OnHealthChecked
    kStepOut,          // sit the coming rounds out (Rendezvous::StepOut), `message` says why
    kStepIn,           // join the run (again: Rendezvous::StepIn) after a check that passed
    kExit,             // exit the agent with `exit_code`; `message` says why
  };
  explicit AgentAction(Type t) : type(t) {}
  Type type;
  rendezvous::Assignment assignment;
  WorkerExit failure;
  int64_t round = 0;
  int exit_code = 0;
  std::string message;
  StopMode stop_mode = StopMode::kGracefully;  // kStopWorkers
  int hang_signal = 0;           // kStopWorkers: for `failure.local_rank` after its stacks
  int local_rank = -1;           // kStopWorkers: just this worker (-1: all)
  std::vector<int> local_ranks;  // kReformWorkers: the local ranks that need a new worker
};

class AgentStateMachine {
 public:
  // kCheckingHealth: an assignment waits for the check; kSittingOut: out of the run until a
  // check passes (the agent retries it). Neither has workers.
  enum class Phase {
    kRendezvous,
    kCheckingHealth,
    kRunning,
    kAwaitingRound,
    kStopping,
    kSittingOut,
    kDone
  };

  // `health_give_up_after`: how long the readiness check may keep failing in a row before the
  // agent gives up (OnHealthVerdict); the rendezvous' join_timeout.
  explicit AgentStateMachine(int nproc_per_node, RestartMode mode = RestartMode::kCold,
                             HealthGate gate = HealthGate::kNone,
                             Duration health_give_up_after = Duration::max());

  std::vector<AgentAction> OnAssignment(const rendezvous::Assignment& assignment);
  // An exit 0 of a worker that never said its expected hello (a replacement in a re-formed
  // round) is a failure: NeverStarted::kNoHello.
  std::vector<AgentAction> OnWorkerExited(const WorkerExit& exit);
  // A local worker is hung (`hung.hang` says how); `signal` is what its FileTimer client asked
  // to be sent after the stacks (0: none). Like a failure, plus stacks before the stop.
  std::vector<AgentAction> OnHang(const WorkerExit& hung, int signal);
  // With `hang`, the round ended because a worker hung somewhere: stacks before the stop.
  std::vector<AgentAction> OnRestart(const std::string& reason,
                                     const std::optional<rendezvous::HangNotice>& hang);
  std::vector<AgentAction> OnClosed(const absl::Status& status,
                                    const std::optional<rendezvous::HangNotice>& hang);
  // A stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT).
  std::vector<AgentAction> OnStopSignal(int signal);
  // The --health-check's verdict (`why`: its description, for the step-out's reason).
  std::vector<AgentAction> OnHealthChecked(bool passed, const std::string& why);
  // A --health-check run's verdict, with the give-up decision: the failures in a row are
  // counted, and once they have lasted `health_give_up_after` the agent leaves and ends with
  // kExitRendezvous (OnHealthAbandoned); else as OnHealthChecked ("health check failed: ...").
  std::vector<AgentAction> OnHealthVerdict(const HealthCheckResult& result);
  // Failed checks since the last one that passed (the agent's retry back-off).
  int health_failures_in_row() const { return health_failures_; }
  // The check kept failing for too long (`why` says so): the agent ends with `exit_code`.
  std::vector<AgentAction> OnHealthAbandoned(int exit_code, const std::string& why);
  // The rendezvous says this node waits as a spare (it has no workers; an assignment ends it).
  std::vector<AgentAction> OnStandby();
  // The rendezvous set this node aside (issue 41: the preflight kept it out, or --evict-slow
  // evicted it; `why`): its workers stop, in-process or not (the others went on without them),
  // and it waits without a place until it passes the preflight again, when a plain OnStandby or
  // an assignment comes. A close that finds it still set aside ends it with kExitEvicted.
  std::vector<AgentAction> OnSetAside(const std::string& why);
  bool set_aside() const { return set_aside_.has_value(); }
  // A spare's periodic check is due: kCheckHealth with the health gate, while still a spare.
  std::vector<AgentAction> OnStandbyCheckDue();
  // Waiting as a spare (told so, not assigned, not stepped out since).
  bool standby() const { return standby_ && phase_ == Phase::kRendezvous; }
  // In-process mode: local rank `local_rank`'s current worker said hello on the control
  // channel. No actions.
  void OnWorkerSpeaks(int local_rank);
  // Whether local rank `local_rank`'s current worker speaks the control protocol.
  bool Speaks(int local_rank) const;

  Phase phase() const { return phase_; }
  int64_t round() const { return round_; }
  int live_workers() const { return live_; }
  // The first failure of the most recent failed attempt, and the other workers of that attempt
  // that failed before ddprun began stopping the group.
  const std::optional<WorkerExit>& root_cause() const { return root_cause_; }
  // The root cause of the attempt before the current one (where a hung rank was, said when the
  // next attempt starts).
  const std::optional<WorkerExit>& previous_root_cause() const { return previous_root_cause_; }
  const std::vector<WorkerExit>& other_failures() const { return other_failures_; }
  // Why the agent exits (set with the kExit action).
  const std::string& exit_reason() const { return exit_reason_; }

  // Maps a rendezvous close status to an exit code: OK 0, kResourceExhausted (restart budget
  // spent) 1, anything else 3.
  static int ExitCodeForClose(const absl::Status& status);

 private:
  std::vector<AgentAction> BeginStop(std::optional<int> exit_code, const std::string& why,
                                     StopMode how);
  std::vector<AgentAction> GroupStopped();
  // A local worker failed or hung (`cause.hang`): report it, stop the group (stacks first when
  // hung; then `hang_signal` to it).
  std::vector<AgentAction> Fail(const WorkerExit& cause, int hang_signal);
  std::vector<AgentAction> Exit(int code, const std::string& why);
  // In-process mode, and every live worker speaks the protocol.
  bool CanRecoverInProcess() const;
  // Ends the round for the survivors (abort) and waits for the next assignment.
  std::vector<AgentAction> AwaitRound(const std::string& why);
  // The next round with the survivors; the missing local ranks get new workers.
  std::vector<AgentAction> Reform(const rendezvous::Assignment& a);
  // The bookkeeping of a new round (both kinds of start).
  void BeginRound(const rendezvous::Assignment& a);

  // No worker of this node runs: the rendezvous phases and those of the health gate.
  bool WithoutWorkers() const {
    return phase_ == Phase::kRendezvous || phase_ == Phase::kCheckingHealth ||
           phase_ == Phase::kSittingOut;
  }

  const int nproc_;
  const RestartMode mode_;
  const HealthGate gate_;
  const Duration health_give_up_after_;
  bool health_passed_ = false;                     // a check passed since the last cold start
  bool standby_ = false;                           // told it is a spare; see standby()
  std::optional<std::string> set_aside_;           // why, while set aside (OnSetAside)
  int health_failures_ = 0;                        // in a row
  std::optional<TimePoint> health_failing_since_;  // the first failure of that streak
  // Where a local rank's current worker stands with the control channel (in-process mode).
  enum class Hello {
    kNotExpected,  // a cold start: the script may not speak the protocol at all
    kExpected,     // a replacement in a re-formed round: its predecessor spoke, so must it
    kSaid,
  };
  // What the decisions keep about each local rank's worker, in one table.
  struct RankState {
    bool alive = false;                 // its worker of this round runs
    Hello hello = Hello::kNotExpected;  // its current worker's hello
    // A hung worker being stopped (stacks first); the next round waits for its exit, so that
    // its replacement never runs beside it.
    bool dying = false;
  };
  std::vector<RankState> ranks_;  // by local rank
  // Whether some local rank's hung worker is still being stopped.
  bool AnyDying() const;
  Phase phase_;  // kSittingOut with a health gate (not joined yet), else kRendezvous
  int64_t round_ = -1;
  int live_ = 0;
  int succeeded_ = 0;
  std::optional<rendezvous::Assignment> pending_assignment_;
  std::optional<int> pending_exit_;
  bool pending_exit_is_signal_ = false;
  std::string pending_reason_;
  std::optional<WorkerExit> root_cause_;
  std::optional<WorkerExit> previous_root_cause_;
  std::vector<WorkerExit> other_failures_;
  std::string exit_reason_;
  bool stopping_for_hang_ = false;  // our SIGABRTs are not failures
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_AGENT_STATE_AGENT_STATE_H_
