#include "launcher/control/control_server.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace ddprun::launcher {
namespace {

// Most bytes read from one connection per wake-up: a flooding worker cannot starve the loop.
constexpr size_t kReadLimit = 64 << 10;
// Connections closed before their hello that are logged, per owner.
constexpr int64_t kLoggedClosesPerOwner = 5;

}  // namespace

absl::StatusOr<std::unique_ptr<ControlServer>> ControlServer::Listen(
    EventLoop* loop, const std::string& path, Listener* listener,
    std::chrono::milliseconds hello_timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("control socket ", path, ": longer than ", sizeof(addr.sun_path) - 1,
                     " bytes (a Unix socket path limit); set TMPDIR to a shorter directory"));
  }
  memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  unlink(path.c_str());
  // Only this user may connect; the directory is private too.
  const mode_t old_mask = umask(0177);
  const int bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  umask(old_mask);
  if (bound != 0 || listen(fd, SOMAXCONN) != 0) {
    const int err = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("control socket ", path, ": ", strerror(err)));
  }
  return std::unique_ptr<ControlServer>(new ControlServer(loop, path, fd, listener, hello_timeout));
}

ControlServer::ControlServer(EventLoop* loop, std::string path, int listen_fd, Listener* listener,
                             std::chrono::milliseconds hello_timeout)
    : loop_(loop),
      path_(std::move(path)),
      listen_fd_(listen_fd),
      listener_(listener),
      hello_timeout_(hello_timeout) {
  loop_->AddFd(listen_fd_, EPOLLIN, [this](uint32_t) { Accept(); });
}

ControlServer::~ControlServer() {
  int64_t refused = 0, closed = 0;
  for (const auto& [owner, n] : refused_) refused += n;
  for (const auto& [owner, n] : unidentified_closed_)
    closed += std::max<int64_t>(0, n - kLoggedClosesPerOwner);
  if (refused > 1 || closed > 0) {
    LogWarning(absl::StrCat("control socket: in all ", refused,
                            " connection(s) refused over the limit without a hello, ", closed,
                            " more closed before a hello than were logged"));
  }
  while (!connections_.empty()) Close(connections_.begin()->second.get(), "");
  loop_->RemoveFd(listen_fd_);
  close(listen_fd_);
  unlink(path_.c_str());
}

std::string ControlServer::Who(const Connection* c) const {
  return c->local_rank >= 0 ? absl::StrCat("local rank ", c->local_rank)
                            : absl::StrCat("an unidentified connection (fd ", c->fd, ")");
}

void ControlServer::Accept() {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN) LogWarning(absl::StrCat("control socket: accept: ", strerror(errno)));
      return;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    const pid_t owner = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0
                            ? listener_->WorkerOf(cred.pid)
                            : 0;
    if (!MayWaitForHello(owner)) {
      close(fd);
      continue;
    }
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->owner = owner;
    c->refilled = std::chrono::steady_clock::now();
    Connection* raw = c.get();
    connections_[fd] = std::move(c);
    raw->hello_timer = loop_->AddTimerAfter(hello_timeout_, [this, fd] {
      auto it = connections_.find(fd);
      if (it == connections_.end()) return;
      it->second->hello_timer = 0;
      if (it->second->local_rank < 0) {
        Close(it->second.get(), absl::StrCat("no hello within ",
                                             std::chrono::duration<double>(hello_timeout_).count(),
                                             " s of connecting"));
      }
    });
    loop_->AddFd(fd, EPOLLIN, [this, raw](uint32_t) { Read(raw); });
  }
}

bool ControlServer::MayWaitForHello(pid_t owner) {
  int pending = 0;
  for (const auto& [fd, c] : connections_) pending += c->local_rank < 0 && c->owner == owner;
  const int limit = owner > 0 ? kMaxPendingPerWorker : kMaxPendingOutsideWorkers;
  if (pending < limit) return true;
  // Bounded: one entry per worker process the agent started, and one for the rest.
  if (refused_[owner]++ == 0) {
    LogWarning(absl::StrCat("control socket: over ", limit, " connections without a hello from ",
                            owner > 0 ? absl::StrCat("the process tree of worker pid ", owner)
                                      : "processes outside every worker",
                            "; refusing more (counted, not logged)"));
  }
  return false;
}

bool ControlServer::TakeToken(Connection* c) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - c->refilled).count();
  c->refilled = now;
  c->tokens = std::min<double>(kMessageBurst, c->tokens + elapsed * kMessagesPerSecond);
  if (c->tokens < 1) return false;
  c->tokens -= 1;
  return true;
}

