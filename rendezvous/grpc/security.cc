#include "rendezvous/grpc/security.h"

#include "absl/strings/str_cat.h"
#include "common/file_text.h"
#include "grpcpp/security/server_credentials.h"
#include "rendezvous/grpc/scoped_token.h"

namespace ddprun::rendezvous {

std::optional<std::string> CallScope(const grpc::ServerContextBase& context,
                                     absl::string_view token) {
  if (token.empty()) return std::string();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthMetadataKey);
  if (it == metadata.end()) return std::nullopt;
  const absl::string_view value(it->second.data(), it->second.size());
  const absl::string_view prefix = "Bearer ";
  if (value.substr(0, prefix.size()) != prefix) return std::nullopt;
  return ScopeOfToken(value.substr(prefix.size()), token);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsServerFiles& tls) {
  if (tls.cert_file.empty() && tls.key_file.empty()) {
    if (!tls.client_ca_file.empty()) {
      return absl::InvalidArgumentError("a client CA file needs a server certificate and key");
    }
    return grpc::InsecureServerCredentials();
  }
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate file and a key file");
  }
  grpc::SslServerCredentialsOptions options(
      tls.client_ca_file.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                 : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  absl::StatusOr<std::string> cert = ReadRequiredFile("TLS certificate", tls.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadRequiredFile("TLS key", tls.key_file);
  if (!key.ok()) return key.status();
  pair.cert_chain = *cert;
  pair.private_key = *key;
  options.pem_key_cert_pairs.push_back(pair);
  if (!tls.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadRequiredFile("TLS client CA", tls.client_ca_file);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsClientFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  if (!tls.ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadRequiredFile("TLS CA", tls.ca_file);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  if (!tls.cert_file.empty() || !tls.key_file.empty()) {
    absl::StatusOr<std::string> cert = ReadRequiredFile("TLS certificate", tls.cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadRequiredFile("TLS key", tls.key_file);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return grpc::SslCredentials(options);
}

}  // namespace ddprun::rendezvous
