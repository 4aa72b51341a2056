// The kernel's log as a stream of records (/dev/kmsg), read from where it stood when opened:
// what the kernel says about a worker's death is written after the worker started, so nothing
// older is wanted. Non-blocking: ReadAvailable() takes what is there and returns (the agent may
// watch fd() for POLLIN on its loop). Records that userspace wrote are dropped (facility != 0:
// nobody can forge the kernel's evidence by writing to /dev/kmsg).
//
// Opening needs CAP_SYSLOG where kernel.dmesg_restrict=1 (Debian's default): as root it works;
// otherwise the error says so, and the caller reports causes as unknown with that reason.
#ifndef DDPRUN_LAUNCHER_CAUSES_KERNEL_LOG_H_
#define DDPRUN_LAUNCHER_CAUSES_KERNEL_LOG_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/causes/kmsg_record.h"

namespace ddprun::launcher {

class KernelLog {
 public:
  // `path` at its end (SEEK_END). kPermissionDenied / kNotFound / kUnavailable name the path.
  static absl::StatusOr<std::unique_ptr<KernelLog>> OpenAtEnd(const std::string& path);
  // A descriptor that already delivers one record per read (tests: a SOCK_SEQPACKET socket).
  // Takes ownership.
  static std::unique_ptr<KernelLog> FromDescriptor(int fd, std::string name);
  ~KernelLog();
  KernelLog(const KernelLog&) = delete;
  KernelLog& operator=(const KernelLog&) = delete;

  struct Batch {
    std::vector<KmsgRecord> records;  // the kernel's, in the order written
    // The ring buffer overwrote records before they were read (EPIPE): evidence may be missing.
    bool lost = false;
    // Reads that held no kmsg record: none from /dev/kmsg; a path that is not a kernel log
    // (DDPRUN_KERNEL_LOG=/dev/zero) gives nothing else.
    size_t unparseable = 0;
    // Reads made; `max_reads` of them: more may be waiting.
    size_t reads = 0;
  };
  // What is available now, at most `max_reads` reads (one record each): a flood, or a source
  // that never runs dry, is read over several calls.
  Batch ReadAvailable(size_t max_reads = 4096);

  int fd() const { return fd_; }
  const std::string& name() const { return name_; }

 private:
  KernelLog(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  int fd_;
  std::string name_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CAUSES_KERNEL_LOG_H_
