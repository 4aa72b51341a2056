#include "common/file_text.h"

#include <fstream>
#include <sstream>

namespace ddprun {

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace ddprun
