// How the run tells a node it was evicted as slow (--evict-slow, issue 41; docs/design.md §3b):
// a close status of its own, so that the agent says so and exits 5, rather than reporting a
// rendezvous failure (exit 3) that nothing failed to do.
#ifndef DDPRUN_RENDEZVOUS_API_EVICTION_H_
#define DDPRUN_RENDEZVOUS_API_EVICTION_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace ddprun::rendezvous {

// kFailedPrecondition (the wire's Close.code, which agents from before Close.ending read as a
// rendezvous failure), marked as an eviction (Close.ending EVICTED).
inline constexpr char kEvictedPayloadUrl[] = "type.googleapis.com/ddprun.Evicted";
inline absl::Status EvictedStop(const std::string& message) {
  absl::Status status = absl::FailedPreconditionError(message);
  status.SetPayload(kEvictedPayloadUrl, absl::Cord("evicted"));
  return status;
}
inline bool IsEvictedStop(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition &&
         status.GetPayload(kEvictedPayloadUrl).has_value();
}

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_API_EVICTION_H_
