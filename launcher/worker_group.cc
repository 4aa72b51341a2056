#include "launcher/worker_group.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace ddprun::launcher {
namespace {

constexpr size_t kTailLines = 20;
// Most bytes read from one pipe per wake-up (and when draining an exited worker's pipe).
constexpr size_t kDrainLimit = 4 << 20;

int OpenLog(const std::string& path) {
  if (path.empty()) return -1;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
  if (fd < 0) LogWarning(absl::StrCat("cannot open log file ", path, ": ", strerror(errno)));
  return fd;
}

}  // namespace

WorkerGroup::WorkerGroup(EventLoop* loop, Listener* listener,
                         std::chrono::milliseconds stop_timeout, OrphanGuard* guard)
    : loop_(loop), listener_(listener), stop_timeout_(stop_timeout), guard_(guard) {}

WorkerGroup::~WorkerGroup() {
  for (auto& w : workers_) {
    if (w->running) {
      kill(-w->pid, SIGKILL);
      if (guard_ != nullptr) guard_->Remove(w->pid);
    }
    CloseStreams(w.get());
  }
  if (kill_timer_ != 0) loop_->CancelTimer(kill_timer_);
}

void WorkerGroup::Start(std::vector<WorkerLaunch> launches) {
  for (auto& launch : launches) {
    auto w = std::make_unique<Worker>();
    w->local_rank = launch.local_rank;
    w->rank = launch.rank;
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
      w->start_error = absl::StrCat("pipe2: ", strerror(errno));
    } else {
      launch.spawn.stdout_fd = out_pipe[1];
      launch.spawn.stderr_fd = err_pipe[1];
      auto pid = Spawn(launch.spawn);
      close(out_pipe[1]);
      close(err_pipe[1]);
      w->out_fd = out_pipe[0];
      w->err_fd = err_pipe[0];
      fcntl(w->out_fd, F_SETFL, O_NONBLOCK);
      fcntl(w->err_fd, F_SETFL, O_NONBLOCK);
      if (pid.ok()) {
        w->pid = *pid;
        w->running = true;
        if (guard_ != nullptr) guard_->Add(w->pid);
      } else {
        w->start_error = std::string(pid.status().message());
      }
    }
    w->out_log = OpenLog(launch.stdout_log);
    w->err_log = OpenLog(launch.stderr_log);
    launch.stdout_config.log_fd = w->out_log;
    launch.stderr_config.log_fd = w->err_log;
    launch.stderr_config.tail_lines = kTailLines;
    w->out = std::make_unique<OutputStream>(launch.stdout_config);
    w->err = std::make_unique<OutputStream>(launch.stderr_config);
    Worker* raw = w.get();
    if (raw->running) {
      loop_->AddFd(raw->out_fd, EPOLLIN,
                   [this, raw](uint32_t) { Pump(raw, raw->out_fd, raw->out.get()); });
      loop_->AddFd(raw->err_fd, EPOLLIN,
                   [this, raw](uint32_t) { Pump(raw, raw->err_fd, raw->err.get()); });
    } else {
      CloseStreams(raw);
      WorkerExit exit;
      exit.local_rank = raw->local_rank;
      exit.rank = raw->rank;
      exit.exit_code = 127;
      exit.when = std::chrono::steady_clock::now();
      loop_->Post([this, exit] { listener_->OnWorkerExited(exit); });
    }
    workers_.push_back(std::move(w));
  }
}

void WorkerGroup::Pump(Worker* w, int fd, OutputStream* stream) {
  char buf[65536];
  size_t total = 0;
  while (fd >= 0) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      stream->Feed(absl::string_view(buf, static_cast<size_t>(n)));
      total += static_cast<size_t>(n);
      // Bounded either way: one chatty worker must not starve the loop, and a grandchild
      // that keeps an exited worker's pipe open must not stall it.
      if (total < kDrainLimit) continue;
      return;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    // EOF (or an error): every writer is gone.
    stream->Finish();
    loop_->RemoveFd(fd);
    close(fd);
    if (fd == w->out_fd) w->out_fd = -1;
    if (fd == w->err_fd) w->err_fd = -1;
    return;
  }
}

void WorkerGroup::CloseStreams(Worker* w) {
  for (int* fd : {&w->out_fd, &w->err_fd}) {
    if (*fd >= 0) {
      loop_->RemoveFd(*fd);
      close(*fd);
      *fd = -1;
    }
  }
  if (w->out) w->out->Finish();
  if (w->err) w->err->Finish();
  for (int* fd : {&w->out_log, &w->err_log}) {
    if (*fd >= 0) {
      close(*fd);
      *fd = -1;
    }
  }
}

bool WorkerGroup::HandleChildExit(pid_t pid, int wait_status) {
  for (auto& w : workers_) {
    if (!w->running || w->pid != pid) continue;
    w->running = false;
    // Anything else in the worker's process group (its own children) goes with it.
    kill(-pid, SIGKILL);
    if (guard_ != nullptr) guard_->Remove(pid);
    // Forward what the worker wrote before it exited, before anyone reads the tail.
    Pump(w.get(), w->out_fd, w->out.get());
    Pump(w.get(), w->err_fd, w->err.get());
    CloseStreams(w.get());
    WorkerExit exit;
    exit.local_rank = w->local_rank;
    exit.rank = w->rank;
    exit.pid = pid;
    exit.when = std::chrono::steady_clock::now();
    if (WIFSIGNALED(wait_status)) {
      exit.signal = WTERMSIG(wait_status);
    } else {
      exit.exit_code = WEXITSTATUS(wait_status);
    }
    if (live() == 0 && kill_timer_ != 0) {
      loop_->CancelTimer(kill_timer_);
      kill_timer_ = 0;
    }
    listener_->OnWorkerExited(exit);
    return true;
  }
  return false;
}

void WorkerGroup::SignalAll(int signal) {
  for (auto& w : workers_) {
    if (w->running) kill(-w->pid, signal);
  }
}

void WorkerGroup::Stop() {
  SignalAll(SIGTERM);
  if (kill_timer_ == 0 && live() > 0) {
    kill_timer_ = loop_->AddTimerAfter(stop_timeout_, [this] {
      kill_timer_ = 0;
      if (live() > 0) {
        LogWarning(absl::StrCat(live(), " worker(s) still running ",
                                std::chrono::duration<double>(stop_timeout_).count(),
                                " s after SIGTERM; sending SIGKILL"));
      }
      SignalAll(SIGKILL);
    });
  }
}

void WorkerGroup::Kill() { SignalAll(SIGKILL); }

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

pid_t WorkerGroup::Pid(int local_rank) const {
  const Worker* w = Find(local_rank);
  return w != nullptr ? w->pid : -1;
}

}  // namespace ddprun::launcher
