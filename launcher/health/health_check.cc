#include "launcher/health/health_check.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <csignal>
#include <utility>

#include "absl/strings/str_cat.h"
#include "launcher/process/spawn.h"
#include "launcher/workers/output_stream.h"

namespace ddprun::launcher {

HealthCheck::HealthCheck(EventLoop* loop, HealthCheckOptions options)
    : loop_(loop), options_(std::move(options)) {}

HealthCheck::~HealthCheck() {
  if (pid_ > 0) kill(-pid_, SIGKILL);
  if (timer_ != 0) loop_->CancelTimer(timer_);
  CloseOutput();
}

bool HealthCheck::Run(std::function<void(const HealthVerdict&)> done) {
  if (running()) return false;
  done_ = std::move(done);
  timed_out_ = false;
  started_ = std::chrono::steady_clock::now();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    HealthVerdict v;
    v.outcome = HealthVerdict::Outcome::kCannotRun;
    v.tail = {absl::StrCat("pipe: ", strerror(errno))};
    loop_->Post([this, v] { Finish(v); });
    return true;
  }
  SpawnRequest req;
  req.program = "/bin/sh";
  req.argv = {"sh", "-c", options_.command};
  req.env = options_.env;
  req.stdout_fd = fds[1];
  req.stderr_fd = fds[1];
  absl::StatusOr<pid_t> pid = Spawn(req);
  close(fds[1]);
  if (!pid.ok()) {
    close(fds[0]);
    HealthVerdict v;
    v.outcome = HealthVerdict::Outcome::kCannotRun;
    v.tail = {std::string(pid.status().message())};
    loop_->Post([this, v] { Finish(v); });
    return true;
  }
  pid_ = *pid;
  out_fd_ = fds[0];
  fcntl(out_fd_, F_SETFL, fcntl(out_fd_, F_GETFL) | O_NONBLOCK);
  OutputStream::Config tail;
  tail.tail_lines = options_.tail_lines;
  output_ = std::make_unique<OutputStream>(tail);
  loop_->AddFd(out_fd_, EPOLLIN, [this](uint32_t) { ReadOutput(); });
  timer_ = loop_->AddTimerAfter(options_.timeout, [this] {
    timer_ = 0;
    if (pid_ <= 0) return;
    timed_out_ = true;
    kill(-pid_, SIGKILL);  // its exit arrives through SIGCHLD like any other
  });
  return true;
}

void HealthCheck::ReadOutput() {
  if (out_fd_ < 0) return;
  char buf[64 * 1024];
  while (true) {
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n > 0) {
      output_->Feed(absl::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) CloseOutput();  // end of output; the exit may still be on its way
    return;                     // EAGAIN: nothing more for now
  }
}

void HealthCheck::CloseOutput() {
  if (out_fd_ < 0) return;
  loop_->RemoveFd(out_fd_);
  close(out_fd_);
  out_fd_ = -1;
}

bool HealthCheck::HandleChildExit(pid_t pid, int wait_status) {
  if (pid <= 0 || pid != pid_) return false;
  // Whatever it started goes with it; what they wrote before is still in the pipe.
  kill(-pid_, SIGKILL);
  pid_ = 0;
  if (timer_ != 0) loop_->CancelTimer(timer_);
  timer_ = 0;
  ReadOutput();
  HealthVerdict v = VerdictFromStatus(wait_status, std::chrono::steady_clock::now() - started_);
  if (timed_out_) v.outcome = HealthVerdict::Outcome::kTimedOut;
  Finish(std::move(v));
  return true;
}

void HealthCheck::Finish(HealthVerdict verdict) {
  CloseOutput();
  if (output_ != nullptr && verdict.tail.empty()) {
    output_->Finish();
    for (std::string& line : output_->Tail()) {
      if (line.size() > HealthVerdict::kMaxLineBytes) {
        line = absl::StrCat(line.substr(0, HealthVerdict::kMaxLineBytes), "...");
      }
      verdict.tail.push_back(std::move(line));
    }
  }
  output_.reset();
  if (done_) std::exchange(done_, nullptr)(verdict);
}

}  // namespace ddprun::launcher
