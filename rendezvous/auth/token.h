// The rendezvous's shared token, for gRPC and HTTP alike.
//
// The token comes from the environment variable DDPRUN_RDZV_TOKEN or from a token file (whose
// first line is the token), never from a command-line value (it would show in `ps`). Clients
// send it on every call as "authorization: Bearer <token>"; the server compares it in constant
// time. Pure functions apart from LoadToken, which reads the file or the environment.
#ifndef DDPRUN_RENDEZVOUS_AUTH_TOKEN_H_
#define DDPRUN_RENDEZVOUS_AUTH_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/env_variables.h"

namespace ddprun::rendezvous {

inline constexpr const char* kTokenEnv = kRdzvTokenVariable.name;
inline constexpr char kAuthMetadataKey[] = "authorization";

// The token from `token_file` when given (first line, surrounding whitespace removed), else
// from $DDPRUN_RDZV_TOKEN (surrounding whitespace removed), else empty (no authentication).
// Errors (kInvalidArgument) name the file or the variable and what is wrong: unreadable, a
// directory, not a regular file, not text (a NUL byte), empty, or a token with a byte that is
// not printable ASCII.
absl::StatusOr<std::string> LoadToken(const std::string& token_file);

// Whether an "Authorization" value is "Bearer TOKEN" (compared in constant time); true when
// `token` is empty (no authentication).
bool BearerHasToken(absl::string_view authorization, absl::string_view token);
// Compares in time that depends only on the length of `expected`.
bool SecureEquals(absl::string_view got, absl::string_view expected);

// "Bearer <token>".
std::string AuthMetadataValue(absl::string_view token);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_AUTH_TOKEN_H_
