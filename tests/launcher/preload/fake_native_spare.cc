// A stand-in for a --preload=native program (the worker side of trainer/io/preload_handover.h),
// for spare_pool_test: what it does as a spare is chosen by $FAKE_SPARE in its (spare's)
// environment:
//   ready     says "ready", waits for the hand-over, then, as the worker, prints
//             "worker MARK=<MARK of the handed-over environment>" on the handed-over stdout and
//             exits with $EXIT_CODE of that environment (0 when unset);
//   silent    says nothing and waits for the hand-over as "ready" does (a spare still importing);
//   failed    says its warm-up failed and waits for the end of its socket;
//   exit:N    exits N at once, before saying anything;
//   unread    says "ready", waits until the hand-over has arrived and exits 0 without reading it
//             (what the issue 40 race did: a spare that took the start for ddprun's end);
//   unread-once:PATH
//             as "unread" the first time (it creates PATH), as "ready" once PATH exists; not a
//             spare (a cold start), prints "worker MARK=cold" and exits 0.
// End of file on the socket before a hand-over: exits 0 (ddprun is gone).
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/fd_passing.h"

namespace {

int BecomeWorker(int socket) {
  ddprun::ReceivedMessage m = ddprun::ReceiveWithFds(socket, 1 << 16, 2);
  if (m.bytes <= 0 || m.fds.size() != 2) return 0;
  std::vector<std::string> parts = absl::StrSplit(m.message, '\0', absl::SkipEmpty());
  if (parts.empty() || parts[0] != "start") return 90;
  std::string mark = "(unset)";
  int code = 0;
  for (const std::string& kv : parts) {
    if (kv.rfind("MARK=", 0) == 0) mark = kv.substr(5);
    if (kv.rfind("EXIT_CODE=", 0) == 0 && !absl::SimpleAtoi(kv.substr(10), &code)) return 91;
  }
  dup2(m.fds[0], 1);
  dup2(m.fds[1], 2);
  std::printf("worker MARK=%s\n", mark.c_str());
  std::fflush(stdout);
  return code;
}

// Says "ready", then exits 0 once the hand-over is there (or ddprun is gone), leaving it unread.
// Under ddprun the hand-over may come, and ddprun's end close, before "ready" is sent: a failed
// send is no error then.
int LeaveUnread(int socket) {
  ddprun::SendWithFds(socket, "ready", {});
  pollfd p{socket, POLLIN, 0};
  while (poll(&p, 1, -1) < 0) {
  }
  return 0;
}

// Whether this is the first call for `path` (which it creates).
bool FirstTime(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  close(fd);
  return true;
}

}  // namespace

int main() {
  const char* fd_text = std::getenv("DDPRUN_PRELOAD_FD");
  const char* mode_text = std::getenv("FAKE_SPARE");
  const std::string mode = mode_text == nullptr ? "" : mode_text;
  constexpr char kUnreadOnce[] = "unread-once:";
  const bool unread_once = mode.rfind(kUnreadOnce, 0) == 0;
  int socket = -1;
  if (fd_text == nullptr || !absl::SimpleAtoi(fd_text, &socket)) {  // not a spare
    if (!unread_once) return 92;
    std::printf("worker MARK=cold\n");
    return 0;
  }
  int code = 0;
  if (mode.rfind("exit:", 0) == 0 && absl::SimpleAtoi(mode.substr(5), &code)) return code;
  if (mode == "unread" || (unread_once && FirstTime(mode.substr(sizeof(kUnreadOnce) - 1)))) {
    return LeaveUnread(socket);
  }
  if (mode == "ready" || unread_once) {
    if (ddprun::SendWithFds(socket, "ready", {}) < 0 && !unread_once) return 93;
    return BecomeWorker(socket);
  }
  if (mode == "silent") return BecomeWorker(socket);
  if (mode == "failed") {
    ddprun::SendWithFds(socket, std::string("failed\0numpy\0No module named 'numpy'", 36), {});
    char byte;
    while (read(socket, &byte, 1) > 0) {
    }
    return 0;
  }
  return 94;
}
