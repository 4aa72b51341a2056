// Rendezvous security over gRPC: the shared token checked on a call (rendezvous/auth/token.h)
// and TLS credentials for the server and the client. TLS is optional; with a client CA file the
// server requires client certificates (mTLS).
#ifndef DDPRUN_RENDEZVOUS_GRPC_SECURITY_H_
#define DDPRUN_RENDEZVOUS_GRPC_SECURITY_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "rendezvous/auth/token.h"

namespace ddprun::rendezvous {

// What the call's bearer token gives access to on a server whose token is `token`
// (scoped_token.h): "" for the server's token (or any call when `token` is empty), a scope for a
// scoped token of this server, nullopt when the call carries neither.
std::optional<std::string> CallScope(const grpc::ServerContextBase& context,
                                     absl::string_view token);

struct TlsServerFiles {
  std::string cert_file;       // PEM certificate chain; empty: plaintext
  std::string key_file;        // PEM private key
  std::string client_ca_file;  // PEM CA bundle; set: clients must present a certificate
};

struct TlsClientFiles {
  std::string ca_file;    // PEM roots to verify the server; empty with no cert: plaintext
                          // (with TLS: $SSL_CERT_FILE, $SSL_CERT_DIR or gRPC's default roots)
  std::string cert_file;  // client certificate for mutual TLS
  std::string key_file;
  std::string server_name_override;  // for certificates that name another host (tests)
  // TLS even with neither file (torchrun's protocol=https): the default roots verify the server.
  bool required = false;
  bool enabled() const { return required || !ca_file.empty() || !cert_file.empty(); }
};

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsServerFiles& tls);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsClientFiles& tls);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_SECURITY_H_
