// The worker processes of one attempt on this node: spawns them with their output pipes,
// forwards their output (output_stream.h), learns of their exits from the agent's SIGCHLD
// handling, and stops them (SIGTERM to each worker's process group, SIGKILL after the grace
// period). Single-threaded: every method runs on the agent's EventLoop thread.
#ifndef DDPRUN_LAUNCHER_WORKERS_WORKER_GROUP_H_
#define DDPRUN_LAUNCHER_WORKERS_WORKER_GROUP_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/event_loop.h"
#include "launcher/preload/hand_over_receipt.h"
#include "launcher/preload/spare_pool.h"
#include "launcher/process/orphan_guard.h"
#include "launcher/process/spawn.h"
#include "launcher/process/stack_collector.h"
#include "launcher/workers/output_stream.h"
#include "launcher/workers/worker_exit.h"

namespace ddprun::launcher {

struct WorkerLaunch {
  int local_rank = 0;
  int rank = 0;
  SpawnRequest spawn;                  // its stdout_fd / stderr_fd are filled in by the group
  OutputStream::Config stdout_config;  // log_fd is filled in from stdout_log
  OutputStream::Config stderr_config;
  std::string stdout_log;  // empty: no log file
  std::string stderr_log;
  // A pseudo-terminal instead of a pipe for the stream, sized like `tty_of` (ddprun's own
  // terminal), so that the worker's isatty(), colours and terminal width behave as if it wrote
  // to that terminal itself. -1: a pipe.
  int stdout_tty_of = -1;
  int stderr_tty_of = -1;
  std::string stacks_path;  // where StopWithStacks writes this worker's stacks
  bool python = false;      // a CPython worker: SIGABRT makes faulthandler print its threads
};

// Why and how to stop a group whose stacks are wanted (a hang here or on another node).
struct StackPlan {
  std::string reason;    // first line of every stacks file
  int signal_rank = -1;  // local rank that gets `signal` once stacks are taken (FileTimer's)
  int signal = 0;
  // >= 0: only this local rank's worker (in-process recovery: the others re-form without it).
  int only_local_rank = -1;
};

// Which of a worker's streams wrote (stdout output counts as progress for the crash-loop
// breaker; stderr, where tracebacks go, does not).
enum class WorkerStream { kStdout, kStderr };

class WorkerGroup {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void OnWorkerExited(const WorkerExit& exit) = 0;
    // The worker wrote something (a line, a '\r' update): a sign of life.
    virtual void OnWorkerOutput(int local_rank, WorkerStream stream) = 0;
    // StopWithStacks has written every worker's stacks and now stops them.
    virtual void OnStacksTaken() {}
  };

  // `guard` (optional, not owned) is told of every worker process group. `spares` (optional,
  // not owned: --preload) starts the workers it has a spare for.
  WorkerGroup(EventLoop* loop, Listener* listener, std::chrono::milliseconds stop_timeout,
              OrphanGuard* guard = nullptr, std::optional<StackTool> stack_tool = std::nullopt,
              SparePool* spares = nullptr);
  ~WorkerGroup();  // SIGKILLs whatever is still running
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts every worker. A worker that cannot be started is reported to the listener (posted,
  // after this returns) as exited with code 127; StartError() then says why. A local rank whose
  // earlier worker has exited gets the new one in its place (in-process recovery); one whose
  // worker still runs is not started twice (logged).
  void Start(std::vector<WorkerLaunch> launches);

  // A child of the agent exited; returns false when it is not one of this group's workers.
  // `comm`: its name at death, when the reaper read it (WorkerExit::comm).
  bool HandleChildExit(pid_t pid, int wait_status, const std::string& comm = "");

  void Stop();                      // SIGTERM now, SIGKILL after the grace period
  void Kill();                      // SIGKILL now
  void KillWorker(int local_rank);  // SIGKILL one worker's process group now
  void Forward(int signal);         // to every live worker's process group
  // Takes every live worker's stacks, then stops the group as Stop() does:
  //  1. native stacks of all threads (eu-stack or gdb) of every worker at once;
  //  2. Python workers: SIGABRT, so that faulthandler (PYTHONFAULTHANDLER=1) prints every
  //     thread's traceback on stderr, captured until they exit (at most kPythonDumpWait);
  //  3. the plan's signal to its rank; then SIGKILL to every group: a hung group's ranks are
  //     stuck in or before a collective and could not act on SIGTERM (a checkpoint needs the
  //     peers they wait for), so the grace period would only add to the outage.
  // A Stop()/Kill() meanwhile cuts it short.
  void StopWithStacks(const StackPlan& plan);
  bool collecting_stacks() const { return collecting_; }

  int live() const;
  std::vector<std::string> StderrTail(int local_rank) const;
  std::string StartError(int local_rank) const;
  pid_t Pid(int local_rank) const;
  std::vector<pid_t> LivePids() const;
  int LocalRankOfPid(pid_t pid) const;  // a worker or a process in its group; -1: none
  // The worker whose process tree holds `pid` (the worker or a descendant, by the chain of
  // parents in /proc; a process group can be joined, a parent cannot be chosen); -1: none.
  int LocalRankOfDescendant(pid_t pid) const;
  // The innermost frames of a worker's stacks file (empty when none was written).
  std::vector<std::string> InnermostFrames(int local_rank, size_t n) const;
  std::string StacksPath(int local_rank) const;
  // (local rank, state letter from /proc/PID/stat) of every live worker.
  std::vector<std::pair<int, char>> ProcessStates() const;
  const std::optional<StackTool>& stack_tool() const { return stacks_.tool(); }

 private:
  struct Worker {
    int local_rank = 0;
    int rank = 0;
    pid_t pid = -1;
    bool running = false;
    TimePoint started{};
    bool signalled = false;  // by this group: its death is ddprun's doing
    std::string start_error;
    int out_fd = -1;  // read ends of the pipes, non-blocking
    int err_fd = -1;
    int out_log = -1;
    int err_log = -1;
    std::unique_ptr<OutputStream> out;
    std::unique_ptr<OutputStream> err;
    // Shows a stream's line in progress (OutputStream::kLineInProgressDelay); 0: none armed.
    EventLoop::TimerId out_flush = 0;
    EventLoop::TimerId err_flush = 0;
    std::string stacks_path;
    bool python = false;
    bool stacks_written = false;
    HandOverReceipt hand_over;  // started from a --preload spare: whether it read its start
  };
  // The local rank of the running worker whose pid is `pid`; -1: none.
  int LocalRankOfWorker(pid_t pid) const;
  void DumpPythonStacks(const StackPlan& plan);
  void FinishStacks(const StackPlan& plan);
  void GiveUpOnUnreaped();
  void Pump(Worker* w, int fd, OutputStream* stream);
  // Arms the timer that shows `stream`'s line in progress, unless one is armed.
  void ScheduleLineInProgress(Worker* w, OutputStream* stream);
  void CloseStreams(Worker* w);
  void SignalAll(int signal);
  Worker* Find(int local_rank);
  const Worker* Find(int local_rank) const;

  EventLoop* loop_;
  Listener* listener_;
  const std::chrono::milliseconds stop_timeout_;
  OrphanGuard* guard_;
  SparePool* spares_;
  std::vector<std::unique_ptr<Worker>> workers_;
  EventLoop::TimerId kill_timer_ = 0;
  EventLoop::TimerId abandon_timer_ = 0;
  StackCollector stacks_;
  bool collecting_ = false;
  StackPlan pending_plan_;
  EventLoop::TimerId python_dump_timer_ = 0;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_WORKERS_WORKER_GROUP_H_
