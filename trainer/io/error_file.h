// The TORCHELASTIC_ERROR_FILE a failing worker leaves for its launcher, in the JSON shape that
// torch.distributed.elastic's @record writes (errors/error_handler.py, torch 1.13 and 2.x):
//   {"message": {"message": "<Type>: <text>",
//                "extraInfo": {"py_callstack": "<trace>", "timestamp": "<unix seconds>"}}}
// torchrun and ddprun both read "message" and show it in their failure summary.
#ifndef DDPRUN_TRAINER_IO_ERROR_FILE_H_
#define DDPRUN_TRAINER_IO_ERROR_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace ddprun::trainer {

// The JSON text; `error_type` plays the Python exception type's role (e.g. "DataError").
std::string FormatErrorFile(const std::string& error_type, const std::string& message,
                            const std::string& callstack, int64_t unix_seconds);

// Writes it to `path` (no-op OK when `path` is empty). Written via temp file + rename, so a
// launcher never reads half a file.
absl::Status WriteErrorFile(const std::string& path, const std::string& error_type,
                            const std::string& message, const std::string& callstack);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_ERROR_FILE_H_
