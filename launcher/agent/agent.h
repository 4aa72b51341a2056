// The per-node agent: joins the rendezvous, starts one worker per local rank with the torchrun
// environment, watches them, and carries out AgentStateMachine's decisions. Its definition is
// split by concept: agent.cc (the run and the rendezvous' events), agent_setup.cc,
// agent_actions.cc (the action executor), agent_failure.cc (a worker's exit into a failure
// report), agent_readiness.cc (GPU memory release, health checks), agent_record.cc (timeline,
// ledger, events), agent_preflight.cc (the preflight's probes) and agent_signals.cc (reaping and
// signals). Owns one EventLoop;
// signals (signalfd), child exits (SIGCHLD through the same signalfd), worker output (pipes) and
// rendezvous events (posted) all arrive on it, so no state is shared between threads.
#ifndef DDPRUN_LAUNCHER_AGENT_AGENT_H_
#define DDPRUN_LAUNCHER_AGENT_AGENT_H_

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/event_loop.h"
#include "launcher/agent/goodput_ledger.h"
#include "launcher/agent/in_process_rounds.h"
#include "launcher/agent/run_timeline.h"
#include "launcher/agent/state/agent_state.h"
#include "launcher/causes/death_explainer.h"
#include "launcher/config/host_info.h"
#include "launcher/config/options.h"
#include "launcher/hangs/hang_monitor.h"
#include "launcher/health/gpu_release.h"
#include "launcher/health/health_check.h"
#include "launcher/preflight/preflight_runner.h"
#include "launcher/preflight/probe_listener.h"
#include "launcher/preload/spare_pool.h"
#include "launcher/process/orphan_guard.h"
#include "launcher/rdzv/rendezvous_setup.h"
#include "launcher/stragglers/compute_times.h"
#include "launcher/workers/console_writer.h"
#include "launcher/workers/worker_env.h"
#include "launcher/workers/worker_group.h"
#include "rendezvous/api/rendezvous.h"
#include "rendezvous/api/run_status.h"

namespace ddprun::launcher {

class Agent final : public rendezvous::RendezvousEvents, public WorkerGroup::Listener {
 public:
  Agent(LaunchOptions options, Environment env, HostInfo host);
  ~Agent() override;

  // Runs the job to its end; returns the process exit code. Call once, from the main thread,
  // after BlockAgentSignals().
  int Run();

  // Blocks the signals the agent takes through its signalfd. Call in main before any thread
  // starts, so that every thread inherits the mask.
  static void BlockAgentSignals(const LaunchOptions& options);

  // RendezvousEvents
  void OnAssignment(const rendezvous::Assignment& assignment) override;
  void OnRestart(rendezvous::Cause cause, const std::string& reason,
                 const std::optional<rendezvous::HangNotice>& hang,
                 const rendezvous::RestartFacts& facts) override;
  void OnStandby(const rendezvous::StandbyNotice& standby) override;
  void OnClosed(const absl::Status& status,
                const std::optional<rendezvous::HangNotice>& hang) override;
  void OnReconnecting(const std::string& why) override;
  void OnResumed(int64_t round) override;
  void OnCheckpointAdvice(double interval_s) override;
  void OnPreflight(const rendezvous::PreflightRequest& request) override;
  // WorkerGroup::Listener
  void OnWorkerExited(const WorkerExit& exit) override;
  void OnWorkerOutput(int local_rank, WorkerStream stream) override;
  void OnStacksTaken() override;

 private:
  // Per local rank, what the agent keeps about its worker (the worker group keeps its
  // processes, the state machine its decisions' per-rank state).
  struct LocalRankRecord {
    // The attempt whose folder holds its current worker's logs and error file (in-process
    // recovery keeps survivors of earlier attempts).
    int attempt = 0;
    std::optional<WorkerExit> exit;  // how its worker of the current group ended; none: running
    std::set<int> cpus;              // --numa-binding; empty: off
  };

  // Setup (agent_setup.cc).
  absl::Status Prepare();
  // LOG_DIR/RUN_ID (never an earlier job's), or a temporary directory; events.jsonl there.
  absl::Status PrepareLogRoot();
  // The GPU memory wait and the --health-check (readiness before a cold start).
  void PrepareReadiness();
  // What Run() joins the rendezvous with.
  rendezvous::NodeInfo MakeNodeInfo() const;
  // --numa-binding: each local rank's CPUs, or an error naming the flag.
  absl::Status PlanNumaBinding();
  // --restart-mode=in-process: the control channel (in the private IPC directory).
  absl::Status StartInProcessRounds();
  // What the environment of local rank `lr`'s worker is built from (the error file aside).
  WorkerEnvSpec EnvSpec(int local_rank) const;
  // How local rank `lr`'s worker process is started from `env` (its command, CPUs, the hang
  // monitor's variables): one place for workers and their --preload spares, whose hand-over
  // requires the same command.
  SpawnRequest WorkerSpawn(int lr, Environment env) const;
  // --preload: one spare per local rank, started now so the imports overlap the rendezvous.
  absl::Status StartSpares();
  static absl::Status MakeDirs(const std::string& path);

