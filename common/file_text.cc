#include "common/file_text.h"

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
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(what, ": cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace ddprun
