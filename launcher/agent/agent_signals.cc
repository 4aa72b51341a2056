#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/file_text.h"
#include "common/log.h"
#include "common/signal_names.h"
#include "launcher/agent/agent.h"
#include "launcher/process/stray_children.h"

namespace ddprun::launcher {
namespace {

// A hang-up, interrupt or quit signal that was ignored when ddprun started (`nohup ddprun`, or
// `ddprun ... &` from a script: the shell ignores SIGINT and SIGQUIT for background jobs) stays
// ignored, and the workers inherit that. Blocking it for the signalfd would queue it instead
// (a blocked signal is never discarded), and a closing terminal would stop the job that nohup was
// meant to protect (torchrun does: pytorch issue 76894). SIGTERM is always handled: it is how a
// scheduler stops a job.
bool IgnoredAtStart(int sig) {
  if (sig != SIGHUP && sig != SIGINT && sig != SIGQUIT) return false;
  struct sigaction current {};
  return sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN;
}

sigset_t AgentSignalSet(const LaunchOptions& options) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int sig : kStopSignals) {
    if (!IgnoredAtStart(sig)) sigaddset(&set, sig);
  }
  for (int sig : options.extra_signals) sigaddset(&set, sig);
  return set;
}

}  // namespace

void Agent::BlockAgentSignals(const LaunchOptions& options) {
  sigset_t set = AgentSignalSet(options);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A console that goes away must not kill the agent while it still has workers to stop.
  signal(SIGPIPE, SIG_IGN);
}

absl::Status Agent::WatchSignals() {
  sigset_t set = AgentSignalSet(options_);
  signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) return absl::InternalError(absl::StrCat("signalfd: ", strerror(errno)));
  loop_.AddFd(signal_fd_, EPOLLIN, [this](uint32_t) { OnSignals(); });
  return absl::OkStatus();
}

void Agent::OnSignals() {
  signalfd_siginfo info;
  while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) {
      ReapChildren();
    } else if (IsStopSignal(sig) && waiting_for_peers_) {
      loop_.Stop();  // done ourselves; stop serving the others at once
    } else if (IsStopSignal(sig)) {
      LogInfo(absl::StrCat("received ", SignalName(sig), "; stopping the workers"));
      Execute(state_.OnStopSignal(sig));
    } else {
      LogInfo(absl::StrCat("forwarding ", SignalName(sig), " to the workers"));
      if (group_) group_->Forward(sig);
    }
  }
}

void Agent::ReapChildren() {
  while (true) {
    // Peek first: a zombie still has its name, which tells the kernel's records about this pid
    // from those about another process that had the same number (WorkerExit::comm).
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid <= 0) return;
    const std::string comm(absl::StripTrailingAsciiWhitespace(
        ReadTextFile(absl::StrCat("/proc/", info.si_pid, "/comm"))));
    int status = 0;
    const pid_t pid = waitpid(info.si_pid, &status, WNOHANG);
    if (pid <= 0) return;
    // Not a worker: an orphaned grandchild adopted as subreaper (reaping it is all we owe), or
    // the orphan guard (which only exits early if killed).
    if (spares_ && spares_->HandleChildExit(pid, status)) continue;
    if (health_ && health_->HandleChildExit(pid, status)) continue;
    if (gpu_release_ && gpu_release_->HandleChildExit(pid, status)) continue;
    if (group_) group_->HandleChildExit(pid, status, comm);
  }
}

void Agent::KillWhatWorkersLeft() {
  std::set<pid_t> ours = {guard_.pid()};
  if (spares_) {
    for (pid_t pid : spares_->OwnPids()) ours.insert(pid);
  }
  if (group_) {
    for (pid_t pid : group_->LivePids()) ours.insert(pid);  // in-process recovery's survivors
  }
  const std::vector<pid_t> killed = KillStrayChildren(ours);
  if (!killed.empty()) {
    LogWarning(absl::StrCat("killed ", killed.size(),
                            " process(es) the workers left running (detached with setsid or a "
                            "double fork, so outside their process groups): pid ",
                            absl::StrJoin(killed, ", ")));
  }
}

void Agent::DrainKernelLog() {
  explainer_->Drain();
  explainer_->Watch(group_ ? group_->LivePids() : std::vector<pid_t>{});
  loop_.AddTimerAfter(std::chrono::seconds(1), [this] { DrainKernelLog(); });
}

}  // namespace ddprun::launcher
