// ClientOptions: how an agent (or `ddprun status`) reaches the built-in rendezvous server.
// A plain options struct; the callbacks are invoked on the RendezvousClient's own thread.
#ifndef DDPRUN_RENDEZVOUS_GRPC_CLIENT_OPTIONS_H_
#define DDPRUN_RENDEZVOUS_GRPC_CLIENT_OPTIONS_H_

#include <chrono>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "common/clock.h"
#include "rendezvous/api/run_config.h"
#include "rendezvous/grpc/security.h"

namespace ddprun::rendezvous {

struct ClientOptions {
  std::string endpoint;  // "host:port", "[::1]:port"
  // Shared token (LoadToken()); empty: send none.
  std::string token;
  TlsClientFiles tls;
  // Sent with the join (the first agent of a run sets the run's timeouts). keep_alive_interval
  // also paces this client's heartbeats.
  RunTimeouts timeouts;
  // How long to keep trying to reach the server before giving up (torchrun's read_timeout).
  std::chrono::milliseconds read_timeout{60000};
  // After Leave(), how long to wait for the server to close the stream before cutting it.
  std::chrono::milliseconds close_timeout{2000};
  // Deadline of unary calls (QueryRunStatus).
  std::chrono::milliseconds rpc_timeout{10000};
  // Failover of an embedded server: called on the client's thread when this agent is the
  // successor of the agent that hosted the run's server and is gone; it starts serving on
  // `port` here. Unset: this client never hosts (it still follows the others to the successor).
  std::function<absl::Status(int port)> host_failover;
  // What happens when that agent is gone: a successor takes over, or its return is awaited.
  HostLoss host_loss = HostLoss::kFailOver;
  // Called on the client's thread when the server this agent hosts (from the start, or as a
  // successor) cannot form rounds and another server of the run went on without it (the two
  // sides of a healed partition): it stops serving, and this client joins the other one.
  // Unset: this client never looks for another server of its run.
  std::function<void()> stop_hosting;
  // Called on the client's thread each time the server vouches for this node: with the time
  // this client sent the heartbeat an ack answers (acks come in order, one per heartbeat), or
  // when a Joined arrived (joining, the node has no workers that could commit). Never for a
  // word that answers nothing (it may have been read late, after the node was given up).
  // The local lease (launcher/fence/local_lease.h) is renewed from it. Unset: nobody listens.
  std::function<void(TimePoint heard_from)> on_server_heard;
  // The same for each liveness ack (rendezvous/liveness/), with the send time of the heartbeat
  // it answers and the verdict the server offers for this node; called on the liveness sender's
  // thread. Under kBySilence the lease takes the short length and ignores on_server_heard;
  // under kByLease it follows on_server_heard (LocalLease::Renew).
  std::function<void(TimePoint heard_from, SilenceVerdict offered)> on_liveness_ack;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_CLIENT_OPTIONS_H_
