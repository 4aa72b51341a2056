#include "trainer/io/preload_handover.h"

#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/fd_passing.h"
#include "common/log.h"  // WriteAll

namespace ddprun::trainer {
namespace {

// The largest hand-over ddprun sends (the whole environment), as the Python hook reads it.
constexpr size_t kMaxHandOverBytes = size_t{1} << 22;
constexpr absl::string_view kStartPrefix{"start\0", 6};

// DDPRUN_PRELOAD_FD, checked to be a socket this process holds.
absl::StatusOr<int> SpareSocket(const char* text) {
  int fd = -1;
  struct stat st {};
  if (!absl::SimpleAtoi(text, &fd) || fd < 0 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kPreloadFdEnv, "=", text,
                     ": not an open socket (only ddprun --preload=native starts a spare with it)"));
  }
  return fd;
}

void SendReport(int fd, const absl::Status& warm_up) {
  std::string message = "ready";
  if (!warm_up.ok()) {
    message = absl::StrCat("failed", absl::string_view("\0", 1), "ddp-train's warm-up",
                           absl::string_view("\0", 1), warm_up.message());
  }
  // Nothing to do when it fails: ddprun is gone, and the wait for the hand-over ends with it.
  (void)!send(fd, message.data(), message.size(), MSG_NOSIGNAL);
}

struct HandOver {
  std::string environment;  // KEY=VALUE\0 ...
  int stdout_fd = -1;
  int stderr_fd = -1;
};

// Blocks for ddprun's one message; nullopt for anything but a whole hand-over (end of file
// included), with any descriptor that came along closed.
std::optional<HandOver> ReceiveHandOver(int fd) {
  ReceivedMessage m = ReceiveWithFds(fd, kMaxHandOverBytes, 2);
  const bool whole = m.bytes > 0 && !m.truncated && m.fds.size() == 2 &&
                     absl::string_view(m.message).substr(0, kStartPrefix.size()) == kStartPrefix;
  if (!whole) {
    for (int received : m.fds) close(received);
    return std::nullopt;
  }
  return HandOver{m.message.substr(kStartPrefix.size()), m.fds[0], m.fds[1]};
}

// The start's environment, whole: what the spare had and the start has not goes.
void ReplaceEnvironment(absl::string_view block) {
  clearenv();
  for (absl::string_view item : absl::StrSplit(block, absl::string_view("\0", 1))) {
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos || eq == 0) continue;
    setenv(std::string(item.substr(0, eq)).c_str(), std::string(item.substr(eq + 1)).c_str(), 1);
  }
}

// `stream` (1 or 2) becomes `worker_fd`. What the spare wrote to it before (a memory file from
// ddprun) is copied there first, where a cold start would have written it.
void TakeOverStream(int stream, int worker_fd) {
  char chunk[65536];
  off_t offset = 0;
  ssize_t n;
  while ((n = pread(stream, chunk, sizeof(chunk), offset)) > 0) {
    // A failed write is the worker's stream gone: its own writes will say so.
    WriteAll(worker_fd, absl::string_view(chunk, static_cast<size_t>(n)));
    offset += n;
  }
  dup2(worker_fd, stream);
  close(worker_fd);
}

}  // namespace

absl::Status BecomeWorkerIfSpare(const std::function<absl::Status()>& warm_up) {
  const char* fd_text = std::getenv(kPreloadFdEnv);
  if (fd_text == nullptr) return absl::OkStatus();
  absl::StatusOr<int> fd = SpareSocket(fd_text);
  if (!fd.ok()) return fd.status();
  const char* idle_text = std::getenv(kPreloadIdleEnv);
  const bool idle = idle_text != nullptr && absl::string_view(idle_text) == "1";

  std::thread helper([&] {
    if (idle) {
      sched_param normal{};
      sched_setscheduler(0, SCHED_IDLE, &normal);  // this thread only (Linux)
    }
    SendReport(*fd, warm_up());
  });
  std::optional<HandOver> hand_over = ReceiveHandOver(*fd);
  if (!hand_over.has_value()) {
    // Never a worker with a spare's environment. The warm-up may still run: it ends with the
    // process (detached, so that a thread checker does not take it for a leak).
    helper.detach();
    _exit(0);
  }
  helper.join();
  close(*fd);
  std::cout.flush();
  std::cerr.flush();
  fflush(nullptr);
  ReplaceEnvironment(hand_over->environment);
  TakeOverStream(STDOUT_FILENO, hand_over->stdout_fd);
  TakeOverStream(STDERR_FILENO, hand_over->stderr_fd);
  return absl::OkStatus();
}

}  // namespace ddprun::trainer
