#include "launcher/preload/spare_pool.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/env_variables.h"
#include "common/fd_passing.h"
#include "common/log.h"
#include "common/temp_dir.h"
#include "launcher/preload/preload_hook_py.h"  // kPreloadHookSource, generated from preload_hook.py
#include "launcher/process/exit_status.h"
#include "launcher/process/proc_info.h"

namespace ddprun::launcher {
namespace {

constexpr int kMaxEarlyDeaths = 3;
// A spare that died is replaced after this pause, so a crashing interpreter cannot spin.
constexpr std::chrono::milliseconds kRespawnDelay{200};
// Spares made once workers run start when the new workers have shown a first sign of life, at
// most this long after the start: their interpreter start-up runs at normal priority (only the
// import thread can go idle) and must not compete with the workers' own start-up burst.
constexpr std::chrono::milliseconds kSettleAfterStart{3000};
// The probe's own code, run only when the hook was not: tells ddprun so by its exit code.
constexpr char kProbeCode[] = "import sys; sys.exit(3)";

// The spare's stdout or stderr until the hand-over: a file in memory that the hook copies to
// the worker's real stream then.
int MemoryFile(const char* name) { return memfd_create(name, MFD_CLOEXEC); }

// PYTHONPATH with the hook's folder first, and the variables the hook reads.
void AddHookEnv(const std::string& hook_dir, Environment* env) {
  auto path = env->find("PYTHONPATH");
  if (path != env->end()) {
    (*env)[kPreloadPythonpathVariable.name] = path->second;
    path->second = absl::StrCat(hook_dir, ":", path->second);
  } else {
    (*env)["PYTHONPATH"] = hook_dir;
  }
}

// Gives every SCHED_IDLE thread of `pid` (the import thread, and any thread an import started,
// which inherits its policy) normal priority back. False when one cannot be raised: without
// CAP_SYS_NICE a thread cannot leave SCHED_IDLE. Done by ddprun before the hand-over, not by the
// spare: a starved idle thread may hold Python's GIL, which the spare's main thread would need
// first (priority inversion).
bool RaiseIdleThreads(pid_t pid) {
  bool all = true;
  for (pid_t tid : ThreadsOf(pid)) {
    if (sched_getscheduler(tid) != SCHED_IDLE) continue;
    sched_param normal{};
    if (sched_setscheduler(tid, SCHED_OTHER, &normal) != 0 && errno != ESRCH) all = false;
  }
  return all;
}

bool SameCommand(const SpawnRequest& a, const SpawnRequest& b) {
  return a.program == b.program && a.argv == b.argv && a.cpus == b.cpus;
}

}  // namespace

SparePool::SparePool(EventLoop* loop, OrphanGuard* guard, SpareHook hook,
                     std::vector<std::string> modules)
    : loop_(loop), guard_(guard), hook_(hook), modules_(std::move(modules)) {}

std::string SparePool::WarmUpWhat() const {
  return hook_ == SpareHook::kNativeProgram ? "native" : absl::StrJoin(modules_, ",");
}

SparePool::~SparePool() {
  active_ = false;
  for (EventLoop::TimerId t : settle_timers_) {
    if (t != 0) loop_->CancelTimer(t);
  }
  for (Spare& s : spares_) KillAndForget(&s);
  if (probe_ > 0) {
    kill(probe_, SIGKILL);
    waitpid(probe_, nullptr, 0);
  }
  std::error_code ec;
  if (!hook_dir_.empty()) std::filesystem::remove_all(hook_dir_, ec);
}

absl::Status SparePool::Start(std::vector<SpawnRequest> templates) {
  templates_ = std::move(templates);
  spares_.assign(templates_.size(), Spare{});
  settle_timers_.assign(templates_.size(), 0);
  if (hook_ == SpareHook::kNativeProgram) {
    ActivateAndStartSpares();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> dir = MakeTempDir("ddprun-preload");
  if (!dir.ok()) return dir.status();
  hook_dir_ = *std::move(dir);
  const std::string hook = absl::StrCat(hook_dir_, "/sitecustomize.py");
  {
    std::ofstream out(hook);
    out << kPreloadHookSource;
    if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", hook));
  }
  if (templates_.empty()) return absl::OkStatus();

  SpawnRequest probe = templates_[0];
  probe.argv = {probe.argv[0], "-c", kProbeCode};
  probe.cpus.clear();
  AddHookEnv(hook_dir_, &probe.env);
  probe.env[kPreloadProbeVariable.name] = "1";
  const int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  probe.stdout_fd = probe.stderr_fd = null_fd;
  auto pid = Spawn(probe);
  if (null_fd >= 0) close(null_fd);
  if (!pid.ok()) {
    LogWarning(absl::StrCat("--preload: cannot start ", probe.program, ": ", pid.status().message(),
                            "; workers start cold"));
    return absl::OkStatus();
  }
  probe_ = *pid;
  return absl::OkStatus();
}

void SparePool::StartSpare(int lr) {
  if (!active_ || spares_[lr].pid > 0) return;
  int ends[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0) {
    TurnOff(absl::StrCat("socketpair: ", strerror(errno)));
    return;
  }
  SpawnRequest request = templates_[lr];
  if (hook_ == SpareHook::kPythonSitecustomize) {
    AddHookEnv(hook_dir_, &request.env);
    request.env[kPreloadModulesVariable.name] = absl::StrJoin(modules_, ",");
  }
  request.env[kPreloadFdVariable.name] = absl::StrCat(ends[1]);
  // Before the first start the node is only waiting for its peers: import at full speed. Later
  // workers run, and a spare's import must never slow them.
  request.env[kPreloadIdleVariable.name] = workers_started_ ? "1" : "0";
  request.keep_fd = ends[1];
  request.stdout_fd = MemoryFile("ddprun-spare-stdout");
  request.stderr_fd = MemoryFile("ddprun-spare-stderr");
  auto pid = request.stdout_fd >= 0 && request.stderr_fd >= 0
                 ? Spawn(request)
                 : absl::StatusOr<pid_t>(absl::InternalError(strerror(errno)));
  for (int fd : {request.stdout_fd, request.stderr_fd}) {
    if (fd >= 0) close(fd);
  }
  if (!pid.ok()) {
    close(ends[0]);
    close(ends[1]);
    TurnOff(absl::StrCat("cannot start a spare: ", pid.status().message()));
    return;
  }
  Spare& s = spares_[lr];
  s.pid = *pid;
  s.socket = ends[0];
  s.spare_end = ends[1];
  s.ready = false;
  s.started = std::chrono::steady_clock::now();
  if (guard_ != nullptr) guard_->Add(s.pid);
  fcntl(s.socket, F_SETFL, O_NONBLOCK);
  loop_->AddFd(s.socket, EPOLLIN, [this, lr](uint32_t) { OnSpareMessage(lr); });
}

void SparePool::StartSpareLater(int lr, std::chrono::milliseconds delay) {
  if (delay.count() == 0) {
    StartSpare(lr);
    return;
  }
  if (settle_timers_[lr] != 0) loop_->CancelTimer(settle_timers_[lr]);
  settle_timers_[lr] = loop_->AddTimerAfter(delay, [this, lr] {
    settle_timers_[lr] = 0;
    StartSpare(lr);
  });
}

void SparePool::WorkersSettled() {
  workers_settled_ = true;
  for (int lr = 0; lr < static_cast<int>(settle_timers_.size()); ++lr) {
    if (settle_timers_[lr] == 0) continue;
    loop_->CancelTimer(settle_timers_[lr]);
    settle_timers_[lr] = 0;
    StartSpare(lr);
  }
}

void SparePool::OnSpareMessage(int lr) {
  Spare& s = spares_[lr];
  char buf[65536];
  const ssize_t n = recv(s.socket, buf, sizeof(buf), 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  // An error: a spare's death shows as its exit (SIGCHLD), not here, since our copy of its end
  // keeps the socket open.
  if (n <= 0) {
    loop_->RemoveFd(s.socket);
    close(s.socket);
    s.socket = -1;
    return;
  }
  const std::string message(buf, static_cast<size_t>(n));
  // A spare says one thing ("ready", or why it failed), then waits for its hand-over: the
  // socket is not read again, so a spare that repeats itself fills only its own socket buffer
  // (and the log holds one line per spare, not one per message).
  loop_->RemoveFd(s.socket);
  if (message == "ready") {
    s.ready = true;
    early_deaths_ = 0;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - s.started)
                        .count();
    LogInfo(absl::StrCat("preload: local rank ", lr, " spare (pid ", s.pid, ") ",
                         hook_ == SpareHook::kNativeProgram
                             ? "warmed up"
                             : absl::StrCat("imported ", absl::StrJoin(modules_, ",")),
                         " in ", ms, " ms"));
    return;
  }
  std::vector<std::string> parts = absl::StrSplit(message, '\0');
  if (parts.size() == 3 && parts[0] == "failed") {
    TurnOff(hook_ == SpareHook::kNativeProgram
                ? absl::StrCat("the spare's warm-up failed (", parts[1], "): ", parts[2])
                : absl::StrCat("cannot import ", parts[1], ": ", parts[2]));
  } else if (parts.size() == 3 && parts[0] == "cuda") {
    TurnOff(absl::StrCat("importing ", parts[1], " initialised CUDA before the hand-over (",
                         parts[2], ")"));
  }
}

absl::StatusOr<pid_t> SparePool::Launch(int lr, const SpawnRequest& request,
                                        HandOverReceipt* receipt) {
  workers_started_ = true;
  workers_settled_ = false;
  if (!active_ || lr < 0 || lr >= static_cast<int>(spares_.size()) || spares_[lr].pid <= 0 ||
      spares_[lr].socket < 0 || !SameCommand(templates_[lr], request)) {
    return Spawn(request);
  }
  Spare& s = spares_[lr];
  // A spare that has died is no worker; its exit is handled here rather than on SIGCHLD.
  int status = 0;
  if (waitpid(s.pid, &status, WNOHANG) == s.pid) {
    HandleChildExit(s.pid, status);
    return Spawn(request);
  }
  if (!RaiseIdleThreads(s.pid)) {
    // Its import would go on at idle priority, or its threads stay there: a cold start is
    // sooner and clean.
    return ColdInsteadOfSpare(lr, request,
                              absl::StrCat("preload: the spare of local rank ", lr,
                                           (s.ready ? " has threads" : " is still importing"),
                                           " at idle priority that ddprun may not raise (no "
                                           "CAP_SYS_NICE); starting this worker cold"));
  }
  std::string message = "start";
  message.push_back('\0');
  for (const auto& [key, value] : request.env) {
    absl::StrAppend(&message, key, "=", value);
    message.push_back('\0');
  }
  const pid_t pid = s.pid;
  if (SendWithFds(s.socket, message, {request.stdout_fd, request.stderr_fd}) !=
      static_cast<ssize_t>(message.size())) {
    return ColdInsteadOfSpare(lr, request,
                              absl::StrCat("preload: hand-over to the spare of local rank ", lr,
                                           " failed: ", strerror(errno), "; starting it cold"));
  }
  // The spare is the worker now: its process group goes to the worker group's care.
  if (guard_ != nullptr) guard_->Remove(pid);
  loop_->RemoveFd(s.socket);
  close(s.socket);
  if (receipt != nullptr) {
    *receipt = HandOverReceipt(s.spare_end);
  } else {
    close(s.spare_end);
  }
  s = Spare{};
  ++handed_over_;
  StartSpareLater(lr, kSettleAfterStart);
  return pid;
}

absl::StatusOr<pid_t> SparePool::ColdInsteadOfSpare(int lr, const SpawnRequest& request,
                                                    const std::string& why) {
  LogWarning(why);
  KillAndForget(&spares_[lr]);
  StartSpareLater(lr, kSettleAfterStart);
  return Spawn(request);
}

bool SparePool::HandleChildExit(pid_t pid, int wait_status) {
  if (pid == probe_) {
    probe_ = -1;
    const bool passed = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
    if (passed) {
      ActivateAndStartSpares();
    } else if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 3) {
      LogWarning(absl::StrCat("--preload: ", templates_[0].program,
                              " does not run sitecustomize (started with -E, -I or -S?); "
                              "workers start cold"));
    } else if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 4) {
      LogWarning(absl::StrCat("--preload: ", templates_[0].program,
                              " is older than Python 3.9; workers start cold"));
    } else {
      LogWarning(absl::StrCat("--preload: the probe of ", templates_[0].program, " ended with ",
                              DescribeExit(wait_status), "; workers start cold"));
    }
    return true;
  }
  for (int lr = 0; lr < static_cast<int>(spares_.size()); ++lr) {
    Spare& s = spares_[lr];
    if (s.pid != pid) continue;
    const bool was_ready = s.ready;
    Forget(&s);  // reaped: nothing left to kill
    if (guard_ != nullptr) guard_->Remove(pid);
    if (!active_) return true;
    if (!was_ready && ++early_deaths_ >= kMaxEarlyDeaths) {
      TurnOff(absl::StrCat(kMaxEarlyDeaths, " spares in a row died before they were ready (the ",
                           "last: local rank ", lr, ", ", DescribeExit(wait_status), ")"));
      return true;
    }
    LogWarning(absl::StrCat("preload: the spare of local rank ", lr, " (pid ", pid, ") ended (",
                            DescribeExit(wait_status), "); starting another"));
    StartSpareLater(lr, kRespawnDelay);
    return true;
  }
  return false;
}

