// The worker processes of one attempt on this node: spawns them with their output pipes,
// forwards their output (output_stream.h), learns of their exits from the agent's SIGCHLD
// handling, and stops them (SIGTERM to each worker's process group, SIGKILL after the grace
// period). Single-threaded: every method runs on the agent's EventLoop thread.
#ifndef DDPRUN_LAUNCHER_WORKER_GROUP_H_
#define DDPRUN_LAUNCHER_WORKER_GROUP_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/event_loop.h"
#include "launcher/agent_state.h"
#include "launcher/orphan_guard.h"
#include "launcher/output_stream.h"
#include "launcher/spawn.h"

namespace ddprun::launcher {

struct WorkerLaunch {
  int local_rank = 0;
  int rank = 0;
  SpawnRequest spawn;                  // its stdout_fd / stderr_fd are filled in by the group
  OutputStream::Config stdout_config;  // log_fd is filled in from stdout_log
  OutputStream::Config stderr_config;
  std::string stdout_log;  // empty: no log file
  std::string stderr_log;
};

class WorkerGroup {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void OnWorkerExited(const WorkerExit& exit) = 0;
  };

  // `guard` (optional, not owned) is told of every worker process group.
  WorkerGroup(EventLoop* loop, Listener* listener, std::chrono::milliseconds stop_timeout,
              OrphanGuard* guard = nullptr);
  ~WorkerGroup();  // SIGKILLs whatever is still running
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts every worker. A worker that cannot be started is reported to the listener (posted,
  // after this returns) as exited with code 127; StartError() then says why.
  void Start(std::vector<WorkerLaunch> launches);

  // A child of the agent exited; returns false when it is not one of this group's workers.
  bool HandleChildExit(pid_t pid, int wait_status);

  void Stop();               // SIGTERM now, SIGKILL after the grace period
  void Kill();               // SIGKILL now
  void Forward(int signal);  // to every live worker's process group

  int live() const;
  std::vector<std::string> StderrTail(int local_rank) const;
  std::string StartError(int local_rank) const;
  pid_t Pid(int local_rank) const;

 private:
  struct Worker {
    int local_rank = 0;
    int rank = 0;
    pid_t pid = -1;
    bool running = false;
    std::string start_error;
    int out_fd = -1;  // read ends of the pipes, non-blocking
    int err_fd = -1;
    int out_log = -1;
    int err_log = -1;
    std::unique_ptr<OutputStream> out;
    std::unique_ptr<OutputStream> err;
  };
  void Pump(Worker* w, int fd, OutputStream* stream);
  void CloseStreams(Worker* w);
  void SignalAll(int signal);
  Worker* Find(int local_rank);
  const Worker* Find(int local_rank) const;

  EventLoop* loop_;
  Listener* listener_;
  const std::chrono::milliseconds stop_timeout_;
  OrphanGuard* guard_;
  std::vector<std::unique_ptr<Worker>> workers_;
  EventLoop::TimerId kill_timer_ = 0;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_WORKER_GROUP_H_
