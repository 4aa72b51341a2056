#include "launcher/workers/worker_group.h"

#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/file_text.h"
#include "common/log.h"
#include "launcher/process/proc_info.h"
#include "launcher/process/stack_text.h"

namespace ddprun::launcher {
namespace {

constexpr size_t kTailLines = 20;
// Most bytes read from one pipe per wake-up (and when draining an exited worker's pipe).
constexpr size_t kDrainLimit = 4 << 20;
// After SIGKILL, how long before a worker that has not exited (uninterruptible sleep in the
// kernel) is given up on, so that stopping stays bounded.
constexpr std::chrono::seconds kUnreapedGrace{2};
// How long native stack tools may run, all workers together.
constexpr std::chrono::seconds kStackToolDeadline{3};

int OpenLog(const std::string& path) {
  if (path.empty()) return -1;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
  if (fd < 0) LogWarning(absl::StrCat("cannot open log file ", path, ": ", strerror(errno)));
  return fd;
}

}  // namespace

WorkerGroup::WorkerGroup(EventLoop* loop, Listener* listener,
                         std::chrono::milliseconds stop_timeout, OrphanGuard* guard,
                         std::optional<StackTool> stack_tool, SparePool* spares)
    : loop_(loop),
      listener_(listener),
      stop_timeout_(stop_timeout),
      guard_(guard),
      spares_(spares),
      stacks_(loop, std::move(stack_tool), kStackToolDeadline) {}

WorkerGroup::~WorkerGroup() {
  for (auto& w : workers_) {
    if (w->running) {
      kill(-w->pid, SIGKILL);
      if (guard_ != nullptr) guard_->Remove(w->pid);
    }
    CloseStreams(w.get());
  }
  for (EventLoop::TimerId t : {kill_timer_, abandon_timer_, python_dump_timer_}) {
    if (t != 0) loop_->CancelTimer(t);
  }
}

namespace {

// ends[0] is read by the agent, ends[1] becomes the worker's stream: a pipe, or with `tty_of`
// >= 0 a pseudo-terminal (master, slave) sized like the terminal `tty_of`. The slave does no
// output processing (no "\n" -> "\r\n"): ddprun's own terminal does that once, so the bytes
// read are the bytes written, as through a pipe.
absl::Status OpenStream(int tty_of, int ends[2]) {
  if (tty_of < 0) {
    if (pipe2(ends, O_CLOEXEC) != 0) {
      return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
    }
    return absl::OkStatus();
  }
  struct winsize size {};
  const bool sized = ioctl(tty_of, TIOCGWINSZ, &size) == 0;
  if (openpty(&ends[0], &ends[1], nullptr, nullptr, sized ? &size : nullptr) != 0) {
    return absl::InternalError(absl::StrCat("openpty: ", strerror(errno)));
  }
  struct termios mode;
  if (tcgetattr(ends[1], &mode) == 0) {
    mode.c_oflag &= ~OPOST;
    tcsetattr(ends[1], TCSANOW, &mode);
  }
  fcntl(ends[0], F_SETFD, FD_CLOEXEC);
  fcntl(ends[1], F_SETFD, FD_CLOEXEC);
  return absl::OkStatus();
}

}  // namespace

void WorkerGroup::Start(std::vector<WorkerLaunch> launches) {
  for (auto& launch : launches) {
    if (const Worker* old = Find(launch.local_rank); old != nullptr) {
      if (old->running) {
        LogError(absl::StrCat("local rank ", launch.local_rank, " still has a worker (pid ",
                              old->pid, "); not starting another"));
        continue;
      }
      workers_.erase(std::find_if(workers_.begin(), workers_.end(),
                                  [old](const auto& w) { return w.get() == old; }));
    }
    auto w = std::make_unique<Worker>();
    w->local_rank = launch.local_rank;
    w->rank = launch.rank;
    w->stacks_path = launch.stacks_path;
    w->python = launch.python;
    int out_pipe[2], err_pipe[2];
    const absl::Status opened = OpenStream(launch.stdout_tty_of, out_pipe);
    const absl::Status opened_err =
        opened.ok() ? OpenStream(launch.stderr_tty_of, err_pipe) : absl::OkStatus();
    if (!opened.ok() || !opened_err.ok()) {
      w->start_error = std::string((opened.ok() ? opened_err : opened).message());
      if (opened.ok()) {
        close(out_pipe[0]);
        close(out_pipe[1]);
      }
    } else {
      launch.spawn.stdout_fd = out_pipe[1];
      launch.spawn.stderr_fd = err_pipe[1];
      auto pid = spares_ != nullptr
                     ? spares_->Launch(launch.local_rank, launch.spawn, &w->hand_over)
                     : Spawn(launch.spawn);
      close(out_pipe[1]);
      close(err_pipe[1]);
      w->out_fd = out_pipe[0];
      w->err_fd = err_pipe[0];
      fcntl(w->out_fd, F_SETFL, O_NONBLOCK);
      fcntl(w->err_fd, F_SETFL, O_NONBLOCK);
      if (pid.ok()) {
        w->pid = *pid;
        w->running = true;
        w->started = std::chrono::steady_clock::now();
        if (guard_ != nullptr) guard_->Add(w->pid);
      } else {
        w->start_error = std::string(pid.status().message());
      }
    }
    w->out_log = OpenLog(launch.stdout_log);
    w->err_log = OpenLog(launch.stderr_log);
    launch.stdout_config.log_fd = w->out_log;
    launch.stdout_config.log_path = launch.stdout_log;
    launch.stderr_config.log_fd = w->err_log;
    launch.stderr_config.log_path = launch.stderr_log;
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
      if (total == 0) {
        listener_->OnWorkerOutput(w->local_rank,
                                  fd == w->out_fd ? WorkerStream::kStdout : WorkerStream::kStderr);
      }
      total += static_cast<size_t>(n);
      // Bounded either way: one chatty worker must not starve the loop, and a grandchild
      // that keeps an exited worker's pipe open must not stall it.
      if (total < kDrainLimit) continue;
      ScheduleLineInProgress(w, stream);
      return;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      ScheduleLineInProgress(w, stream);
      return;
    }
    // EOF (or an error): every writer is gone.
    stream->Finish();
    loop_->RemoveFd(fd);
    close(fd);
    if (fd == w->out_fd) w->out_fd = -1;
    if (fd == w->err_fd) w->err_fd = -1;
    return;
  }
}

