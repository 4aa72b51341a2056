#include "rendezvous/security.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"

namespace ddprun::rendezvous {
namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(what, ": cannot read ", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// Constant time in the length of `expected`, so the comparison does not leak a prefix match.
bool SecureEquals(absl::string_view got, absl::string_view expected) {
  unsigned char diff = got.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>(expected[i]) ^
            static_cast<unsigned char>(i < got.size() ? got[i] : 0);
  }
  return diff == 0;
}

absl::StatusOr<std::string> LoadToken(const std::string& token_file) {
  if (!token_file.empty()) {
    absl::StatusOr<std::string> text = ReadWholeFile("token_file", token_file);
    if (!text.ok()) return text.status();
    std::string line = text->substr(0, text->find('\n'));
    absl::StripAsciiWhitespace(&line);
    if (line.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("token_file: ", token_file, " is empty"));
    }
    return line;
  }
  const char* env = std::getenv(kTokenEnv);
  if (env == nullptr) return std::string();
  std::string token(env);
  absl::StripAsciiWhitespace(&token);
  return token;
}

std::string AuthMetadataValue(absl::string_view token) { return absl::StrCat("Bearer ", token); }

bool BearerHasToken(absl::string_view authorization, absl::string_view token) {
  if (token.empty()) return true;
  const absl::string_view prefix = "Bearer ";
  if (authorization.substr(0, prefix.size()) != prefix) return false;
  return SecureEquals(authorization.substr(prefix.size()), token);
}

bool CallHasToken(const grpc::ServerContextBase& context, absl::string_view token) {
  if (token.empty()) return true;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthMetadataKey);
  if (it == metadata.end()) return false;
  return BearerHasToken(absl::string_view(it->second.data(), it->second.size()), token);
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
  absl::StatusOr<std::string> cert = ReadWholeFile("TLS certificate", tls.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadWholeFile("TLS key", tls.key_file);
  if (!key.ok()) return key.status();
  pair.cert_chain = *cert;
  pair.private_key = *key;
  options.pem_key_cert_pairs.push_back(pair);
  if (!tls.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadWholeFile("TLS client CA", tls.client_ca_file);
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
    absl::StatusOr<std::string> ca = ReadWholeFile("TLS CA", tls.ca_file);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  if (!tls.cert_file.empty() || !tls.key_file.empty()) {
    absl::StatusOr<std::string> cert = ReadWholeFile("TLS certificate", tls.cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadWholeFile("TLS key", tls.key_file);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return grpc::SslCredentials(options);
}

}  // namespace ddprun::rendezvous