void SparePool::ActivateAndStartSpares() {
  active_ = true;
  for (int lr = 0; lr < static_cast<int>(spares_.size()); ++lr) {
    const bool wait = workers_started_ && !workers_settled_;
    StartSpareLater(lr, wait ? kSettleAfterStart : std::chrono::milliseconds(0));
  }
}

void SparePool::Forget(Spare* s) {
  if (s->socket >= 0) {
    loop_->RemoveFd(s->socket);
    close(s->socket);
  }
  if (s->spare_end >= 0) close(s->spare_end);
  *s = Spare{};
}

void SparePool::KillAndForget(Spare* s) {
  const pid_t pid = s->pid;
  Forget(s);  // our end of the socket closes first
  if (pid > 0) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    if (guard_ != nullptr) guard_->Remove(pid);
  }
}

void SparePool::TurnOff(const std::string& why) {
  if (!active_) return;
  active_ = false;
  LogWarning(
      absl::StrCat("--preload=", WarmUpWhat(), ": ", why, "; workers start cold from now on"));
  for (Spare& s : spares_) KillAndForget(&s);
}

pid_t SparePool::SparePid(int lr) const {
  return lr >= 0 && lr < static_cast<int>(spares_.size()) ? spares_[lr].pid : -1;
}

std::set<pid_t> SparePool::OwnPids() const {
  std::set<pid_t> pids;
  for (const Spare& s : spares_) {
    if (s.pid > 0) pids.insert(s.pid);
  }
  if (probe_ > 0) pids.insert(probe_);
  return pids;
}

bool SparePool::SpareReady(int lr) const {
  return lr >= 0 && lr < static_cast<int>(spares_.size()) && spares_[lr].ready;
}

}  // namespace ddprun::launcher
