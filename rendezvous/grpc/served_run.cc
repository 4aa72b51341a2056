#include "rendezvous/grpc/served_run.h"

#include <tuple>
#include <utility>

#include "rendezvous/client/endpoint_probe.h"
#include "rendezvous/grpc/run_status_query.h"

namespace ddprun::rendezvous {

std::optional<ServedRun> AskServer(ClientOptions options, const std::string& endpoint,
                                   const std::string& run_id,
                                   std::chrono::milliseconds probe_timeout,
                                   std::chrono::milliseconds rpc_timeout) {
  if (ProbeEndpoint(endpoint, probe_timeout) != ProbeResult::kAccepting) return std::nullopt;
  options.endpoint = endpoint;
  options.rpc_timeout = rpc_timeout;
  options.host_failover = nullptr;
  options.stop_hosting = nullptr;
  absl::StatusOr<RunStatus> status = QueryRunStatus(options, run_id);
  if (!status.ok() || status->phase == RunPhase::kClosed) return std::nullopt;
  ServedRun run;
  run.endpoint = endpoint;
  run.round = status->round;
  run.agents = status->members.size();
  run.server_instance = status->server_instance;
  run.running = status->phase == RunPhase::kRunning;
  return run;
}

bool Supersedes(const ServedRun& other, const ServedRun& mine) {
  // Running, later round, more agents, earlier host: greater is better, so the order is negated.
  return std::make_tuple(other.running, other.round, other.agents, -other.order) >
         std::make_tuple(mine.running, mine.round, mine.agents, -mine.order);
}

}  // namespace ddprun::rendezvous
