#include "rendezvous/grpc/scoped_token.h"

#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "rendezvous/auth/token.h"
#include "rendezvous/grpc/member_secret.h"

namespace ddprun::rendezvous {
namespace {

constexpr absl::string_view kPrefix = "ddprun1";
constexpr size_t kMaxScope = 64;

bool ValidScope(absl::string_view scope) {
  if (scope.empty() || scope.size() > kMaxScope) return false;
  for (const char c : scope) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

std::string Mac(absl::string_view server_token, absl::string_view scope) {
  return HmacSha256Hex(
      std::string_view(server_token.data(), server_token.size()),
      LengthPrefixed({"ddprun-scoped-token-v1", std::string_view(scope.data(), scope.size())}));
}

}  // namespace

absl::StatusOr<std::string> MintScopedToken(absl::string_view server_token,
                                            absl::string_view scope) {
  if (!ValidScope(scope)) {
    return absl::InvalidArgumentError(absl::StrCat("--mint-token=", scope, ": a scope is 1 to ",
                                                   kMaxScope, " letters, digits, '_' or '-'"));
  }
  if (server_token.empty()) {
    return absl::InvalidArgumentError(
        "--mint-token needs the server's token (--token-file or DDPRUN_RDZV_TOKEN)");
  }
  return absl::StrCat(kPrefix, ".", scope, ".", Mac(server_token, scope));
}

std::optional<std::string> ScopeOfToken(absl::string_view presented,
                                        absl::string_view server_token) {
  if (server_token.empty() || SecureEquals(presented, server_token)) return std::string();
  const std::vector<absl::string_view> parts = absl::StrSplit(presented, '.');
  if (parts.size() != 3 || parts[0] != kPrefix || !ValidScope(parts[1])) return std::nullopt;
  if (!SecureEquals(parts[2], Mac(server_token, parts[1]))) return std::nullopt;
  return std::string(parts[1]);
}

}  // namespace ddprun::rendezvous
