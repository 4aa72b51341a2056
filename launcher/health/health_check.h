// --health-check: a command that must pass before this node joins each round
// (docs/guide/health-checks.md). One run: `/bin/sh -c COMMAND` with the agent's environment, in a
// process group of its own (so a timeout kills whatever it started, and so does its end: nothing it
// left behind outlives it), stdout and stderr into one pipe of which only the last lines are kept:
// a check that prints megabytes costs reading them, never memory.
//
// Runs on the agent's EventLoop; the agent routes the check's exit from its SIGCHLD handling.
#ifndef DDPRUN_LAUNCHER_HEALTH_HEALTH_CHECK_H_
#define DDPRUN_LAUNCHER_HEALTH_HEALTH_CHECK_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/environment.h"
#include "common/event_loop.h"
#include "launcher/health/health_verdict.h"

namespace ddprun::launcher {

class OutputStream;

struct HealthCheckOptions {
  std::string command;  // for sh -c
  Duration timeout = std::chrono::seconds(60);
  Environment env;
  size_t tail_lines = HealthVerdict::kTailLines;  // of its output, kept for the verdict
};

class HealthCheck {
 public:
  HealthCheck(EventLoop* loop, HealthCheckOptions options);
  ~HealthCheck();  // kills a check still running, with its process group

  HealthCheck(const HealthCheck&) = delete;
  HealthCheck& operator=(const HealthCheck&) = delete;

  // Starts a run; `done` gets its verdict on the loop (never before Run returns). One run at a
  // time: false, and nothing started, while one is running.
  bool Run(std::function<void(const HealthVerdict&)> done);
  // A child of the agent exited; false when it is not the running check.
  bool HandleChildExit(pid_t pid, int wait_status);

  bool running() const { return pid_ > 0; }
  const std::string& command() const { return options_.command; }

 private:
  void ReadOutput();  // what the pipe has now, without blocking
  void CloseOutput();
  void Finish(HealthVerdict verdict);

  EventLoop* const loop_;
  const HealthCheckOptions options_;
  pid_t pid_ = 0;
  int out_fd_ = -1;
  std::unique_ptr<OutputStream> output_;
  TimePoint started_{};
  EventLoop::TimerId timer_ = 0;
  bool timed_out_ = false;
  std::function<void(const HealthVerdict&)> done_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_HEALTH_HEALTH_CHECK_H_
