// A stand-in for a --preload=native program (the worker side of trainer/io/preload_handover.h),
// for spare_pool_test: what it does as a spare is chosen by $FAKE_SPARE in its (spare's)
// environment:
//   ready     says "ready", waits for the hand-over, then, as the worker, prints
//             "worker MARK=<MARK of the handed-over environment>" on the handed-over stdout and
//             exits with $EXIT_CODE of that environment (0 when unset);
//   silent    says nothing and waits for the hand-over as "ready" does (a spare still importing);
//   failed    says its warm-up failed and waits for the end of its socket;
//   exit:N    exits N at once, before saying anything.
// End of file on the socket before a hand-over: exits 0 (ddprun is gone).
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

}  // namespace

int main() {
  const char* fd_text = std::getenv("DDPRUN_PRELOAD_FD");
  const char* mode_text = std::getenv("FAKE_SPARE");
  int socket = -1;
  if (fd_text == nullptr || !absl::SimpleAtoi(fd_text, &socket)) return 92;  // not a spare
  const std::string mode = mode_text == nullptr ? "" : mode_text;
  int code = 0;
  if (mode.rfind("exit:", 0) == 0 && absl::SimpleAtoi(mode.substr(5), &code)) return code;
  if (mode == "ready") {
    if (ddprun::SendWithFds(socket, "ready", {}) < 0) return 93;
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
