// When ddprun itself runs under another launcher (a platform, or torchrun, that gave it a
// TORCHELASTIC_ERROR_FILE), the root-cause worker's error file is passed up to it, as torchrun's
// own @record does (torch.distributed.elastic's ErrorHandler.dump_error_file): the same JSON,
// with the worker's exit code as message.errorCode.
#ifndef DDPRUN_LAUNCHER_WORKERS_ERROR_FILE_RELAY_H_
#define DDPRUN_LAUNCHER_WORKERS_ERROR_FILE_RELAY_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace ddprun::launcher {

// The most of a worker's error file the agent reads (torch writes a few KiB; a traceback of a
// deep recursion can reach a few MiB). The worker controls the file: it is read with
// ReadBoundedFile (common/file_text.h), so a FIFO, a directory or a huge file cannot stall or
// break the agent.
inline constexpr size_t kMaxErrorFileBytes = 16 << 20;

// Copies `worker_file` to `parent_file` (written whole: a temporary file, then rename), setting
// message.errorCode to `error_code` when the message is an object. NotFound when the worker
// wrote no file; InvalidArgument when it is not JSON, not a regular file or too large (the
// parent file is then left alone).
absl::Status RelayErrorFile(const std::string& worker_file, const std::string& parent_file,
                            int error_code);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_WORKERS_ERROR_FILE_RELAY_H_
