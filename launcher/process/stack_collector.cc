#include "launcher/process/stack_collector.h"

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "launcher/process/spawn.h"

namespace ddprun::launcher {

std::vector<std::string> StackTool::ArgvFor(pid_t pid) const {
  const std::string p = absl::StrCat(pid);
  if (name == "gdb") {
    return {path, "-p", p, "-batch", "-nx", "-ex", "thread apply all bt"};
  }
  return {path, "-p", p};
}

std::optional<StackTool> FindStackTool(const Environment& env) {
  for (const char* name : {"eu-stack", "gdb"}) {
    auto found = FindProgramInEnv(name, env);
    if (found.ok() && access(found->c_str(), X_OK) == 0) return StackTool{name, *found};
  }
  return std::nullopt;
}

StackCollector::StackCollector(EventLoop* loop, std::optional<StackTool> tool, Duration deadline)
    : loop_(loop), tool_(std::move(tool)), deadline_(deadline) {}

StackCollector::~StackCollector() {
  for (const auto& [pid, running] : running_) {
    if (running) kill(-pid, SIGKILL);
  }
  if (deadline_timer_ != 0) loop_->CancelTimer(deadline_timer_);
}

void StackCollector::Collect(std::vector<Target> targets, std::function<void()> done) {
  done_ = std::move(done);
  running_.clear();
  if (tool_.has_value()) {
    for (const Target& t : targets) {
      SpawnRequest req;
      req.program = tool_->path;
      req.argv = tool_->ArgvFor(t.pid);
      req.env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"}, {"LC_ALL", "C"}};
      req.stdout_fd = t.out_fd;
      req.stderr_fd = t.out_fd;
      auto pid = Spawn(req);
      if (pid.ok()) {
        running_[*pid] = true;
      } else {
        LogWarning(absl::StrCat("cannot run ", tool_->name, ": ", pid.status().message()));
      }
    }
  }
  if (running_.empty()) {
    Finish();
    return;
  }
  deadline_timer_ = loop_->AddTimerAfter(deadline_, [this] {
    deadline_timer_ = 0;
    int late = 0;
    for (const auto& [pid, running] : running_) {
      if (running) {
        kill(-pid, SIGKILL);
        ++late;
      }
    }
    if (late > 0) {
      LogWarning(absl::StrCat(late, " ", tool_->name, " run(s) still going after ",
                              ToMillis(deadline_), " ms; killed, their stacks may be partial"));
    }
    Finish();
  });
}

bool StackCollector::HandleChildExit(pid_t pid) {
  auto it = running_.find(pid);
  if (it == running_.end()) return false;
  it->second = false;
  for (const auto& [p, running] : running_) {
    if (running) return true;
  }
  if (deadline_timer_ != 0) {
    loop_->CancelTimer(deadline_timer_);
    deadline_timer_ = 0;
    Finish();
  }
  return true;
}

void StackCollector::Finish() {
  if (!done_) return;
  auto done = std::move(done_);
  done_ = nullptr;
  done();
}

}  // namespace ddprun::launcher
