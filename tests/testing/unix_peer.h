// The other end of a Unix stream socket, for tests of the in-process recovery control channel
// (a worker talking to the agent's ControlServer, or an agent serving a ControlClient): raw
// bytes out, lines in, and whether the other side closed. Every wait is bounded. Header-only.
//
// Thread-compatible: one thread uses a peer at a time.
#ifndef DDPRUN_TESTS_TESTING_UNIX_PEER_H_
#define DDPRUN_TESTS_TESTING_UNIX_PEER_H_

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

namespace ddprun::testing {

class UnixPeer {
 public:
  UnixPeer() = default;
  explicit UnixPeer(int fd) : fd_(fd) {}
  ~UnixPeer() { Close(); }
  UnixPeer(UnixPeer&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), buffer_(std::move(other.buffer_)), eof_(other.eof_) {}
  UnixPeer& operator=(UnixPeer&& other) noexcept {
    Close();
    fd_ = std::exchange(other.fd_, -1);
    buffer_ = std::move(other.buffer_);
    eof_ = other.eof_;
    return *this;
  }

  // A connection to the socket at `path`; !connected() when it fails.
  static UnixPeer Connect(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path)) return UnixPeer();
    memcpy(addr.sun_path, path.data(), path.size());
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return UnixPeer();
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return UnixPeer();
    }
    return UnixPeer(fd);
  }

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  // Sends every byte of `bytes` (blocking); false when the other side is gone.
  bool Write(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // Without blocking: the next complete line (without its '\n'), if one has arrived.
  std::optional<std::string> TryReadLine() {
    Drain();
    return TakeLine();
  }
  // Without blocking: whether the other side closed (after the bytes it sent, which stay
  // readable as lines).
  bool Closed() {
    Drain();
    return eof_;
  }

  // Blocks up to `timeout` for the next complete line.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (std::optional<std::string> line = TryReadLine()) return line;
      if (eof_ || !WaitReadable(deadline)) return std::nullopt;
    }
  }
  // Blocks up to `timeout` for the other side to close.
  bool WaitClosed(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!Closed()) {
      if (!WaitReadable(deadline)) return Closed();
    }
    return true;
  }

 private:
  void Drain() {
    if (fd_ < 0) {
      eof_ = true;
      return;
    }
    char chunk[4096];
    while (!eof_) {
      const ssize_t n = recv(fd_, chunk, sizeof(chunk), MSG_DONTWAIT);
      if (n > 0) {
        buffer_.append(chunk, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        eof_ = true;  // EOF, or ECONNRESET: the server closed with unread bytes
      } else if (errno == EAGAIN) {
        return;
      }
    }
  }
  std::optional<std::string> TakeLine() {
    const size_t nl = buffer_.find('\n');
    if (nl == std::string::npos) return std::nullopt;
    std::string line = buffer_.substr(0, nl);
    buffer_.erase(0, nl + 1);
    return line;
  }
  bool WaitReadable(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, static_cast<int>(left.count())) > 0;
  }

  int fd_ = -1;
  std::string buffer_;
  bool eof_ = false;
};

// A listening Unix socket at `path`, for a test that plays the agent.
class UnixListener {
 public:
  explicit UnixListener(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path)) return;
    memcpy(addr.sun_path, path.data(), path.size());
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd_, 16) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~UnixListener() {
    if (fd_ >= 0) close(fd_);
  }
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  bool ok() const { return fd_ >= 0; }
  // The next connection, waiting up to `timeout`; !connected() when none came.
  UnixPeer Accept(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return UnixPeer();
    return UnixPeer(accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
  }

 private:
  int fd_ = -1;
};

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_UNIX_PEER_H_
