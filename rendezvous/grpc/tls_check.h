// Checks the server's TLS files before serving: that the certificate file holds PEM
// certificates, the key file a PEM private key that belongs to the first certificate, and the
// client CA file PEM certificates. gRPC reads them only when the first client connects and then
// fails every handshake, so without this a bad file shows as clients that cannot connect.
// Pure apart from reading the files (OpenSSL).
#ifndef DDPRUN_RENDEZVOUS_GRPC_TLS_CHECK_H_
#define DDPRUN_RENDEZVOUS_GRPC_TLS_CHECK_H_

#include "absl/status/status.h"
#include "rendezvous/grpc/security.h"

namespace ddprun::rendezvous {

// OK for plaintext (no files). Else kInvalidArgument naming the file and what is wrong with it.
absl::Status CheckServerTlsFiles(const TlsServerFiles& tls);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_TLS_CHECK_H_
