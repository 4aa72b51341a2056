// Plain configuration of the rendezvous state machine: what one run agrees on, the timeouts of a
// run (torchrun's --rdzv-conf keys), and the server's limits.
#ifndef DDPRUN_RENDEZVOUS_API_RUN_CONFIG_H_
#define DDPRUN_RENDEZVOUS_API_RUN_CONFIG_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/message_limit.h"
#include "rendezvous/api/preflight.h"
#include "rendezvous/api/rendezvous.h"

namespace ddprun::rendezvous {

// When the liveness path's detector, rather than the lease, may give a silent member up
// (--rdzv-conf liveness=off|auto|on; docs/design.md §3a).
enum class LivenessMode {
  kOff,   // no liveness path: the lease alone
  kAuto,  // the path runs; a silence loses a member only while a spare stands ready to take its
          // group rank. Without one, a quick verdict buys nothing (a fixed world waits for the
          // node anyway) and would turn every short flap of a link into a restart.
  kOn,    // a silence loses any node at once
};

// Who decides that one node, fallen silent, is lost: what the server offers in its liveness acks
// and what the agent's local lease is ready for in its heartbeats (rendezvous/liveness/packet.h).
// The server judges the node by its detector only once the agent said it follows (its workers'
// local lease then ends before the detector may suspect the node: launcher/fence/).
enum class SilenceVerdict : uint8_t {
  kByLease = 0,    // the lease (keep_alive_interval x keep_alive_max_attempt)
  kBySilence = 1,  // the liveness detector, in a few hundred ms
};

// The liveness path of one run (issue 40, rendezvous/liveness/, docs/design.md §3a): heartbeat
// datagrams every `interval` from each agent to the server, which answers each one; a phi
// accrual detector on each side finds a silent peer in a few hundred ms. The defaults are the
// detector's (rendezvous/detector/phi_accrual.h); the lease stays the backstop.
struct LivenessSettings {
  LivenessMode mode = LivenessMode::kOff;
  bool on() const { return mode != LivenessMode::kOff; }
  Duration interval = std::chrono::milliseconds(20);
  double phi = 8.0;
  Duration pause = std::chrono::milliseconds(120);
  Duration min_sd = std::chrono::milliseconds(20);
  // Observers that must agree before a silent node is lost. Only the server observes today, so
  // 1 is the only value accepted (ring observers: issue 40's plan, step 5).
  int observers = 1;
  // Heartbeats a second the server takes from one run at most: a run too large for `interval`
  // within it heartbeats more slowly (LivenessForRunOf). At about 6 us of server CPU a datagram
  // (bench/rendezvous/RESULTS.md), 100,000/s is 0.6 of a core: 10,000 agents at 100 ms.
  int64_t max_rate = 100000;
};

// The settings a run of at most `max_nodes` agents runs with: `asked`, with the interval
// stretched where max_nodes heartbeats every asked.interval would exceed asked.max_rate (the
// server decides it and tells every agent in Joined; a run up to 2,000 nodes keeps 20 ms at the
// defaults). The pause and the spread floor stay: the local lease (launcher/fence/) and the
// earliest suspicion do not depend on the interval.
inline LivenessSettings LivenessForRunOf(const LivenessSettings& asked, int max_nodes) {
  LivenessSettings run = asked;
  if (max_nodes <= 0 || asked.max_rate <= 0) return run;
  const auto at_rate = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(
      static_cast<double>(max_nodes) / static_cast<double>(asked.max_rate)));
  const Duration whole_ms = std::chrono::ceil<std::chrono::milliseconds>(at_rate);
  run.interval = std::max(asked.interval, whole_ms);
  return run;
}

// kInvalidArgument naming the first bad setting by its --rdzv-conf key; OK otherwise. The
// ranges keep the detector's model sane (phi_accrual.h: ValidateAccrualOptions) and the packet
// rate bounded: at most 1000 heartbeats a second per agent.
inline absl::Status ValidateLivenessSettings(const LivenessSettings& l) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  auto bad = [](const char* key, const std::string& value, const char* range) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rdzv-conf ", key, "=", value, ": must be ", range));
  };
  auto ms = [](Duration d) { return std::to_string(ToMillis(d)); };
  if (l.interval < milliseconds(1) || l.interval > seconds(10)) {
    return bad("liveness_interval_ms", ms(l.interval), "1 to 10000");
  }
  if (!(l.phi >= 1 && l.phi <= 30)) return bad("liveness_phi", absl::StrCat(l.phi), "1 to 30");
  if (l.pause < Duration::zero() || l.pause > seconds(60)) {
    return bad("liveness_pause_ms", ms(l.pause), "0 to 60000");
  }
  if (l.min_sd < milliseconds(1) || l.min_sd > seconds(60)) {
    return bad("liveness_min_sd_ms", ms(l.min_sd), "1 to 60000");
  }
  if (l.max_rate < 100 || l.max_rate > 10000000) {
    return bad("liveness_max_rate", std::to_string(l.max_rate), "100 to 10000000");
  }
  if (l.observers != 1) {
    return bad("liveness_observers", std::to_string(l.observers),
               "1 (the server is the only observer built so far)");
  }
  return absl::OkStatus();
}

// What the run does with a member the slow-node judge names (issue 41, rendezvous/stragglers/).
struct SlowNodePolicy {
  // --evict-slow: while a spare stands ready, the named node is closed out of the run and the
  // spare takes its group rank (a free restart: no unit of --max-restarts). Off: named only.
  bool evict = false;
};