  // The action executor (agent_actions.cc): carries out the state machine's decisions.
  void Execute(const std::vector<AgentAction>& actions);
  void Execute(const AgentAction& action);
  void AbortRound(const AgentAction& action);
  void StopWorkers(const AgentAction& action);
  void StepIn();
  void ExitAgent(const AgentAction& action);
  void StartWorkers(const rendezvous::Assignment& assignment);
  // "ranks 4-7 of 8 (node 1 of 2), master h:p, restart 2": where a round puts this node.
  std::string DescribeRound(const rendezvous::Assignment& a) const;
  // Starts `launches` in the current group (from --preload spares where there are), logging
  // how many of those `what` came from spares.
  void LaunchInGroup(std::vector<WorkerLaunch> launches, const char* what);
  // After a (re)start of round `a`: hang monitoring, the timeline step (`kept` -1: a cold start)
  // and RUNNING to the rendezvous.
  void WorkersStarted(const rendezvous::Assignment& a, int started, int kept);
  // In-process recovery: the survivors get `assignment`'s round, `start` get new workers.
  void ReformWorkers(const rendezvous::Assignment& assignment, const std::vector<int>& start);
  // Local rank `lr`'s worker for round `a`: its environment, command, streams and logs (in
  // this attempt's folder).
  WorkerLaunch MakeLaunch(int lr, const rendezvous::Assignment& a);
  // Opens this attempt's filtered_std{out,err}.log (closing the last attempt's).
  void OpenFilteredLogs();
  // When this agent hosts the rendezvous server, other nodes may still be running: keep
  // serving them until they have all left, then stop the loop.
  void StopLoopWhenServerIdle();
  void Finish(int exit_code, const std::string& reason);

  // A worker's exit into a failure report (agent_failure.cc, failure_record.h).
  // Hang detection (hang_monitor.h).
  void OnHang(const HangVerdict& verdict);
  // kReportFailed: the timeline step, the log line and the report to the rendezvous.
  void ReportFailure(const AgentAction& action);
  // The summary printed when the job fails (failure_report.h).
  void WriteFailureReport(const std::string& reason);
  // The error file of local rank `lr`'s current (or last) worker.
  std::string WorkerErrorFile(int lr) const;
  std::string ErrorFilePath(int attempt, int local_rank) const;
  // Under another launcher (TORCHELASTIC_ERROR_FILE in ddprun's own environment): the root
  // cause's error file goes up to it with errorCode, as torchrun's @record does.
  void RelayErrorFileToParent(const std::string& worker_file, const WorkerExit& cause);
  // "LOG_ROOT/attempt_N/*/stacks.txt" when this attempt's stacks were taken, else "".
  std::string StacksGlob() const;
  void NoteHangNotice(const std::optional<rendezvous::HangNotice>& hang);

  // Readiness (agent_readiness.cc). Before a cold start (HealthGate): the previous workers' GPU
  // memory released, then the --health-check (docs/guide/health-checks.md); the verdict goes to the
  // state machine, which also decides when to give up.
  void CheckReadiness();
  void NoteGpuRelease(const GpuReleaseResult& result);
  // --health-check: one run, its verdict, the next try.
  void RunHealthCheck();
  void OnHealthVerdict(const HealthVerdict& verdict);
  // While a spare with --health-check: the check every kStandbyCheckInterval. `generation`
  // ends the chain of an earlier spell as a spare.
  void ScheduleStandbyCheck(uint64_t generation);

  // The run record (agent_record.cc): timeline, events.jsonl, goodput ledger, torchrun's events.
  // Records a step of the run (run_timeline.h): events.jsonl with --log-dir, and after a
  // restart the cycle's timeline line. Fills in the times.
  void RecordStep(StepEvent event);
  // Feeds the ledger with a timeline step just recorded.
  void NoteInLedger(const StepEvent& event);
  // A worker's step report: the goodput ledger's clock of useful work, and its previous step's
  // compute time for the server's slow-node judge.
  void OnStepReport(int local_rank, const StepReport& report);
  // Every kFiguresReportInterval: the workers' compute times of the window and the checkpoint
  // costs to the rendezvous.
  void ReportFigures();
  void ReportProgress(const std::vector<LocalProgress>& progress, bool urgent);
  // --event-log-handler=console: torchrun's end-of-run events (event_log.h) on stderr.
  void WriteEventLog(int exit_code, const std::string& reason);

  // The preflight (agent_preflight.cc, docs/design.md §3d). Before the join: the probe listener
  // that peers probe (when the run has a preflight).
  absl::Status StartProbeListener();
  // Its report, measured on the run's thread: to the rendezvous, the log and events.jsonl.
  void OnPreflightMeasured(const rendezvous::PreflightReport& report,
                           const rendezvous::PreflightRequest& request);

