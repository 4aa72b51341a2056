#include "launcher/workers/worker_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ddprun::launcher {
namespace {

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

}  // namespace

absl::StatusOr<std::string> ReadWorkerFile(const std::string& path, size_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open: ", strerror(err)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const mode_t mode = st.st_mode;
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, " is ", KindOf(mode)));
  }
  if (static_cast<size_t>(st.st_size) > max_bytes) {
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat(path, " is ", st.st_size, " bytes, more than the ", max_bytes, " read"));
  }
  std::string text;
  char buf[64 * 1024];
  while (text.size() <= max_bytes) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (text.size() > max_bytes) {  // it grew while read
    return absl::ResourceExhaustedError(
        absl::StrCat(path, " is more than the ", max_bytes, " bytes read"));
  }
  return text;
}

}  // namespace ddprun::launcher
