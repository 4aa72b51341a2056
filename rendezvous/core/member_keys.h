// MemberKeys: what binds a member of a run to the agent that joined as it. The server gives each
// node a key in Joined; a re-registration (a join with a ResumeClaim) for a node the run knows
// must present it, so that another token holder cannot take the node's place (docs/design.md
// §3, "Security"). Keys are a function of a server secret, the run id and the node id, so a key
// of one run proves nothing in another.
//
// This is the interface ServerState uses (pure: it only compares strings); the HMAC-SHA256
// implementation lives with the gRPC service (rendezvous/grpc/member_secret.h). Implementations
// are immutable after construction and thread-safe.
#ifndef DDPRUN_RENDEZVOUS_CORE_MEMBER_KEYS_H_
#define DDPRUN_RENDEZVOUS_CORE_MEMBER_KEYS_H_

#include <string>
#include <string_view>

namespace ddprun::rendezvous {

class MemberKeys {
 public:
  virtual ~MemberKeys() = default;
  // The key of node `node_id` in run `run_id`: the same for the same arguments and secret.
  virtual std::string KeyFor(const std::string& run_id, const std::string& node_id) const = 0;
  // True when the secret outlives this server process (ddprun-rdzv --secret-file): keys an
  // earlier process issued verify here too, so claims for runs this process lost are checked.
  virtual bool durable() const = 0;
};

// Compares two keys in time that depends on their lengths only, not on where they differ.
inline bool SameKey(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CORE_MEMBER_KEYS_H_
