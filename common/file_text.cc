#include "common/file_text.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace ddprun {

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

namespace {

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

absl::Status CannotRead(const std::string& path, int err) {
  const std::string message = absl::StrCat("cannot read ", path, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

}  // namespace

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return CannotRead(path, errno);
  std::string text;
  struct stat st {};
  absl::Status status;
  if (fstat(fd, &st) != 0) {
    status = CannotRead(path, errno);
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::FailedPreconditionError(absl::StrCat(path, " is ", KindOf(st.st_mode)));
  } else if (static_cast<size_t>(st.st_size) > max_bytes) {
    status = absl::ResourceExhaustedError(
        absl::StrCat(path, " is ", st.st_size, " bytes, more than the ", max_bytes, " read"));
  } else {
    char buf[64 * 1024];
    while (true) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) status = CannotRead(path, errno);
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > max_bytes) {  // it grew while we read
        status = absl::ResourceExhaustedError(
            absl::StrCat(path, " is more than the ", max_bytes, " bytes read"));
        break;
      }
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return text;
}

absl::StatusOr<std::string> ReadRequiredFile(const std::string& what, const std::string& path) {
  absl::StatusOr<std::string> text = ReadBoundedFile(path, 1 << 20);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", text.status().message()));
  }
  return text;
}

}  // namespace ddprun
