// The server secret member keys are made from (rendezvous/core/member_keys.h): HMAC-SHA256 of
// the secret over the run id and the node id, and the secret file that lets ddprun-rdzv keep
// the secret across restarts (--secret-file).
//
// Thread-safety: HmacMemberKeys is immutable after construction; the functions are reentrant.
#ifndef DDPRUN_RENDEZVOUS_GRPC_MEMBER_SECRET_H_
#define DDPRUN_RENDEZVOUS_GRPC_MEMBER_SECRET_H_

#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "rendezvous/core/member_keys.h"

namespace ddprun::rendezvous {

inline constexpr size_t kMemberSecretBytes = 32;

class HmacMemberKeys final : public MemberKeys {
 public:
  // `secret`: raw bytes; empty: kMemberSecretBytes random ones (not durable).
  explicit HmacMemberKeys(std::string secret);

  // Hex of HMAC-SHA256(secret, "ddprun-member-key-v1" | len run | run | len node | node): the
  // lengths make ("ab", "c") and ("a", "bc") different.
  std::string KeyFor(const std::string& run_id, const std::string& node_id) const override;
  bool durable() const override { return durable_; }

 private:
  std::string secret_;
  bool durable_;
};

// Hex of HMAC-SHA256(key, message).
std::string HmacSha256Hex(std::string_view key, std::string_view message);
// The parts, each preceded by its length (8 bytes, little-endian): ("ab", "c") and ("a", "bc")
// make different messages.
std::string LengthPrefixed(std::initializer_list<std::string_view> parts);

// kMemberSecretBytes from the system's random source (OpenSSL's RAND_bytes).
absl::StatusOr<std::string> RandomMemberSecret();

// The secret in `path`: read when the file exists (it must be a regular file of at least 16
// bytes, readable by its owner only), else created with mode 0600 and kMemberSecretBytes random
// bytes (written to a temporary file, synced, renamed). Errors name the file:
// kInvalidArgument for a file that cannot serve (too short, readable by others, not a regular
// file), kUnavailable when it cannot be read or written.
absl::StatusOr<std::string> LoadOrCreateMemberSecret(const std::string& path);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_MEMBER_SECRET_H_
