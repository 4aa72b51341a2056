// ServerState: every run a rendezvous server hosts, keyed by run id, plus which agent stream
// belongs to which run. Validates joins, enforces ServerLimits, routes events to the RunState of
// the stream's run and forgets runs when they are over. Pure: no I/O, no threads; `now` comes
// with every input.
//
// Member keys (member_keys.h): with `keys`, every Joined carries the node's key, and a
// re-registration must present it: for a node the run knows, a wrong key is refused
// (PERMISSION_DENIED); for a run this server would rebuild from claims (it lost it, or formed no
// round yet), a claim with a wrong key is ignored (the node joins as a newcomer) when the keys
// are durable, and accepted as unverified (logged) when they are not. Without `keys` (unit
// tests) nothing is checked. A join's formerly_node_id (a node rejoining under a new id) counts
// only with that former node's key (JoinRequest::formerly_member_key); without it the join is a
// plain new node's.
//
// Namespaces: a join carrying a scoped token's scope (JoinRequest::token_scope) is for the run
// ScopedRunId(scope, run_id); runs, member keys, status and log lines all use that id.
//
// Not thread-safe: the server's event loop is its only user.
#ifndef DDPRUN_RENDEZVOUS_CORE_SERVER_STATE_H_
#define DDPRUN_RENDEZVOUS_CORE_SERVER_STATE_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "rendezvous/api/run_config.h"
#include "rendezvous/core/member_keys.h"
#include "rendezvous/core/outgoing.h"
#include "rendezvous/core/run_state.h"
#include "rendezvous/core/server_metrics.h"

namespace ddprun::rendezvous {

class ServerState {
 public:
  explicit ServerState(ServerLimits limits = {}, std::shared_ptr<const MemberKeys> keys = nullptr,
                       RoundQuorum quorum = RoundQuorum::kAnyNodes)
      : limits_(std::move(limits)), keys_(std::move(keys)), quorum_(quorum) {}

  Outbox Join(ConnId conn, const JoinRequest& request, TimePoint now);
  // `progress`: the agent's workers' last signs of life (empty: none sent).
  Outbox Heartbeat(ConnId conn, const std::vector<RankProgress>& progress, TimePoint now);
  // The agent's workers' compute times (a heartbeat's `compute`): the run's slow-node judge's
  // verdict on the node when it changed (`change`, for the log), and an eviction's messages.
  Outbox Compute(ConnId conn, const std::vector<RankCompute>& compute, TimePoint now,
                 std::optional<SlowNodeChange>* change);
  // What the agent measured for the checkpoint advice (a heartbeat's `checkpoint`).
  void Checkpoint(ConnId conn, const CheckpointReport& report, TimePoint now);
  // What the agent measured in its run's preflight (RunState::Preflight).
  Outbox Preflight(ConnId conn, const PreflightReport& report, TimePoint now);
  // The checkpoint advice of `conn`'s run (seconds between checkpoints); 0: none yet.
  double CheckpointIntervalOf(ConnId conn) const;
  // Returns the outbox; `result` (optional) gets kAborted for a stale round.
  Outbox GroupStatus(ConnId conn, int64_t round, GroupState state,
                     const std::optional<WorkerFailure>& failure, TimePoint now,
                     absl::Status* result = nullptr);
  Outbox Leave(ConnId conn, const std::string& reason, TimePoint now);
  // A step of the agent's run timeline (kept for the status page; renews its lease).
  Outbox Step(ConnId conn, const std::string& json, TimePoint now);
  Outbox StreamBroken(ConnId conn, TimePoint now);
  // The liveness path found the agent silent (RunState::Silent).
  Outbox Silent(ConnId conn, Duration silent_for, TimePoint now);
  Outbox Tick(TimePoint now);

  // When Tick next has something to do; nullopt: nothing pending.
  std::optional<TimePoint> NextDeadline() const;

  absl::StatusOr<RunStatus> Status(const std::string& run_id) const;
  size_t num_runs() const { return runs_.size(); }
  size_t num_conns() const { return conn_run_.size(); }
  bool HasJoined(ConnId conn) const { return conn_run_.count(conn) > 0; }
  // The run a joined stream belongs to; empty when none.
  std::string RunIdOf(ConnId conn) const {
    auto it = conn_run_.find(conn);
    return it == conn_run_.end() ? std::string() : it->second;
  }
  const ServerLimits& limits() const { return limits_; }
  // Counters for /metrics; the service adds the calls it refuses itself.
  ServerMetrics& metrics() { return metrics_; }
  // Every run's status, by run id (for /metrics and the status page; see RunState::Status).
  std::vector<RunStatus> AllStatus(bool with_members) const;
  // Lines for the server's log (warnings) since the last call: refused and unverified
  // re-registrations. At most kMaxUntaken are kept.
  std::vector<std::string> TakeSecurityLog() { return std::exchange(security_log_, {}); }
  // Lines of the runs for the server's log (info) since the last call: the preflight's verdicts
  // (RunState::TakeLog). At most kMaxUntaken are kept.
  std::vector<std::string> TakeRunLog() { return std::exchange(run_log_, {}); }

  // RunState::SilenceVerdictOf for a joined stream (kByLease for any other).
  SilenceVerdict SilenceVerdictOf(ConnId conn) const;
  // The verdicts to offer since the last call (the liveness receiver's Offer, idempotent): the
  // streams each event spoke to, and every stream of a run whose spare readiness changed.
  std::vector<std::pair<ConnId, SilenceVerdict>> TakeVerdictOffers() {
    return std::exchange(verdict_offers_, {});
  }

 private:
  struct Run {
    std::unique_ptr<RunState> state;
    std::optional<TimePoint> closed_at;  // set once closed and without agents
    std::string creator_peer;            // the address of its first join (max_runs_per_client)
    bool warned_unverified = false;      // an unverified claim of it was logged
    bool spare_stood_ready = false;      // RunState::SpareStandsReady after the last event
  };

  absl::Status Validate(const JoinRequest& request) const;
  // Checks a re-registration's member key (see the class comment). Returns a refusal, or OK
  // with `*request` possibly stripped of its claim.
  absl::Status CheckMemberKey(JoinRequest* request);
  // Clears a join's formerly_node_id that does not come with that node's member key (logged).
  void CheckFormerMemberKey(JoinRequest* request);
  // A new run for `request`, or the refusal of the server's limits.
  absl::Status CheckRunLimits(const JoinRequest& request) const;
  // Forgets the run and what metrics_ keeps of it alone (its recoveries).
  void Forget(std::map<std::string, Run>::iterator it);
  // Forgets the oldest closed runs beyond limits_.max_closed_runs.
  void TrimClosedRuns();
  void SecurityLog(std::string line);
  // Keeps conn_run_ in step with `out` (a closed stream is forgotten) and retires empty runs.
  void AfterEvent(const std::string& run_id, const Outbox& out, TimePoint now);
  // The verdicts an event on `run` changed (verdict_offers_).
  void OfferVerdicts(Run& run, const Outbox& out);
  Run* RunOf(ConnId conn, std::string* run_id);

  const ServerLimits limits_;
  const std::shared_ptr<const MemberKeys> keys_;
  const RoundQuorum quorum_;  // of every run this server creates
  std::vector<std::string> security_log_;
  std::vector<std::string> run_log_;
  std::vector<std::pair<ConnId, SilenceVerdict>> verdict_offers_;
  std::map<std::string, Run> runs_;
  std::unordered_map<ConnId, std::string> conn_run_;
  ServerMetrics metrics_;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CORE_SERVER_STATE_H_
