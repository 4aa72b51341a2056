#include "trainer/io/error_file.h"

#include <ctime>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "trainer/io/file_env.h"

namespace ddprun::trainer {

std::string FormatErrorFile(const std::string& error_type, const std::string& message,
                            const std::string& callstack, int64_t unix_seconds) {
  nlohmann::json j;
  j["message"]["message"] = absl::StrCat(error_type, ": ", message);
  j["message"]["extraInfo"]["py_callstack"] = callstack;
  j["message"]["extraInfo"]["timestamp"] = std::to_string(unix_seconds);
  // Invalid UTF-8 in a message (a file name, say) must not make the error report itself fail.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::Status WriteErrorFile(const std::string& path, const std::string& error_type,
                            const std::string& message, const std::string& callstack) {
  if (path.empty()) return absl::OkStatus();
  return WriteFileAtomically(FileEnv::Default(), path,
                             FormatErrorFile(error_type, message, callstack, std::time(nullptr)));
}

}  // namespace ddprun::trainer
