#include "launcher/preload/hand_over_receipt.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace ddprun::launcher {

HandOverReceipt::~HandOverReceipt() { Close(); }

HandOverReceipt::HandOverReceipt(HandOverReceipt&& other) noexcept
    : spare_end_(std::exchange(other.spare_end_, -1)) {}

HandOverReceipt& HandOverReceipt::operator=(HandOverReceipt&& other) noexcept {
  if (this != &other) {
    Close();
    spare_end_ = std::exchange(other.spare_end_, -1);
  }
  return *this;
}

void HandOverReceipt::Close() {
  if (spare_end_ >= 0) close(spare_end_);
  spare_end_ = -1;
}

HandOver HandOverReceipt::Settle() {
  if (spare_end_ < 0) return HandOver::kNone;
  // Only ddprun ever writes to the spare, and only the start: anything still queued on the
  // spare's end is that start, unread. Peeked, not read: its descriptors are not installed here.
  // ECONNRESET first when ddprun closed its end with the spare's "ready" unread (fd_passing.h):
  // reading the error clears it, the next peek sees the queue.
  HandOver outcome = HandOver::kTaken;
  bool reset_seen = false;
  while (true) {
    char byte;
    const ssize_t n = recv(spare_end_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) outcome = HandOver::kUnread;
    if (n >= 0 || errno == EAGAIN) break;
    if (errno == EINTR) continue;
    if (errno != ECONNRESET || reset_seen) break;
    reset_seen = true;
  }
  Close();
  return outcome;
}

}  // namespace ddprun::launcher
