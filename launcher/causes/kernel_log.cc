#include "launcher/causes/kernel_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ddprun::launcher {

absl::StatusOr<std::unique_ptr<KernelLog>> KernelLog::OpenAtEnd(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string why = absl::StrCat("kernel log ", path, " not readable: ", strerror(err));
    if (err == EPERM || err == EACCES) {
      return absl::PermissionDeniedError(
          absl::StrCat(why, " (needs root or CAP_SYSLOG with kernel.dmesg_restrict=1)"));
    }
    if (err == ENOENT) return absl::NotFoundError(why);
    return absl::UnavailableError(why);
  }
  // Only what the kernel writes from now on (a fresh open starts at the oldest record).
  if (lseek(fd, 0, SEEK_END) < 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("kernel log ", path, ": cannot seek to its end: ", strerror(err)));
  }
  return std::unique_ptr<KernelLog>(new KernelLog(fd, path));
}

std::unique_ptr<KernelLog> KernelLog::FromDescriptor(int fd, std::string name) {
  return std::unique_ptr<KernelLog>(new KernelLog(fd, std::move(name)));
}

KernelLog::~KernelLog() {
  if (fd_ >= 0) close(fd_);
}

KernelLog::Batch KernelLog::ReadAvailable(size_t max_reads) {
  Batch batch;
  // One read() returns one whole record; 8 KiB holds the longest (as dmesg reads them).
  char buf[8192];
  // Every read counts, whatever it held: a source that never runs dry and holds no record
  // (/dev/zero) must not keep the agent's loop here.
  while (batch.reads < max_reads) {
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    ++batch.reads;
    if (n < 0 && errno == EPIPE) {
      // Overwritten while unread: the position moved to the oldest record kept; go on.
      batch.lost = true;
      continue;
    }
    if (n <= 0) break;  // EAGAIN: nothing more now (or an error: nothing to read)
    std::optional<KmsgRecord> record = ParseKmsgRecord(absl::string_view(buf, n));
    if (!record.has_value()) {
      ++batch.unparseable;
    } else if (record->from_kernel()) {
      batch.records.push_back(*std::move(record));
    }
  }
  return batch;
}

}  // namespace ddprun::launcher
