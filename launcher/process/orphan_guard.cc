#include "launcher/process/orphan_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ddprun::launcher {
namespace {

constexpr int kMaxGroups = 4096;

// The guard's whole life. Only async-signal-safe calls: the agent may have other threads when
// it forks, so the child must not touch locks or the heap.
[[noreturn]] void GuardMain(int fd) {
  static pid_t groups[kMaxGroups];
  int count = 0;
  int32_t message;
  while (true) {
    const ssize_t n = read(fd, &message, sizeof(message));
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof(message)) break;  // end of file: the agent is gone
    if (message > 0) {
      if (count < kMaxGroups) groups[count++] = message;
    } else {
      for (int i = 0; i < count; ++i) {
        if (groups[i] == -message) {
          groups[i] = groups[--count];
          break;
        }
      }
    }
  }
  for (int i = 0; i < count; ++i) kill(-groups[i], SIGKILL);
  _exit(0);
}

}  // namespace

absl::Status OrphanGuard::Start() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    close(fds[1]);
    // Every other descriptor of the agent (sockets, the signalfd...) is irrelevant here; those
    // marked close-on-exec stay open, harmlessly, until the guard exits.
    GuardMain(fds[0]);
  }
  close(fds[0]);
  fd_ = fds[1];
  pid_ = pid;
  return absl::OkStatus();
}

void OrphanGuard::Add(pid_t pgid) {
  if (fd_ < 0) return;
  const int32_t message = static_cast<int32_t>(pgid);
  ssize_t ignored = write(fd_, &message, sizeof(message));
  (void)ignored;
}

void OrphanGuard::Remove(pid_t pgid) {
  if (fd_ < 0) return;
  const int32_t message = -static_cast<int32_t>(pgid);
  ssize_t ignored = write(fd_, &message, sizeof(message));
  (void)ignored;
}

OrphanGuard::~OrphanGuard() {
  if (fd_ >= 0) close(fd_);
  if (pid_ > 0) waitpid(pid_, nullptr, 0);
}

}  // namespace ddprun::launcher
