#include "launcher/hangs/fifo_channel.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ddprun::launcher {
namespace {

// Most bytes taken from the pipe per wake-up: a flooding writer must not starve the loop.
constexpr size_t kReadBudget = 256 * 1024;

}  // namespace

absl::StatusOr<std::unique_ptr<FifoChannel>> FifoChannel::Open(EventLoop* loop,
                                                               const std::string& path,
                                                               LineHandler on_line) {
  bool created = false;
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISFIFO(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": exists and is not a FIFO"));
    }
  } else if (errno != ENOENT) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", strerror(errno)));
  } else if (mkfifo(path.c_str(), 0600) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot create FIFO: ", strerror(errno)));
  } else {
    created = true;
  }
  std::unique_ptr<FifoChannel> c(new FifoChannel(loop, path, created, std::move(on_line)));
  // Read end first (O_NONBLOCK: does not wait for a writer), then our own write end.
  c->read_fd_ = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (c->read_fd_ >= 0) c->keep_fd_ = open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (c->read_fd_ < 0 || c->keep_fd_ < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open FIFO: ", strerror(errno)));
  }
  FifoChannel* raw = c.get();
  loop->AddFd(c->read_fd_, EPOLLIN, [raw](uint32_t) { raw->OnReadable(); });
  return c;
}

FifoChannel::FifoChannel(EventLoop* loop, std::string path, bool created, LineHandler on_line)
    : loop_(loop), path_(std::move(path)), created_(created), on_line_(std::move(on_line)) {}

FifoChannel::~FifoChannel() {
  if (read_fd_ >= 0) {
    loop_->RemoveFd(read_fd_);
    close(read_fd_);
  }
  if (keep_fd_ >= 0) close(keep_fd_);
  if (created_) unlink(path_.c_str());
}

void FifoChannel::Drain() { OnReadable(); }

void FifoChannel::OnReadable() {
  char buf[16384];
  size_t total = 0;
  while (total < kReadBudget) {
    const ssize_t n = read(read_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // EAGAIN: drained (EOF cannot happen: we hold a write end)
    total += static_cast<size_t>(n);
    absl::string_view data(buf, static_cast<size_t>(n));
    while (!data.empty()) {
      const size_t nl = data.find('\n');
      const absl::string_view piece = data.substr(0, nl);
      if (skipping_) {
        if (nl == absl::string_view::npos) break;
        skipping_ = false;
      } else if (partial_.size() + piece.size() > kMaxLine) {
        const absl::string_view head = piece.substr(0, kMaxLine - partial_.size());
        partial_.append(head.data(), head.size());
        on_line_(partial_, /*oversized=*/true);
        partial_.clear();
        skipping_ = nl == absl::string_view::npos;
      } else if (nl == absl::string_view::npos) {
        partial_.append(piece.data(), piece.size());
      } else if (partial_.empty()) {
        if (!piece.empty()) on_line_(piece, false);
      } else {
        partial_.append(piece.data(), piece.size());
        on_line_(partial_, false);
        partial_.clear();
      }
      if (nl == absl::string_view::npos) break;
      data.remove_prefix(nl + 1);
    }
  }
}

}  // namespace ddprun::launcher
