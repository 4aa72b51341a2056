// Files a worker controls (its TORCHELASTIC_ERROR_FILE), read by the agent without trusting
// them: a FIFO must not block the agent's loop, a directory must not throw, a huge file must not
// be read whole. Thread-compatible free functions.
#ifndef DDPRUN_LAUNCHER_WORKERS_WORKER_FILE_H_
#define DDPRUN_LAUNCHER_WORKERS_WORKER_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace ddprun::launcher {

// The most of an error file the agent reads (torch writes a few KiB; a traceback of a deep
// recursion can reach a few MiB).
inline constexpr size_t kMaxWorkerFileBytes = 16 << 20;

// The contents of `path`, opened without blocking (O_NONBLOCK, so a FIFO's open returns at once)
// and read only when it is a regular file of at most `max_bytes`. kNotFound: no such file;
// kFailedPrecondition: not a regular file ("is a FIFO", "is a directory", ...);
// kResourceExhausted: larger than `max_bytes`; each message names the path.
absl::StatusOr<std::string> ReadWorkerFile(const std::string& path,
                                           size_t max_bytes = kMaxWorkerFileBytes);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_WORKERS_WORKER_FILE_H_
