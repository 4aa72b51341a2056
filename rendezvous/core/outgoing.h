// The decisions of the rendezvous state machine: which message goes to which agent stream.
// The transport (rendezvous_service.cc) only translates these into protobuf and writes them.
#ifndef DDPRUN_RENDEZVOUS_CORE_OUTGOING_H_
#define DDPRUN_RENDEZVOUS_CORE_OUTGOING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "rendezvous/api/preflight.h"
#include "rendezvous/api/rendezvous.h"
#include "rendezvous/api/run_config.h"

namespace ddprun::rendezvous {

// Identifies one agent stream. Chosen by the transport, unique for the server's lifetime.
using ConnId = uint64_t;

// The join was accepted; an assignment follows when a round forms.
struct JoinedNotice {
  std::string peer_host;
  Duration keep_alive_interval{};  // the run's; the agent heartbeats at least this often
  // This node's member key (ServerState fills it in; empty without MemberKeys): the agent
  // presents it when it re-registers.
  std::string member_key;
  // The node this one was before it rejoined under a new id (NodeInfo::formerly_node_id), as
  // far as the server believes it: empty when the join named none or could not prove it.
  std::string succeeds_node_id;
  // The run's liveness path (RunTimeouts::liveness); the transport adds where to send.
  LivenessSettings liveness;
};

// The round `round` is over; stop the workers and wait for the next assignment.
struct RestartNotice {
  int64_t round = 0;
  Cause cause = Cause::kUnspecified;  // one of kRestartCauses
  std::string reason;                 // for people and logs only
  std::optional<HangNotice> hang;     // a worker hung: every node takes stacks first
  int restart_count = 0;              // restarts spent so far, this one included
  RestartFacts facts;
};

// A re-registered node's round `round` goes on: its workers keep running.
struct ResumedNotice {
  int64_t round = 0;
};

// The run is over for this stream. After a CloseNotice the state machine has forgotten the
// stream: the transport writes it and then finishes the stream.
struct CloseNotice {
  absl::Status status;  // OK, kResourceExhausted (budget spent), else a rendezvous failure
  std::optional<WorkerFailure> root_cause;
  std::string straggler;  // when root_cause->hang
  // The run goes on without this node (its lease expired): an elastic agent that hears it
  // after all (it was stopped, or its link came back) stops its workers and rejoins as new.
  bool given_up = false;
};

struct Outgoing {
  ConnId conn = 0;
  std::variant<JoinedNotice, Assignment, RestartNotice, CloseNotice, ResumedNotice, StandbyNotice,
               PreflightRequest>
      msg;
};

using Outbox = std::vector<Outgoing>;

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CORE_OUTGOING_H_