// Timeouts of one run. The first agent to join a run sets them (defaults are torchrun's).
struct RunTimeouts {
  // How long a round may stay below min_nodes before the run is closed.
  Duration join_timeout = std::chrono::seconds(600);
  // Once a forming round has >= min_nodes (but < max_nodes), how long to wait for more.
  Duration last_call_timeout = std::chrono::seconds(30);
  // The same wait for the round that follows a failure. Unset: last_call_timeout. In-process
  // recovery sets 0: the survivors keep their workers and re-form at once, and a node that comes
  // back later joins the next round (a scale-up, which costs the survivors one more cheap
  // re-formation) instead of every survivor idling for it.
  std::optional<Duration> failure_last_call_timeout;
  // Agents heartbeat every keep_alive_interval; a node is lost after
  // keep_alive_interval * keep_alive_max_attempt without any message from it.
  Duration keep_alive_interval = std::chrono::seconds(5);
  int keep_alive_max_attempt = 3;
  LivenessSettings liveness;
  SlowNodePolicy slow_nodes;
  // --rdzv-conf mtbf=: the run's mean time between failures as the checkpoint advice's prior,
  // until its own history says more (rendezvous/checkpoints/). Unset: no prior.
  std::optional<Duration> mtbf;
  // --preflight: the nodes' measurements before the first round (rendezvous/preflight/).
  PreflightSettings preflight;

  Duration lease() const { return keep_alive_interval * keep_alive_max_attempt; }
};

// What the other agents do when the agent that hosts an embedded server is gone (the server's
// address refuses connections).
enum class HostLoss {
  // The first surviving member of the last round serves the run at its own address, on the
  // same port, and the others re-register there (c10d: any node may host).
  kFailOver,
  // Re-register at the same address until read_timeout: the host's agent comes back there (a
  // static job's node 0 at MASTER_ADDR, where its workers' store lives too, so no other node
  // could carry the job on anyway).
  kAwaitReturn,
};

// Which nodes may form a run's next round.
enum class RoundQuorum {
  // Any min_nodes of them (a server outside the job: ddprun-rdzv, or etcd).
  kAnyNodes,
  // Also a majority of the last round's members (an embedded server, which a partition may
  // leave serving one side while a successor serves the other: last_round_majority.h).
  kMajorityOfLastRound,
};

// A join as the state machine sees it: what the agent said plus what the transport saw.
struct JoinRequest {
  NodeInfo node;
  RunTimeouts timeouts;
  std::string peer_host;  // the address the agent connected from, without port or brackets
  std::optional<ResumeClaim> resume;  // set when the agent re-registers
  // With `resume`: the member key the server gave this node in Joined (its proof of identity).
  std::string member_key;
  // With node.formerly_node_id: the key of that former node, proving this agent was it.
  std::string formerly_member_key;
  // The namespace of the token the call carried (a scoped token, ScopedRunId); empty: the
  // server's own token, or no authentication.
  std::string token_scope;
};

// The id a server keeps a run under: `run_id` itself for the server's own token, else
// "<scope>/<run_id>". Run ids never contain '/' (the server refuses them), so runs of different
// scopes, and of the server token, never share an id.
inline std::string ScopedRunId(const std::string& scope, const std::string& run_id) {
  return scope.empty() ? run_id : scope + "/" + run_id;
}

// Limits that keep one server (and one hostile or buggy client) from using unbounded memory.
struct ServerLimits {
  // Open runs (not closed) this server hosts at once; closed runs that are still remembered
  // (closed_run_retention) do not count.
  int max_runs = 64;
  // Open runs created by one client (the peer address of the run's first join); 0: no limit of
  // its own (max_runs only). One host cannot take every slot of a shared server.
  int max_runs_per_client = 16;
  // Closed runs remembered at once (for Status and the page); beyond this the oldest closed run
  // is forgotten early. Bounds memory now that closed runs do not count against max_runs.
  int max_closed_runs = 1024;
  int max_nodes_per_run = 16384;  // connected agents of one run (members and waiting)
  size_t max_id_length = 256;     // run id, node id, hostname, local addr
  size_t max_message_length = kMaxMessageBytes;  // failure and leave messages are abbreviated
  // Open agent streams, joined or not; more are refused (RESOURCE_EXHAUSTED).
  int max_streams = 65536;
  // A stream that has not joined this long after it opened is closed, so that idle or hostile
  // connections cannot pile up.
  Duration first_join_timeout = std::chrono::seconds(10);
  // Messages read from one stream but not yet handled by the server's loop; a stream that runs
  // further ahead is flooding and is closed (RESOURCE_EXHAUSTED), so memory stays bounded.
  int max_queued_messages_per_stream = 1024;
  // A closed run is remembered this long (so late agents are told why) once it has no agents.
  Duration closed_run_retention = std::chrono::seconds(300);
  // The secret member keys are made from (rendezvous/grpc/member_keys.h), carried here because
  // the limits are what reaches the service from ServerOptions. Empty: a random secret per
  // server process (claims a restarted server cannot verify are accepted, and logged, for the
  // recovery). Set from ddprun-rdzv --secret-file: keys survive restarts and are verified after.
  std::string member_secret;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_API_RUN_CONFIG_H_
