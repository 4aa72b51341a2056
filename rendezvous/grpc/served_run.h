// Where else a run is served, and which of two servers of one run the agents follow.
//
// Two servers can serve one run of an embedded server after a partition: the agent that hosted
// it, on one side, and a successor on the other (rendezvous_client.h, failover on silence).
// The majority rule (core/last_round_majority.h) lets at most one of them form rounds. Once
// the link is back, an agent hosting a server that cannot go on asks the others' addresses and
// moves to the one that did: Supersedes() is the order every agent applies the same way.
#ifndef DDPRUN_RENDEZVOUS_GRPC_SERVED_RUN_H_
#define DDPRUN_RENDEZVOUS_GRPC_SERVED_RUN_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "rendezvous/grpc/rendezvous_client.h"

namespace ddprun::rendezvous {

// An open run as one server serves it.
struct ServedRun {
  std::string endpoint;
  int64_t round = 0;
  size_t agents = 0;  // connected: members and waiting
  // Where the server stands in the job's order of hosts: -1 for the endpoint the user gave
  // (the original host), else the group rank of the node hosting it in the last round.
  int order = 0;
  std::string server_instance;  // RunStatus::server_instance
  bool running = false;         // a round runs there (RunPhase::kRunning)
};

// The run `run_id` at `endpoint`, when that server serves it open. The address is probed
// first (TCP, `probe_timeout`) so that refused or silent hosts cost little; then one Status
// call bounded by `rpc_timeout`.
std::optional<ServedRun> AskServer(ClientOptions options, const std::string& endpoint,
                                   const std::string& run_id,
                                   std::chrono::milliseconds probe_timeout,
                                   std::chrono::milliseconds rpc_timeout);

// Whether the agents of `mine` should move to `other`: a round running there (the side that
// went on; a side without a majority cannot run one, however many newcomers it gathered), then a
// later round, then the same round with more agents, then as many and earlier in the order of
// hosts. A total order, so two servers never each move to the other.
bool Supersedes(const ServedRun& other, const ServedRun& mine);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_SERVED_RUN_H_
