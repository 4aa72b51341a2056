#include "common/temp_dir.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ddprun {

absl::StatusOr<std::string> MakeTempDir(const std::string& prefix) {
  const char* tmp = getenv("TMPDIR");
  std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", prefix, "-XXXXXX");
  if (mkdtemp(path.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", path, ": ", strerror(errno)));
  }
  return path;
}

}  // namespace ddprun