  // Reaping and signals (agent_signals.cc).
  absl::Status WatchSignals();
  void OnSignals();
  void ReapChildren();
  // SIGKILLs the processes workers detached (stray_children.h); between groups and at the end.
  void KillWhatWorkersLeft();
  void DrainKernelLog();  // and DeathExplainer::Watch; every second

  const LaunchOptions options_;
  const Environment env_;
  const HostInfo host_;
  // nvidia-smi's path when a cold restart waits for GPU memory (--gpu-release-timeout), else "".
  const std::string nvidia_smi_;
  // ddprun's stdout and stderr, written by threads of their own (console_writer.h); declared
  // early, so they outlive every member that writes or logs through them.
  ConsoleWriter stdout_writer_{1, "stdout"};
  ConsoleWriter stderr_writer_{2, "stderr", &stdout_writer_};
  EventLoop loop_;
  AgentStateMachine state_;
  OrphanGuard guard_;                  // outlives group_ and spares_ (declared before them)
  std::unique_ptr<SparePool> spares_;  // --preload; null: off
  RendezvousSetup setup_;              // the rendezvous (and the server, when hosted here)
  rendezvous::Rendezvous* rendezvous_ = nullptr;  // setup_.rendezvous
  std::unique_ptr<WorkerGroup> group_;
  std::unique_ptr<InProcessRounds> reform_;  // --restart-mode=in-process; null: cold
  std::vector<LocalRankRecord> ranks_;       // by local rank, nproc_per_node of them
  // --duplicate-std{out,err}-filters: the current attempt's filtered_std{out,err}.log, or -1.
  int filtered_fds_[2] = {-1, -1};
  rendezvous::Assignment current_{};
  int attempt_ = -1;  // worker groups started by this agent so far, minus one (log folders)
  std::string run_id_;
  std::string log_root_;  // LOG_DIR/RUN_ID, or a temporary directory
  bool log_root_is_temp_ = false;
  int signal_fd_ = -1;
  bool waiting_for_peers_ = false;
  bool awaiting_close_ = false;  // succeeded; waiting for the server to close our stream
  int exit_code_ = kExitSuccess;
  HangMonitor hangs_;
  ComputeTimes compute_;  // the workers' compute times since the last ReportFigures
  // What the checkpoint advice is told next (with the compute times): the longest save and the
  // latest recovery since the last report.
  rendezvous::CheckpointReport checkpoint_;
  // The run's latest checkpoint advice (seconds; 0: none yet), and the one last logged.
  double checkpoint_advice_s_ = 0;
  double checkpoint_advice_logged_s_ = 0;
  // Why workers die: the kernel's log, open from the start (DDPRUN_KERNEL_LOG, default
  // /dev/kmsg), drained every second so that floods do not overrun its ring, and the workers'
  // memory cgroups, watched every second for their OOM kill counts.
  std::unique_ptr<DeathExplainer> explainer_;
  // A step report or a stdout line from a worker since this node's workers last started
  // (the crash-loop breaker's progress, rendezvous/api/crash_loop.h).
  bool progress_in_attempt_ = false;
  std::string ipc_dir_;        // private directory of the FIFOs; removed at exit
  std::string module_dir_;     // in-process mode: ipc_dir_/python, on the workers' PYTHONPATH
  std::string straggler_;      // named by the rendezvous for the last hang
  bool stacks_taken_ = false;  // some attempt's stacks were written: keep a temporary log root
  TimePoint started_{};        // Run() began (the events' total_run_time)
  std::unique_ptr<RunTimeline> timeline_;  // made once the run id is known
  std::unique_ptr<GoodputLedger> ledger_;  // made when Run() begins
  int events_fd_ = -1;                     // LOG_ROOT/events.jsonl with --log-dir
  bool failure_in_cycle_ = false;          // a failure step since the last workers started
  bool stopping_ = false;                  // a stop step not yet finished
  bool awaiting_first_progress_ = false;
  // --health-check; null: none. Declared after loop_, which it uses until destroyed.
  std::unique_ptr<HealthCheck> health_;
  std::unique_ptr<GpuReleaseWait> gpu_release_;  // null: no nvidia-smi, or the wait is off
  std::set<pid_t> started_worker_pids_;          // of the last cold start, for gpu_release_
  rendezvous::NodeInfo node_;                    // what Run() joins with
  bool joined_ = false;                          // Join() called (a later step in is StepIn())
  uint64_t standby_generation_ = 0;              // spells as a spare so far
  // The last --health-check that passed took this long (the preflight reports it).
  std::optional<double> health_check_s_;
  // --preflight: the listener peers probe, from before the join to the end (a node set aside
  // measures again against the run's nodes); the measurement running (declared after loop_,
  // which its report is posted to).
  std::unique_ptr<ProbeListener> probe_listener_;
  std::unique_ptr<PreflightRun> preflight_run_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_AGENT_AGENT_H_
