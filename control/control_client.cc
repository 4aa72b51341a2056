#include "control/control_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ddprun::control {
namespace {

absl::Status WriteLine(int fd, const std::string& line) {
  std::string data = absl::StrCat(line, "\n");
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::UnavailableError(absl::StrCat("control channel: send: ", strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControlClient>> ControlClient::Connect(
    const std::string& socket_path, int local_rank, absl::Duration timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kControlSocketEnv, "=", socket_path, ": not a usable socket path"));
  }
  memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat(kControlSocketEnv, "=", socket_path, ": connect: ", strerror(err)));
  }
  std::unique_ptr<ControlClient> client(new ControlClient(fd));
  HelloMessage hello;
  hello.local_rank = local_rank;
  hello.pid = getpid();
  hello.advice = true;
  if (absl::Status s = WriteLine(fd, EncodeControlMessage(hello)); !s.ok()) return s;
  absl::StatusOr<RoundMessage> first = client->WaitForRound(-1, timeout);
  if (!first.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "control channel ", socket_path, ": no round from the agent: ", first.status().message()));
  }
  return client;
}

ControlClient::ControlClient(int fd) : fd_(fd) {
  reader_ = std::thread([this] { ReadLoop(); });
}

ControlClient::~ControlClient() {
  shutdown(fd_, SHUT_RDWR);  // wakes the reader
  reader_.join();
  close(fd_);
}

void ControlClient::ReadLoop() {
  std::string buffer;
  char chunk[4096];
  std::string why = "the agent closed the control channel";
  while (true) {
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n < 0) why = absl::StrCat("control channel: recv: ", strerror(errno));
      break;
    }
    buffer.append(chunk, static_cast<size_t>(n));
    size_t nl;
    bool bad = false;
    while ((nl = buffer.find('\n')) != std::string::npos) {
      absl::StatusOr<ControlMessage> m = ParseControlMessage(absl::string_view(buffer.data(), nl));
      buffer.erase(0, nl + 1);
      std::function<void()> wakeup;
      {
        absl::MutexLock lock(&mu_);
        if (!m.ok()) {
          why =
              absl::StrCat("control channel: a bad message from the agent: ", m.status().message());
          bad = true;
          break;
        }
        if (auto* r = std::get_if<RoundMessage>(&*m)) {
          if (!round_.has_value() || r->round > round_->round) round_ = *r;  // stale: ignored
        } else if (auto* a = std::get_if<AbortMessage>(&*m)) {
          if (a->round > aborted_round_) {
            aborted_round_ = a->round;
            abort_reason_ = a->reason;
          }
        } else if (auto* advice = std::get_if<AdviceMessage>(&*m)) {
          checkpoint_advice_s_ = advice->checkpoint_interval_s;
        }
        wakeup = wakeup_;
      }
      if (wakeup) wakeup();
    }
    if (bad) break;
    if (buffer.size() > kMaxControlLineBytes) {
      why = "control channel: a line over the size limit from the agent";
      break;
    }
  }
  std::function<void()> wakeup;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    close_reason_ = why;
    wakeup = wakeup_;
  }
  if (wakeup) wakeup();
}

RoundMessage ControlClient::current_round() const {
  absl::MutexLock lock(&mu_);
  return round_.value_or(RoundMessage{});
}

bool ControlClient::RoundOver(int64_t round) const {
  absl::MutexLock lock(&mu_);
  return closed_ || aborted_round_ >= round || (round_.has_value() && round_->round > round);
}

absl::StatusOr<RoundMessage> ControlClient::WaitForRound(int64_t after, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto arrived = [this, after]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || (round_.has_value() && round_->round > after);
  };
  mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout);
  if (round_.has_value() && round_->round > after) return *round_;
  if (closed_) return absl::UnavailableError(close_reason_);
  return absl::DeadlineExceededError(
      absl::StrCat("no new round from the agent within ", absl::FormatDuration(timeout)));
}

bool ControlClient::WaitRoundOver(int64_t round, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto over = [this, round]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || aborted_round_ >= round || (round_.has_value() && round_->round > round);
  };
  return mu_.AwaitWithTimeout(absl::Condition(&over), timeout);
}

void ControlClient::SetWakeup(std::function<void()> wakeup) {
  absl::MutexLock lock(&mu_);
  wakeup_ = std::move(wakeup);
}

absl::Status ControlClient::SendReady(int64_t round, int64_t step) {
  ReadyMessage ready;
  ready.round = round;
  ready.step = step;
  absl::MutexLock lock(&write_mu_);
  return WriteLine(fd_, EncodeControlMessage(ready));
}

std::optional<double> ControlClient::checkpoint_advice() const {
  absl::MutexLock lock(&mu_);
  return checkpoint_advice_s_;
}

std::string ControlClient::abort_reason() const {
  absl::MutexLock lock(&mu_);
  return abort_reason_;
}

}  // namespace ddprun::control
