// WorkerGroup::StopWithStacks and its steps (worker_group.h): the stacks of every worker of a
// hung group, native and Python, before the group is killed.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "launcher/process/proc_info.h"
#include "launcher/workers/worker_group.h"

namespace ddprun::launcher {
namespace {

// How long Python workers get to print their faulthandler dump after SIGABRT.
constexpr std::chrono::seconds kPythonDumpWait{2};
constexpr size_t kPythonDumpLimit = 1 << 20;

void WriteText(int fd, const std::string& text) {
  if (fd >= 0) WriteAll(fd, text);
}

}  // namespace

void WorkerGroup::StopWithStacks(const StackPlan& plan) {
  if (collecting_) return;
  if (live() == 0) return Stop();
  collecting_ = true;
  pending_plan_ = plan;
  std::vector<StackCollector::Target> targets;
  std::vector<int> fds;
  for (auto& w : workers_) {
    if (!w->running || w->stacks_path.empty()) continue;
    if (plan.only_local_rank >= 0 && w->local_rank != plan.only_local_rank) continue;
    const int fd =
        open(w->stacks_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      LogWarning(absl::StrCat("cannot write ", w->stacks_path, ": ", strerror(errno)));
      continue;
    }
    w->stacks_written = true;
    WriteText(fd, absl::StrCat("ddprun: stacks of rank ", w->rank, " (local rank ", w->local_rank,
                               ", pid ", w->pid, "): ", plan.reason, "\n\n"));
    WriteText(fd,
              stacks_.tool().has_value()
                  ? absl::StrCat("== native stacks, all threads (", stacks_.tool()->name, ") ==\n")
                  : "== native stacks: not taken, neither eu-stack (elfutils) nor gdb is "
                    "installed ==\n");
    fds.push_back(fd);
    if (ProcessState(w->pid) == 'D') {
      // ptrace cannot stop a task in uninterruptible sleep: a tool would only wait out its
      // deadline. Where it sleeps in the kernel is the useful part.
      WriteText(fd, absl::StrCat("(not taken: the process is in uninterruptible sleep (D))\n\n",
                                 KernelSideOf(w->pid)));
      continue;
    }
    targets.push_back({w->pid, fd});
  }
  stacks_.Collect(std::move(targets), [this, fds] {
    for (int fd : fds) close(fd);
    if (collecting_) DumpPythonStacks(pending_plan_);
  });
}

void WorkerGroup::DumpPythonStacks(const StackPlan& plan) {
  bool any = false;
  for (auto& w : workers_) {
    if (!w->running || !w->python || !w->stacks_written) continue;
    if (plan.only_local_rank >= 0 && w->local_rank != plan.only_local_rank) continue;
    // The dump is what we want, not a core file of every worker.
    const rlimit no_core{0, 0};
    prlimit(w->pid, RLIMIT_CORE, &no_core, nullptr);
    w->err->StartCapture(kPythonDumpLimit);
    w->signalled = true;
    kill(w->pid, SIGABRT);
    any = true;
  }
  if (!any) return FinishStacks(plan);
  python_dump_timer_ = loop_->AddTimerAfter(kPythonDumpWait, [this] {
    python_dump_timer_ = 0;
    FinishStacks(pending_plan_);
  });
}

void WorkerGroup::FinishStacks(const StackPlan& plan) {
  if (!collecting_) return;
  collecting_ = false;
  for (auto& w : workers_) {
    if (!w->python || !w->stacks_written) continue;
    if (plan.only_local_rank >= 0 && w->local_rank != plan.only_local_rank) continue;
    const int fd = open(w->stacks_path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) continue;
    std::string dump = w->err->TakeCapture();
    WriteText(fd, "\n== Python stacks, all threads (faulthandler, after SIGABRT) ==\n");
    WriteText(fd, dump.empty() ? "(nothing printed: is PYTHONFAULTHANDLER unset by the worker, "
                                 "or was SIGABRT handled or blocked?)\n"
                               : dump);
    close(fd);
  }
  if (plan.signal > 0 && plan.signal_rank >= 0) {
    Worker* w = Find(plan.signal_rank);
    if (w != nullptr && w->running) {
      w->signalled = true;
      kill(w->pid, plan.signal);
    }
  }
  listener_->OnStacksTaken();
  // No SIGTERM grace: the ranks of a hung group are stuck in or before a collective, and a
  // graceful stop (a checkpoint) would need the very peers they are waiting for.
  if (plan.only_local_rank >= 0) {
    KillWorker(plan.only_local_rank);
  } else {
    Kill();
  }
}

void WorkerGroup::Forward(int signal) { SignalAll(signal); }

int WorkerGroup::live() const {
  int n = 0;
  for (const auto& w : workers_) n += w->running ? 1 : 0;
  return n;
}

WorkerGroup::Worker* WorkerGroup::Find(int local_rank) {
  for (auto& w : workers_) {
    if (w->local_rank == local_rank) return w.get();
  }
  return nullptr;
}

const WorkerGroup::Worker* WorkerGroup::Find(int local_rank) const {
  for (const auto& w : workers_) {
    if (w->local_rank == local_rank) return w.get();
  }
  return nullptr;
}

std::vector<std::string> WorkerGroup::StderrTail(int local_rank) const {
  const Worker* w = Find(local_rank);
  return w != nullptr && w->err ? w->err->Tail() : std::vector<std::string>{};
}

std::string WorkerGroup::StartError(int local_rank) const {
  const Worker* w = Find(local_rank);
  return w != nullptr ? w->start_error : "";
}

}  // namespace ddprun::launcher
