#include "launcher/store/store_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/tcp_listen.h"

namespace ddprun::launcher::store {

struct StoreServer::Connection {
  Connection(StoreState::ConnectionId id, int fd, const ProtocolLimits& limits)
      : id(id), fd(fd), decoder(limits) {}
  ~Connection() { close(fd); }
  const StoreState::ConnectionId id;
  const int fd;
  RequestDecoder decoder;
  std::string pending;  // replies not yet written
  size_t written = 0;   // of `pending`
  bool reading = true;  // false while its replies pile up (max_pending_reply)
  uint32_t watched = 0;
};

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(const StoreServerOptions& options) {
  absl::StatusOr<int> fd = ListenOnEveryAddress(options.port);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<StoreServer>(new StoreServer(*fd, BoundPort(*fd), options));
}

StoreServer::StoreServer(int listen_fd, int port, const StoreServerOptions& options)
    : options_(options), listen_fd_(listen_fd), port_(port) {
  rlimit files{};
  const rlim_t limit = getrlimit(RLIMIT_NOFILE, &files) == 0 ? files.rlim_cur : 1024;
  const rlim_t reserve = static_cast<rlim_t>(std::max(options.reserved_descriptors, 0));
  // At least a few: a job always has clients, whatever the limit says.
  max_connections_ = static_cast<size_t>(limit > reserve + 64 ? limit - reserve : 64);
  // Registered before the thread exists; from then on only the loop's thread touches it.
  loop_.AddFd(listen_fd_, EPOLLIN, [this](uint32_t) { Accept(); });
  thread_ = std::thread([this] { loop_.Run(); });
}

StoreServer::~StoreServer() {
  loop_.Stop();
  thread_.join();
  connections_.clear();
  close(listen_fd_);
}

void StoreServer::Clear() {
  std::promise<void> done;
  loop_.Post([this, &done] {
    state_.Clear();
    done.set_value();
  });
  done.get_future().wait();
}

void StoreServer::Accept() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: stop accepting for a moment rather than spin on the backlog.
        if (warnings_left_-- > 0) LogWarning(absl::StrCat("store: accept: ", strerror(errno)));
        loop_.RemoveFd(listen_fd_);
        loop_.AddTimerAfter(std::chrono::milliseconds(100), [this] {
          loop_.AddFd(listen_fd_, EPOLLIN, [this](uint32_t) { Accept(); });
        });
      }
      return;
    }
    if (connections_.size() >= max_connections_) {
      // Held connections must not take the descriptors the agent needs for its workers.
      close(fd);
      if (refused_++ == 0) {
        LogWarning(absl::StrCat("store: ", connections_.size(),
                                " connections open, the most this agent keeps (its descriptor "
                                "limit less ",
                                options_.reserved_descriptors,
                                " for its own use): further ones are closed at once"));
      }
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const StoreState::ConnectionId id = next_id_++;
    auto c = std::make_unique<Connection>(id, fd, options_.limits);
    Connection* raw = c.get();
    connections_[id] = std::move(c);
    Watch(raw);
  }
}

void StoreServer::Watch(Connection* c) {
  const uint32_t events =
      (c->reading ? EPOLLIN : 0u) | (c->written < c->pending.size() ? EPOLLOUT : 0u);
  if (events == c->watched) return;
  c->watched = events;
  const StoreState::ConnectionId id = c->id;
  loop_.AddFd(c->fd, events, [this, id](uint32_t ev) { OnEvents(id, ev); });
}

void StoreServer::Close(StoreState::ConnectionId id, const std::string& why) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  if (!why.empty() && warnings_left_-- > 0) {
    LogWarning(absl::StrCat("store: closing a client's connection: ", why));
  }
  loop_.RemoveFd(it->second->fd);
  state_.Forget(id);
  connections_.erase(it);
}

void StoreServer::OnEvents(StoreState::ConnectionId id, uint32_t events) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection* c = it->second.get();
  if ((events & EPOLLERR) != 0) return Close(id, "");
  if ((events & EPOLLOUT) != 0) {
    if (!Flush(c)) return Close(id, "");
    // Its replies were taken: serve what it sent meanwhile, and read again.
    if (!c->reading && c->pending.size() - c->written < options_.max_pending_reply && !Serve(c)) {
      return;
    }
  }
  if ((events & (EPOLLIN | EPOLLHUP)) != 0 && c->reading) {
    // A bounded number of reads per wake-up, so one busy client cannot starve the others.
    char buf[64 * 1024];
    for (int i = 0; i < 16 && c->reading; ++i) {
      const ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
      if (n == 0) return Close(id, "");  // the client is gone: its wait goes with it
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return Close(id, "");
      }
      c->decoder.Append(absl::string_view(buf, static_cast<size_t>(n)));
      if (!Serve(c)) return;
    }
  }
  Watch(c);
}

bool StoreServer::Serve(Connection* c) {
  const StoreState::ConnectionId id = c->id;
  std::vector<StoreState::Reply> replies;
  while (c->pending.size() - c->written < options_.max_pending_reply) {
    absl::StatusOr<std::optional<Request>> r = c->decoder.Next();
    if (!r.ok()) {
      Close(id, std::string(r.status().message()));
      return false;
    }
    if (!r->has_value()) break;
    replies.clear();
    if (absl::Status s = state_.Apply(id, **r, &replies); !s.ok()) {
      Close(id, std::string(s.message()));
      return false;
    }
    for (StoreState::Reply& reply : replies) {
      auto to = connections_.find(reply.to);
      if (to == connections_.end()) continue;
      Connection* dest = to->second.get();
      dest->pending += reply.bytes;
      if (dest != c && !Flush(dest)) {
        Close(dest->id, "");
      } else if (dest != c) {
        Watch(dest);
      }
    }
  }
  // Stop reading a client that does not take its replies; resumed when they are written.
  c->reading = c->pending.size() - c->written < options_.max_pending_reply;
  if (!Flush(c)) {
    Close(id, "");
    return false;
  }
  return true;
}

bool StoreServer::Flush(Connection* c) {
  while (c->written < c->pending.size()) {
    const ssize_t n = send(c->fd, c->pending.data() + c->written, c->pending.size() - c->written,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return false;
    }
    c->written += static_cast<size_t>(n);
  }
  if (c->written == c->pending.size()) {
    c->pending.clear();
    c->written = 0;
  } else if (c->written > 1024 * 1024) {
    c->pending.erase(0, c->written);
    c->written = 0;
  }
  return true;
}

}  // namespace ddprun::launcher::store
