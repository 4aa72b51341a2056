// Native stacks of running processes, taken by an external debugger so that the agent itself
// never ptraces anything: `eu-stack -p PID` (elfutils; tens of milliseconds) or, when only gdb
// is installed, `gdb -p PID -batch -ex "thread apply all bt"`. One tool process per target,
// all at once, each writing into its target's stacks file; done when every tool has exited or
// the deadline passes (then the stragglers are killed). Runs on the agent's EventLoop; the
// agent routes the tools' exits here from its SIGCHLD handling.
#ifndef DDPRUN_LAUNCHER_PROCESS_STACK_COLLECTOR_H_
#define DDPRUN_LAUNCHER_PROCESS_STACK_COLLECTOR_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/environment.h"
#include "common/event_loop.h"

namespace ddprun::launcher {

struct StackTool {
  std::string name;  // "eu-stack" or "gdb"
  std::string path;
  std::vector<std::string> ArgvFor(pid_t pid) const;
};

// The first of eu-stack and gdb found in `env`'s PATH.
std::optional<StackTool> FindStackTool(const Environment& env);

class StackCollector {
 public:
  struct Target {
    pid_t pid = 0;
    int out_fd = -1;  // the tool's stdout and stderr; not owned (kept open until done)
  };

  StackCollector(EventLoop* loop, std::optional<StackTool> tool, Duration deadline);
  ~StackCollector();  // kills tools still running

  // Starts a tool per target; `done` runs on the loop once all have finished (before this
  // returns when there is nothing to run). One collection at a time.
  void Collect(std::vector<Target> targets, std::function<void()> done);
  // A child of the agent exited; false when it is not one of our tools.
  bool HandleChildExit(pid_t pid);

  const std::optional<StackTool>& tool() const { return tool_; }

 private:
  void Finish();

  EventLoop* loop_;
  const std::optional<StackTool> tool_;
  const Duration deadline_;
  std::map<pid_t, bool> running_;  // tool pid -> still running
  std::function<void()> done_;
  EventLoop::TimerId deadline_timer_ = 0;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_PROCESS_STACK_COLLECTOR_H_