void WorkerGroup::ScheduleLineInProgress(Worker* w, OutputStream* stream) {
  EventLoop::TimerId* timer = stream == w->out.get() ? &w->out_flush : &w->err_flush;
  if (*timer != 0 || !stream->HasLineInProgress()) return;
  // From the first byte held, not the last: a bar redrawn faster than the delay still moves.
  *timer = loop_->AddTimerAfter(OutputStream::kLineInProgressDelay, [timer, stream] {
    *timer = 0;
    stream->FlushLineInProgress();
  });
}

void WorkerGroup::CloseStreams(Worker* w) {
  for (EventLoop::TimerId* timer : {&w->out_flush, &w->err_flush}) {
    if (*timer != 0) loop_->CancelTimer(*timer);
    *timer = 0;
  }
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

bool WorkerGroup::HandleChildExit(pid_t pid, int wait_status, const std::string& comm) {
  if (stacks_.HandleChildExit(pid)) return true;
  for (auto& w : workers_) {
    if (!w->running || w->pid != pid) continue;
    w->running = false;
    // First: an unread hand-over holds the write ends of the worker's pipes until settled.
    const HandOver hand_over = w->hand_over.Settle();
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
    exit.started = w->started;
    exit.signalled_by_agent = w->signalled;
    exit.comm = comm;
    if (WIFSIGNALED(wait_status)) {
      exit.signal = WTERMSIG(wait_status);
    } else {
      exit.exit_code = WEXITSTATUS(wait_status);
    }
    if (hand_over == HandOver::kUnread) exit.never_started = NeverStarted::kHandOverUnread;
    if (live() == 0) {
      for (EventLoop::TimerId* t : {&kill_timer_, &abandon_timer_}) {
        if (*t != 0) loop_->CancelTimer(*t);
        *t = 0;
      }
    }
    if (python_dump_timer_ != 0) {
      bool python_left = false;
      for (const auto& o : workers_) python_left |= o->running && o->python;
      if (!python_left) {
        loop_->CancelTimer(python_dump_timer_);
        python_dump_timer_ = 0;
        FinishStacks(pending_plan_);
      }
    }
    listener_->OnWorkerExited(exit);
    return true;
  }
  return false;
}

void WorkerGroup::SignalAll(int signal) {
  for (auto& w : workers_) {
    if (!w->running) continue;
    w->signalled = true;
    kill(-w->pid, signal);
  }
}

void WorkerGroup::Stop() {
  collecting_ = false;
  if (python_dump_timer_ != 0) {
    loop_->CancelTimer(python_dump_timer_);
    python_dump_timer_ = 0;
  }
  SignalAll(SIGTERM);
  if (kill_timer_ == 0 && live() > 0) {
    kill_timer_ = loop_->AddTimerAfter(stop_timeout_, [this] {
      kill_timer_ = 0;
      if (live() > 0) {
        LogWarning(absl::StrCat(live(), " worker(s) still running ",
                                std::chrono::duration<double>(stop_timeout_).count(),
                                " s after SIGTERM; sending SIGKILL"));
      }
      Kill();
    });
  }
}

void WorkerGroup::KillWorker(int local_rank) {
  Worker* w = Find(local_rank);
  if (w == nullptr || !w->running) return;
  w->signalled = true;
  kill(-w->pid, SIGKILL);
}

void WorkerGroup::Kill() {
  collecting_ = false;
  SignalAll(SIGKILL);
  if (abandon_timer_ == 0 && live() > 0) {
    abandon_timer_ = loop_->AddTimerAfter(kUnreapedGrace, [this] {
      abandon_timer_ = 0;
      GiveUpOnUnreaped();
    });
  }
}

void WorkerGroup::GiveUpOnUnreaped() {
  for (auto& w : workers_) {
    if (!w->running) continue;
    const char state = ProcessState(w->pid);
    LogWarning(absl::StrCat(
        "worker rank ", w->rank, " (pid ", w->pid, ") could not be reaped: still there ",
        kUnreapedGrace.count(), " s after SIGKILL (state ", std::string(1, state),
        state == 'D' ? ": uninterruptible sleep in the kernel" : "", "); going on without it"));
    w->running = false;
    CloseStreams(w.get());
    WorkerExit exit;
    exit.local_rank = w->local_rank;
    exit.rank = w->rank;
    exit.pid = w->pid;
    exit.signal = SIGKILL;
    exit.when = std::chrono::steady_clock::now();
    exit.started = w->started;
    exit.signalled_by_agent = true;
    listener_->OnWorkerExited(exit);
  }
}

int WorkerGroup::LocalRankOfWorker(pid_t pid) const {
  for (const auto& w : workers_) {
    if (w->running && w->pid == pid) return w->local_rank;
  }
  return -1;
}

int WorkerGroup::LocalRankOfPid(pid_t pid) const {
  if (const int lr = LocalRankOfWorker(pid); lr >= 0) return lr;
  const pid_t group = getpgid(pid);  // a worker's child (each worker leads its own group)
  for (const auto& w : workers_) {
    if (w->running && group == w->pid) return w->local_rank;
  }
  return -1;
}

int WorkerGroup::LocalRankOfDescendant(pid_t pid) const {
  // Deep enough for any wrapper chain; bounds the walk whatever /proc says.
  constexpr int kMaxDepth = 64;
  const pid_t self = getpid();
  for (int depth = 0; depth < kMaxDepth && pid > 1 && pid != self; ++depth) {
    if (const int lr = LocalRankOfWorker(pid); lr >= 0) return lr;
    pid = ParentOf(pid);
  }
  return -1;
}

std::string WorkerGroup::StacksPath(int local_rank) const {
  const Worker* w = Find(local_rank);
  return w != nullptr && w->stacks_written ? w->stacks_path : "";
}

std::vector<std::string> WorkerGroup::InnermostFrames(int local_rank, size_t n) const {
  const std::string path = StacksPath(local_rank);
  if (path.empty()) return {};
  return launcher::InnermostFrames(ReadTextFile(path), n);
}

std::vector<std::pair<int, char>> WorkerGroup::ProcessStates() const {
  std::vector<std::pair<int, char>> out;
  for (const auto& w : workers_) {
    if (w->running) out.emplace_back(w->local_rank, ProcessState(w->pid));
  }
  return out;
}

std::vector<pid_t> WorkerGroup::LivePids() const {
  std::vector<pid_t> pids;
  for (const auto& w : workers_) {
    if (w->running) pids.push_back(w->pid);
  }
  return pids;
}

pid_t WorkerGroup::Pid(int local_rank) const {
  const Worker* w = Find(local_rank);
  return w != nullptr ? w->pid : -1;
}

}  // namespace ddprun::launcher
