// Reading small text files whole (/proc and /sys entries, error files, stacks files), where a
// file that cannot be read simply counts as empty.
#ifndef DDPRUN_COMMON_FILE_TEXT_H_
#define DDPRUN_COMMON_FILE_TEXT_H_

#include <string>

#include "absl/status/statusor.h"

namespace ddprun {

// The file's whole contents; "" when it does not exist or cannot be read.
std::string ReadTextFile(const std::string& path);

// A file the caller needs (a token, a certificate): its whole contents, or kInvalidArgument
// saying exactly what is wrong: "WHAT: cannot read PATH: <strerror>", "WHAT: PATH is a
// directory", "WHAT: PATH is not a regular file" (a FIFO is never opened for reading, which
// would block), "WHAT: PATH is larger than 1 MiB".
absl::StatusOr<std::string> ReadRequiredFile(const std::string& what, const std::string& path);

}  // namespace ddprun

#endif  // DDPRUN_COMMON_FILE_TEXT_H_
