#include "rendezvous/grpc/connection_acceptor.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/tcp_listen.h"

namespace ddprun::rendezvous {
namespace {

// Connections taken per wake-up before the loop looks at its other work.
constexpr int kAcceptBatch = 64;

std::string ErrnoText(int err) { return std::strerror(err); }

int SoftFdLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  return limit.rlim_cur == RLIM_INFINITY ? -1 : static_cast<int>(limit.rlim_cur);
}

// The budget's bounds from the options and the process's descriptor limit.
ConnectionBudgetOptions BudgetOptions(const AcceptorOptions& options) {
  const int limit = SoftFdLimit() < 0 ? (1 << 20) : SoftFdLimit();
  const int headroom = options.descriptor_headroom > 0 ? options.descriptor_headroom
                                                       : std::clamp(limit / 8, 16, 1024);
  ConnectionBudgetOptions budget;
  budget.window = options.handshake_window;
  budget.max_new_per_source = options.max_handshaking_per_address;
  budget.max_open_total = std::max(1, limit - headroom);
  budget.max_open_per_source = options.max_connections_per_address > 0
                                   ? options.max_connections_per_address
                                   : std::max(1, budget.max_open_total / 2);
  return budget;
}

// Whether descriptor `fd` still holds the socket of inode `inode` (gRPC closes the connections
// it was handed without telling; a reused number holds another file).
bool StillOpen(int fd, uint64_t inode) {
  struct stat st {};
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && static_cast<uint64_t>(st.st_ino) == inode;
}

// The budget's key for a peer: its IPv4 address (also when mapped into IPv6), else its IPv6
// /64 (one host may hold a whole /64); and the same as text for the log.
void SourceOf(const sockaddr_storage& peer, std::string* key, std::string* text) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&peer);
    key->assign(reinterpret_cast<const char*>(&in->sin_addr), 4);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    *text = buf;
    return;
  }
  if (peer.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&peer);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      key->assign(reinterpret_cast<const char*>(&in6->sin6_addr) + 12, 4);
      inet_ntop(AF_INET, reinterpret_cast<const char*>(&in6->sin6_addr) + 12, buf, sizeof(buf));
      *text = buf;
      return;
    }
    in6_addr prefix = in6->sin6_addr;
    std::memset(reinterpret_cast<char*>(&prefix) + 8, 0, 8);
    key->assign(reinterpret_cast<const char*>(&prefix), 16);
    inet_ntop(AF_INET6, &prefix, buf, sizeof(buf));
    *text = absl::StrCat(buf, "/64");
    return;
  }
  key->clear();  // another family (none is listened on): one source
  *text = "an unknown address";
}

const char* RefusalReason(ConnectionBudget::Verdict verdict) {
  switch (verdict) {
    case ConnectionBudget::Verdict::kTooManyNew:
      return "its limit of new connections within the handshake timeout";
    case ConnectionBudget::Verdict::kTooManyOpen:
      return "its limit of open connections";
    case ConnectionBudget::Verdict::kOverFairShare:
      return "its fair share of the descriptors left for connections";
    case ConnectionBudget::Verdict::kKeep:
      break;
  }
  return "";
}

// A listening socket on `addr`, or -errno. `dual_stack`: an IPv6 wildcard that takes IPv4 too.
int ListenOn(const sockaddr* addr, socklen_t len, bool dual_stack) {
  const int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  const int one = 1, zero = 0;
  // As gRPC's listener: a restarted server rebinds a port whose old connections linger in
  // TIME_WAIT. Not SO_REUSEPORT: a second server on the port must fail (the agent relies on it).
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (addr->sa_family == AF_INET6) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, dual_stack ? &zero : &one, sizeof(int));
  }
  if (bind(fd, addr, len) != 0 || listen(fd, SOMAXCONN) != 0) {
    const int err = errno;
    close(fd);
    return -err;
  }
  return fd;
}

void SetPort(sockaddr* addr, int port) {
  if (addr->sa_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(addr)->sin6_port = htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in*>(addr)->sin_port = htons(static_cast<uint16_t>(port));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConnectionAcceptor>> ConnectionAcceptor::Listen(
    const std::string& host, int port, const AcceptorOptions& options) {
  std::unique_ptr<ConnectionAcceptor> acceptor(new ConnectionAcceptor());
  acceptor->options_ = options;
  const std::string where = FormatHostPort(host, port);
  auto cannot = [&](int err) {
    for (int fd : acceptor->listen_fds_) close(fd);
    acceptor->listen_fds_.clear();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", where, ": ", ErrnoText(err)));
  };
  if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]") {
    // gRPC's wildcard: [::] taking IPv4 as well, or 0.0.0.0 where the host has no IPv6.
    sockaddr_in6 any6{};
    any6.sin6_family = AF_INET6;
    any6.sin6_addr = in6addr_any;
    any6.sin6_port = htons(static_cast<uint16_t>(port));
    int fd = ListenOn(reinterpret_cast<sockaddr*>(&any6), sizeof(any6), /*dual_stack=*/true);
    if (fd == -EAFNOSUPPORT || fd == -EADDRNOTAVAIL) {
      sockaddr_in any4{};
      any4.sin_family = AF_INET;
      any4.sin_addr.s_addr = htonl(INADDR_ANY);
      any4.sin_port = htons(static_cast<uint16_t>(port));
      fd = ListenOn(reinterpret_cast<sockaddr*>(&any4), sizeof(any4), false);
    }
    if (fd < 0) return cannot(-fd);
    acceptor->listen_fds_.push_back(fd);
  } else {
    std::string name = host;
    if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
      name = name.substr(1, name.size() - 2);
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &found);
    if (rc != 0) {
      const std::string text = absl::StrCat("cannot listen on ", where, ": ", gai_strerror(rc));
      return rc == EAI_AGAIN ? absl::UnavailableError(text) : absl::InvalidArgumentError(text);
    }
    int chosen_port = port;
    int last_error = EADDRNOTAVAIL;
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      sockaddr_storage addr{};
      std::memcpy(&addr, a->ai_addr, a->ai_addrlen);
      SetPort(reinterpret_cast<sockaddr*>(&addr), chosen_port);
      const int fd = ListenOn(reinterpret_cast<sockaddr*>(&addr), a->ai_addrlen, false);
      if (fd == -EADDRINUSE) {
        freeaddrinfo(found);
        return cannot(EADDRINUSE);
      }
      if (fd < 0) {  // an address family this host lacks (::1 without IPv6): the others serve
        last_error = -fd;
        continue;
      }
      // Every address of the name on one port, the one the first bind picked.
      if (chosen_port == 0) chosen_port = BoundPort(fd);
      acceptor->listen_fds_.push_back(fd);
    }
    freeaddrinfo(found);
    if (acceptor->listen_fds_.empty()) return cannot(last_error);
  }
  acceptor->port_ = BoundPort(acceptor->listen_fds_.front());
  acceptor->name_ = FormatHostPort(host, acceptor->port_);
  return acceptor;
}

