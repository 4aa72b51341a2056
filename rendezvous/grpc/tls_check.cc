#include "rendezvous/grpc/tls_check.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_text.h"

namespace ddprun::rendezvous {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

Bio MemoryBio(const std::string& text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// No passphrase: an encrypted key is refused rather than asked for on a terminal.
int NoPassphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*u*/) { return 0; }

// OpenSSL's reason for the last failure, or "".
std::string OpenSslReason() {
  const unsigned long err = ERR_peek_last_error();
  ERR_clear_error();
  if (err == 0) return "";
  const char* reason = ERR_reason_error_string(err);
  return reason == nullptr ? "" : absl::StrCat(" (", reason, ")");
}

// The certificates of a PEM file; an error when it holds none or a broken one.
absl::StatusOr<std::vector<Cert>> ReadCertificates(const std::string& what,
                                                   const std::string& path) {
  absl::StatusOr<std::string> text = ReadRequiredFile(what, path);
  if (!text.ok()) return text.status();
  Bio bio = MemoryBio(*text);
  std::vector<Cert> certs;
  ERR_clear_error();
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, &NoPassphrase, nullptr))
    certs.emplace_back(x);
  // The loop ends at the end of the file (PEM_R_NO_START_LINE) or at a broken certificate.
  const unsigned long err = ERR_peek_last_error();
  const bool at_end = ERR_GET_LIB(err) == ERR_LIB_PEM && ERR_GET_REASON(err) == PEM_R_NO_START_LINE;
  if (certs.empty() || !at_end) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", path,
        certs.empty() ? " holds no PEM certificate" : " has a certificate that cannot be parsed",
        at_end ? std::string() : OpenSslReason()));
  }
  ERR_clear_error();
  return certs;
}

}  // namespace

absl::Status CheckServerTlsFiles(const TlsServerFiles& tls) {
  if (tls.cert_file.empty() || tls.key_file.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<Cert>> certs = ReadCertificates("TLS certificate", tls.cert_file);
  if (!certs.ok()) return certs.status();
  absl::StatusOr<std::string> key_text = ReadRequiredFile("TLS key", tls.key_file);
  if (!key_text.ok()) return key_text.status();
  Bio bio = MemoryBio(*key_text);
  ERR_clear_error();
  Key key(PEM_read_bio_PrivateKey(bio.get(), nullptr, &NoPassphrase, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS key: ", tls.key_file,
        " holds no usable PEM private key (an unencrypted one is needed)", OpenSslReason()));
  }
  if (X509_check_private_key(certs->front().get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS key: ", tls.key_file, " does not belong to the certificate in ", tls.cert_file));
  }
  if (!tls.client_ca_file.empty()) {
    absl::StatusOr<std::vector<Cert>> ca = ReadCertificates("TLS client CA", tls.client_ca_file);
    if (!ca.ok()) return ca.status();
  }
  return absl::OkStatus();
}

}  // namespace ddprun::rendezvous
