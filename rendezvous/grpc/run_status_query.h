// The one-shot Status call of `ddprun status` (and of an agent asking another host whether it
// serves the run, served_run.h): one channel, one unary call, with options.rpc_timeout as its
// deadline.
//
// Stateless; thread-safe.
#ifndef DDPRUN_RENDEZVOUS_GRPC_RUN_STATUS_QUERY_H_
#define DDPRUN_RENDEZVOUS_GRPC_RUN_STATUS_QUERY_H_

#include <string>

#include "absl/status/statusor.h"
#include "rendezvous/api/run_status.h"
#include "rendezvous/grpc/client_options.h"

namespace ddprun::rendezvous {

// kUnauthenticated: the token was refused; kNotFound: no such run there; kUnavailable: anything
// else (no server, the deadline).
absl::StatusOr<RunStatus> QueryRunStatus(const ClientOptions& options, const std::string& run_id);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_RUN_STATUS_QUERY_H_
