// Rendezvous security: the shared token and TLS credentials, for the server and the client.
//
// The token comes from the environment variable DDPRUN_RDZV_TOKEN or from a token file (whose
// first line is the token), never from a command-line value (it would show in `ps`). Clients
// send it on every call as "authorization: Bearer <token>"; the server compares it in constant
// time. TLS is optional; with a client CA file the server requires client certificates (mTLS).
#ifndef DDPRUN_RENDEZVOUS_SECURITY_H_
#define DDPRUN_RENDEZVOUS_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"

namespace ddprun::rendezvous {

inline constexpr char kTokenEnv[] = "DDPRUN_RDZV_TOKEN";
inline constexpr char kAuthMetadataKey[] = "authorization";

// The token from `token_file` when given (first line, surrounding whitespace removed), else
// from $DDPRUN_RDZV_TOKEN, else empty (no authentication). A file that cannot be read or is
// empty is an error naming it.
absl::StatusOr<std::string> LoadToken(const std::string& token_file);

// True when `token` is empty (authentication off) or the call carries it.
bool CallHasToken(const grpc::ServerContextBase& context, absl::string_view token);
// Whether an "Authorization" value is "Bearer TOKEN" (compared in constant time); true when
// `token` is empty (no authentication).
bool BearerHasToken(absl::string_view authorization, absl::string_view token);
// Compares in time that depends only on the length of `expected`.
bool SecureEquals(absl::string_view got, absl::string_view expected);

// "Bearer <token>".
std::string AuthMetadataValue(absl::string_view token);

struct TlsServerFiles {
  std::string cert_file;       // PEM certificate chain; empty: plaintext
  std::string key_file;        // PEM private key
  std::string client_ca_file;  // PEM CA bundle; set: clients must present a certificate
};

struct TlsClientFiles {
  std::string ca_file;    // PEM roots to verify the server; empty with no cert: plaintext
  std::string cert_file;  // client certificate for mutual TLS
  std::string key_file;
  std::string server_name_override;  // for certificates that name another host (tests)
  bool enabled() const { return !ca_file.empty() || !cert_file.empty(); }
};

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsServerFiles& tls);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsClientFiles& tls);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_SECURITY_H_
