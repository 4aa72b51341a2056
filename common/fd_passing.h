// One message with file descriptors attached (SCM_RIGHTS) over a Unix socket: the --preload
// hand-over's transport, used by ddprun (launcher/preload/spare_pool.cc), by ddp-train
// (trainer/io/preload_handover.cc) and by their tests.
#ifndef DDPRUN_COMMON_FD_PASSING_H_
#define DDPRUN_COMMON_FD_PASSING_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ddprun {

// sendmsg of `message` with `fds` attached, MSG_NOSIGNAL; the byte count sent, or -1 (errno).
ssize_t SendWithFds(int socket, absl::string_view message, const std::vector<int>& fds);

struct ReceivedMessage {
  ssize_t bytes = -1;      // recvmsg's result: 0 at end of file, -1 on an error
  bool truncated = false;  // the message or its descriptors did not fit
  std::string message;
  std::vector<int> fds;  // received with O_CLOEXEC; the caller owns them
};

// Blocks (retrying EINTR) for one message of at most `max_bytes` with at most `max_fds`. A
// peer's close with our messages unread (ECONNRESET) does not hide what it sent before closing.
ReceivedMessage ReceiveWithFds(int socket, size_t max_bytes, size_t max_fds);

}  // namespace ddprun

#endif  // DDPRUN_COMMON_FD_PASSING_H_
