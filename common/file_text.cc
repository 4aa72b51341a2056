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

absl::StatusOr<std::string> ReadRequiredFile(const std::string& what, const std::string& path) {
  constexpr off_t kMaxBytes = 1 << 20;
  auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", why));
  };
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == EISDIR) return fail(absl::StrCat(path, " is a directory"));
    return fail(absl::StrCat("cannot read ", path, ": ", std::strerror(err)));
  }
  std::string text;
  struct stat st {};
  absl::Status status;
  if (fstat(fd, &st) != 0) {
    status = fail(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  } else if (S_ISDIR(st.st_mode)) {
    status = fail(absl::StrCat(path, " is a directory"));
  } else if (!S_ISREG(st.st_mode)) {
    status = fail(absl::StrCat(path, " is not a regular file"));
  } else if (st.st_size > kMaxBytes) {
    status = fail(absl::StrCat(path, " is larger than 1 MiB"));
  } else {
    char buf[16384];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) != 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = fail(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
        break;
      }
      text.append(buf, static_cast<size_t>(n));
      if (static_cast<off_t>(text.size()) > kMaxBytes) {
        status = fail(absl::StrCat(path, " is larger than 1 MiB"));
        break;
      }
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return text;
}

}  // namespace ddprun
