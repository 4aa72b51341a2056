#include "launcher/workers/error_file_relay.h"

#include <stdio.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/file_text.h"

namespace ddprun::launcher {

absl::Status RelayErrorFile(const std::string& worker_file, const std::string& parent_file,
                            int error_code) {
  absl::StatusOr<std::string> text = ReadBoundedFile(worker_file, kMaxErrorFileBytes);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(absl::StrCat(worker_file, ": no error file"));
    }
    return absl::InvalidArgumentError(text.status().message());
  }
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(worker_file, ": not a JSON object"));
  }
  if (auto msg = doc.find("message"); msg != doc.end() && msg->is_object()) {
    (*msg)["errorCode"] = error_code;
  }
  const std::string tmp = absl::StrCat(parent_file, ".ddprun-tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << doc.dump();
    if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (rename(tmp.c_str(), parent_file.c_str()) != 0) {
    remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", parent_file));
  }
  return absl::OkStatus();
}

}  // namespace ddprun::launcher
