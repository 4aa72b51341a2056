#include "rendezvous/auth/token.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/file_text.h"

namespace ddprun::rendezvous {

// Constant time in the length of `expected`, so the comparison does not leak a prefix match.
bool SecureEquals(absl::string_view got, absl::string_view expected) {
  unsigned char diff = got.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>(expected[i]) ^
            static_cast<unsigned char>(i < got.size() ? got[i] : 0);
  }
  return diff == 0;
}

namespace {

// The token travels in an HTTP header, which takes printable ASCII only (gRPC aborts the process
// on any other byte in a metadata value). `what` names the token in the error.
absl::Status CheckPrintable(absl::string_view token, absl::string_view what) {
  for (size_t i = 0; i < token.size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(token[i]);
    if (ch < 0x20 || ch > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has byte 0x",
                                                     absl::Hex(ch, absl::kZeroPad2), " at column ",
                                                     i + 1, "; it must be printable ASCII"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> LoadToken(const std::string& token_file) {
  if (!token_file.empty()) {
    absl::StatusOr<std::string> text = ReadRequiredFile("token_file", token_file);
    if (!text.ok()) return text.status();
    if (const size_t nul = text->find('\0'); nul != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token_file: ", token_file, " is not a text file (a NUL byte at offset ", nul, ")"));
    }
    std::string line = text->substr(0, text->find('\n'));
    absl::StripAsciiWhitespace(&line);
    if (line.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token_file: ", token_file,
          absl::StripAsciiWhitespace(*text).empty() ? " is empty" : "'s first line is empty"));
    }
    absl::Status printable = CheckPrintable(
        line, absl::StrCat("token_file: ", token_file, ": the token (its first line)"));
    if (!printable.ok()) return printable;
    return line;
  }
  const char* env = std::getenv(kTokenEnv);
  if (env == nullptr) return std::string();
  std::string token(env);
  absl::StripAsciiWhitespace(&token);
  absl::Status printable = CheckPrintable(token, absl::StrCat(kTokenEnv, ": the token"));
  if (!printable.ok()) return printable;
  return token;
}

std::string AuthMetadataValue(absl::string_view token) { return absl::StrCat("Bearer ", token); }

bool BearerHasToken(absl::string_view authorization, absl::string_view token) {
  if (token.empty()) return true;
  const absl::string_view prefix = "Bearer ";
  if (authorization.substr(0, prefix.size()) != prefix) return false;
  return SecureEquals(authorization.substr(prefix.size()), token);
}

}  // namespace ddprun::rendezvous