ConnectionAcceptor::~ConnectionAcceptor() { Stop(); }

void ConnectionAcceptor::Start(Handoff handoff) {
  handoff_ = std::move(handoff);
  budget_ = std::make_unique<ConnectionBudget>(BudgetOptions(options_), StillOpen);
  loop_.Post([this] { Watch(); });
  thread_ = std::thread([this] { loop_.Run(); });
}

void ConnectionAcceptor::Stop() {
  if (stopped_) return;
  stopped_ = true;
  loop_.Stop();
  if (thread_.joinable()) thread_.join();
  for (int fd : listen_fds_) close(fd);
  listen_fds_.clear();
}

void ConnectionAcceptor::Watch() {
  if (watching_) return;
  watching_ = true;
  for (int fd : listen_fds_) {
    loop_.AddFd(fd, EPOLLIN, [this, fd](uint32_t) { AcceptSome(fd); });
  }
}

void ConnectionAcceptor::Unwatch() {
  if (!watching_) return;
  watching_ = false;
  for (int fd : listen_fds_) loop_.RemoveFd(fd);
}

// Stops watching the sockets (they are level-triggered: a connection left in the queue would
// wake the loop at once) and watches them again at `when`.
void ConnectionAcceptor::PauseUntil(TimePoint when) {
  if (paused_) return;
  paused_ = true;
  Unwatch();
  loop_.AddTimer(when, [this] {
    paused_ = false;
    Watch();
  });
}

void ConnectionAcceptor::AcceptSome(int listen_fd) {
  for (int i = 0; i < kAcceptBatch && !paused_; ++i) {
    const TimePoint now = std::chrono::steady_clock::now();
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof(peer);
    const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &peer_len,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      if (out_of_fds_) {
        out_of_fds_ = false;
        LogWarning(absl::StrCat(
            "accepting connections on ", name_, " again, after ",
            std::chrono::duration_cast<std::chrono::milliseconds>(now - out_of_fds_since_).count(),
            " ms out of file descriptors"));
      }
      Admit(listen_fd, fd, peer, now);
      continue;
    }
    const int err = errno;
    switch (err) {
      case EAGAIN:
        return;
      case EINTR:
      case ECONNABORTED:
      case EPROTO:
      case EPERM:  // a firewall rule refused it
        continue;
      case EMFILE:
      case ENFILE:
      case ENOBUFS:
      case ENOMEM:
        if (!out_of_fds_) {
          out_of_fds_ = true;
          out_of_fds_since_ = now;
          const int limit = SoftFdLimit();
          LogWarning(absl::StrCat("refusing connections on ", name_, ": out of file descriptors (",
                                  err == EMFILE ? absl::StrCat("this process's limit of ",
                                                               limit < 0 ? std::string("unlimited")
                                                                         : std::to_string(limit),
                                                               " open files")
                                                : ErrnoText(err),
                                  "); new connections wait in the listen queue, retrying every ",
                                  options_.retry_after_exhaustion.count(), " ms"));
        }
        PauseUntil(now + options_.retry_after_exhaustion);
        return;
      default:
        LogWarning(absl::StrCat("accept on ", name_, " failed: ", ErrnoText(err), "; retrying"));
        PauseUntil(now + options_.retry_after_exhaustion);
        return;
    }
  }
}

void ConnectionAcceptor::Admit(int listen_fd, int fd, const sockaddr_storage& peer, TimePoint now) {
  std::string source, source_text;
  SourceOf(peer, &source, &source_text);
  struct stat st {};
  const uint64_t inode = fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
  const ConnectionBudget::Verdict verdict = budget_->Offer(source, fd, inode, now);
  if (verdict != ConnectionBudget::Verdict::kKeep) {
    // Closed with a reset: nothing lingers for a peer that is over its budget.
    const linger reset{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    close(fd);
    // At most one line a second, however fast an address offers connections.
    if (now - last_refusal_warning_ < std::chrono::seconds(1)) {
      ++refusals_not_logged_;
      return;
    }
    last_refusal_warning_ = now;
    LogWarning(absl::StrCat(
        "closing a new connection on ", name_, " from ", source_text,
        " at once: the address is at ", RefusalReason(verdict), " (", budget_->open_from(source),
        " open)",
        refusals_not_logged_ > 0
            ? absl::StrCat("; ", refusals_not_logged_, " more closed since the last such line")
            : std::string()));
    refusals_not_logged_ = 0;
    return;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  handoff_(listen_fd, fd);
}

}  // namespace ddprun::rendezvous