void ControlServer::Read(Connection* c) {
  char chunk[4096];
  size_t total = 0;
  while (total < kReadLimit) {
    const ssize_t n = recv(c->fd, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      // EOF: the worker closed its channel or exited. Its exit is learnt from SIGCHLD.
      Close(c, "");
      return;
    }
    total += static_cast<size_t>(n);
    c->buffer.append(chunk, static_cast<size_t>(n));
    size_t nl;
    while ((nl = c->buffer.find('\n')) != std::string::npos) {
      std::string line = c->buffer.substr(0, nl);
      c->buffer.erase(0, nl + 1);
      if (!HandleLine(c, line)) return;
    }
    if (c->buffer.size() > control::kMaxControlLineBytes) {
      Close(c, absl::StrCat("a line over ", control::kMaxControlLineBytes, " bytes"));
      return;
    }
  }
}

bool ControlServer::HandleLine(Connection* c, const std::string& line) {
  if (!TakeToken(c)) {
    Close(c, absl::StrCat("over ", kMessageBurst, " messages at more than ", kMessagesPerSecond,
                          " a second (a flood)"));
    return false;
  }
  absl::StatusOr<control::ControlMessage> message = control::ParseControlMessage(line);
  if (!message.ok()) {
    Close(c, absl::StrCat("a bad message (", message.status().message(), "): '",
                          absl::CHexEscape(line.substr(0, 80)), "'"));
    return false;
  }
  if (auto* hello = std::get_if<control::HelloMessage>(&*message)) {
    if (c->local_rank >= 0) {
      Close(c, "a second hello");
      return false;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      Close(c, absl::StrCat("SO_PEERCRED: ", strerror(errno)));
      return false;
    }
    if (hello->version != control::kControlProtocolVersion) {
      Close(c, absl::StrCat("protocol version ", hello->version, " (this ddprun speaks ",
                            control::kControlProtocolVersion, ")"));
      return false;
    }
    if (std::string why = listener_->CheckHello(*hello, cred.pid); !why.empty()) {
      Close(c, absl::StrCat("hello refused: ", why));
      return false;
    }
    if (auto old = by_rank_.find(hello->local_rank); old != by_rank_.end()) {
      Close(old->second, "");  // the rank's earlier channel (a worker it replaced)
    }
    c->local_rank = hello->local_rank;
    by_rank_[c->local_rank] = c;
    if (c->hello_timer != 0) loop_->CancelTimer(c->hello_timer);
    c->hello_timer = 0;
    // The listener may close the connection (a failed Send, Disconnect), which deletes `c`:
    // only the saved fd may be looked at afterwards.
    const int fd = c->fd;
    listener_->OnHello(c->local_rank);
    return connections_.count(fd) > 0;
  }
  if (c->local_rank < 0) {
    Close(c, "a message before its hello");
    return false;
  }
  if (auto* ready = std::get_if<control::ReadyMessage>(&*message)) {
    const int fd = c->fd;
    listener_->OnReady(c->local_rank, *ready);
    return connections_.count(fd) > 0;
  }
  Close(c, "a message only the agent sends");
  return false;
}

bool ControlServer::Send(int local_rank, const control::ControlMessage& message) {
  auto it = by_rank_.find(local_rank);
  if (it == by_rank_.end()) return false;
  Connection* c = it->second;
  const std::string line = absl::StrCat(control::EncodeControlMessage(message), "\n");
  const ssize_t n = send(c->fd, line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n == static_cast<ssize_t>(line.size())) return true;
  // Messages are a few hundred bytes and rare: a socket buffer too full to take one belongs to
  // a worker that stopped reading its channel.
  Close(c, n < 0 ? absl::StrCat("send: ", strerror(errno))
                 : "its socket buffer is full (it does not read its channel)");
  return false;
}

void ControlServer::Disconnect(int local_rank) {
  auto it = by_rank_.find(local_rank);
  if (it != by_rank_.end()) Close(it->second, "");
}

void ControlServer::Close(Connection* c, const std::string& why) {
  if (!why.empty() && c->local_rank < 0) {
    // A connection that never became a channel can be made again at once: the first few per
    // owner are logged, the rest counted (the destructor says how many).
    const int64_t n = ++unidentified_closed_[c->owner];
    if (n <= kLoggedClosesPerOwner) {
      LogWarning(absl::StrCat("control channel of ", Who(c), " closed: ", why,
                              n == kLoggedClosesPerOwner
                                  ? "; further ones from the same process tree counted, not logged"
                                  : ""));
    }
  } else if (!why.empty()) {
    LogWarning(absl::StrCat("control channel of ", Who(c), " closed: ", why));
  }
  if (c->local_rank >= 0) {
    auto it = by_rank_.find(c->local_rank);
    if (it != by_rank_.end() && it->second == c) by_rank_.erase(it);
  }
  if (c->hello_timer != 0) loop_->CancelTimer(c->hello_timer);
  loop_->RemoveFd(c->fd);
  const int fd = c->fd;
  const int broken_rank = why.empty() ? -1 : c->local_rank;
  connections_.erase(fd);  // deletes c
  // The listener hears of it before the peer sees the end of its channel: whoever waits for
  // that end finds the agent's reaction (the worker's replacement) already under way.
  if (broken_rank >= 0) listener_->OnChannelBroken(broken_rank, why);
  close(fd);
}

}  // namespace ddprun::launcher
