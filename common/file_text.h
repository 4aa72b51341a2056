// Reading small text files whole (/proc and /sys entries, error files, stacks files), where a
// file that cannot be read simply counts as empty.
#ifndef DDPRUN_COMMON_FILE_TEXT_H_
#define DDPRUN_COMMON_FILE_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace ddprun {

// The file's whole contents; "" when it does not exist or cannot be read.
std::string ReadTextFile(const std::string& path);

// A regular file read whole, without blocking and without reading more than `max_bytes`: the
// reader for files someone else controls (a worker's error file, a token). Opened with
// O_NONBLOCK, so a FIFO's open returns at once and fstat refuses it. Each message names PATH:
// kNotFound / kPermissionDenied / kInternal "cannot read PATH: <strerror>";
// kFailedPrecondition "PATH is a directory", "PATH is a FIFO", "PATH is not a regular file";
// kResourceExhausted "PATH is N bytes, more than the M read".
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes);

// A file the caller needs (a token, a certificate) of at most 1 MiB: ReadBoundedFile, every
// error kInvalidArgument "WHAT: <what is wrong>".
absl::StatusOr<std::string> ReadRequiredFile(const std::string& what, const std::string& path);

}  // namespace ddprun

#endif  // DDPRUN_COMMON_FILE_TEXT_H_
