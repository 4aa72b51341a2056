#include "rendezvous/grpc/security.h"

#include <cstdlib>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_text.h"
#include "grpcpp/security/server_credentials.h"
#include "rendezvous/grpc/scoped_token.h"

namespace ddprun::rendezvous {
namespace {

const char* NonEmptyEnv(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// The PEM certificates of every file in OpenSSL's certificate folders ($SSL_CERT_DIR, a
// ':'-separated list), each file once (the hashed names are links to the same files). As in
// OpenSSL, a folder that is not there is passed over; none with a certificate is an error.
absl::StatusOr<std::string> ReadCertificateFolders(const std::string& folders) {
  std::string pem;
  std::set<std::filesystem::path> seen;
  for (absl::string_view folder : absl::StrSplit(folders, ':', absl::SkipEmpty())) {
    std::error_code ec;
    std::filesystem::directory_iterator it(std::string(folder), ec);
    if (ec) continue;
    for (const auto& entry : it) {
      if (!entry.is_regular_file(ec)) continue;
      if (!seen.insert(std::filesystem::canonical(entry.path(), ec)).second) continue;
      absl::StatusOr<std::string> text = ReadRequiredFile("SSL_CERT_DIR file", entry.path());
      if (text.ok() && absl::StrContains(*text, "-----BEGIN CERTIFICATE-----")) {
        absl::StrAppend(&pem, *text, "\n");
      }
    }
  }
  if (pem.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SSL_CERT_DIR=", folders, ": no readable PEM certificate there"));
  }
  return pem;
}

// The CA certificates a client trusts when it was given no CA file; empty: gRPC's choice.
// gRPC honours its own GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, then finds the distributions' bundles
// itself (Debian/Ubuntu /etc/ssl/certs/ca-certificates.crt, RHEL /etc/pki/tls/certs/
// ca-bundle.crt and /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem, SLES
// /etc/ssl/ca-bundle.pem, and certificate folders), which the static build relies on too: its
// OpenSSL's compiled-in folder is the build host's. But gRPC ignores OpenSSL's SSL_CERT_FILE and
// SSL_CERT_DIR, which users set for every other TLS client: those are read here.
absl::StatusOr<std::string> DefaultRootCertificates() {
  if (NonEmptyEnv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH") != nullptr) return std::string();
  if (const char* file = NonEmptyEnv("SSL_CERT_FILE")) {
    return ReadRequiredFile("SSL_CERT_FILE", file);
  }
  if (const char* folders = NonEmptyEnv("SSL_CERT_DIR")) return ReadCertificateFolders(folders);
  return std::string();
}

}  // namespace

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
  } else {
    absl::StatusOr<std::string> roots = DefaultRootCertificates();
    if (!roots.ok()) return roots.status();
    options.pem_root_certs = *roots;
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
