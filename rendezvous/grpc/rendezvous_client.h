// RendezvousClient: the agent's side of the built-in rendezvous (implements Rendezvous over the
// gRPC stream of proto/rendezvous.proto). One stream per Join; the server pushes assignments,
// restarts and close; the client sends the join, heartbeats every keep_alive_interval, group
// status and leave.
//
// Connecting is retried (gRPC wait-for-ready with a short reconnect backoff) until the server
// acknowledges the join or read_timeout passes; then OnClosed(kUnavailable) names the address.
// A stream that breaks before the acknowledgement (UNAVAILABLE: the link, a restarting server)
// is started again after a backoff within the same budget.
// A refused token gives OnClosed(kUnauthenticated).
// A broken stream is not the end: the workers keep running (OnReconnecting) while the client
// reconnects with backoff and re-registers with a ResumeClaim (its last assignment, restarts
// heard of, how its group is doing), so that a restarted server can rebuild the run
// (run_state_recovery.cc); OnResumed when the server says the round goes on. No server for
// read_timeout after the break: OnClosed(kUnavailable).
// Fencing: the server acknowledges every heartbeat; no word from it for the lease
// (keep_alive_interval x keep_alive_max_attempt) means this node is cut off and already given
// up: a fixed-size job closes with kUnavailable ("fenced"); an elastic one (min < max) gets
// OnRestart (stop the workers) and joins again as a new node, retrying until join_timeout
// whatever the old or new connection reports while the link is still down.
// While reconnecting, a lease of silence fences too unless the server's address refuses
// connections (ProbeEndpoint): a server that is down decides nothing about anyone.
// An embedded server (hosted by another agent) is not fenced from but failed over: when its
// address refuses, or it is silent for the lease, the client walks the successors of its last
// assignment (the first one hosts); the majority rule keeps a cut-off minority from running a
// world of its own. An agent whose own server has formed no round for a lease asks the other
// hosts whether one of them went on with the run (served_run.h) and moves there.
//
// Threading: the client owns one internal LoopThread for its connection state; gRPC reactor
// callbacks only post to it. RendezvousEvents are delivered on the agent's Executor. Join,
// ReportGroupState and Leave may be called from any thread (normally the agent's loop). After
// Leave() returns, or once the client is destroyed, no event reaches the agent.
#ifndef DDPRUN_RENDEZVOUS_GRPC_RENDEZVOUS_CLIENT_H_
#define DDPRUN_RENDEZVOUS_GRPC_RENDEZVOUS_CLIENT_H_

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/executor.h"
#include "rendezvous/api/event_delivery.h"
#include "rendezvous/api/rendezvous.h"
#include "rendezvous/api/run_config.h"
#include "rendezvous/api/run_status.h"
#include "rendezvous/grpc/security.h"

namespace grpc {
class Channel;
}
namespace ddprun::proto {
class ServerMessage;
}

namespace ddprun {
class LoopThread;
}  // namespace ddprun

namespace ddprun::rendezvous {

class AgentCall;
struct ServedRun;

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
};

// A channel to `options.endpoint` with the client's credentials, keepalive and reconnect
// arguments. Several clients may share one (the load generator does).
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeRendezvousChannel(const ClientOptions& options);

class RendezvousClient final : public Rendezvous {
 public:
  // `executor` runs the RendezvousEvents callbacks and must outlive the client. `channel`:
  // nullptr makes one from `options`.
  RendezvousClient(ClientOptions options, Executor* executor,
                   std::shared_ptr<grpc::Channel> channel = nullptr);
  ~RendezvousClient() override;  // cancels the stream if still open (the server sees a loss)

  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  // Only the first call has an effect.
  void Join(const NodeInfo& node, RendezvousEvents* events) override;
  void ReportGroupState(int64_t round, GroupState state,
                        const std::optional<WorkerFailure>& failure) override;
  void ReportProgress(const std::vector<RankProgress>& progress, bool urgent) override;
  void ReportStep(const std::string& json) override;
  void Leave(const std::string& reason) override;
  // A leave on the stream (the server closes it), then silence; StepIn joins as a new node
  // within join_timeout, as after a fence.
  void StepOut(const std::string& reason) override;
  void StepIn() override;

  // Cuts the stream without a leave, as a crashed agent would (tests): no reconnect, no
  // events after it.
  void CancelForTesting();

 private:
  // Internal loop only.
  // A new stream with a Join; `connect_budget` bounds reaching the server (`budget_name` for
  // the message).
  void StartCall(std::chrono::milliseconds connect_budget, const char* budget_name);
  // The stream broke after the join: keep the workers, reconnect and re-register.
  void Reconnect(const std::string& why);
  // The stream broke before the join was acknowledged: a new call after a backoff, until the
  // budget of the first call of this join (connect_deadline_) runs out.
  void RetryJoin(const std::string& why);
  void RetireCall();  // call_ to retired_calls_, where its last reactions are awaited
  // The embedded server's stream broke: refused → StartFailover (HostLoss::kAwaitReturn:
  // Reconnect); accepting 5 probes in a row → Reconnect; anything else is probed again until
  // `until`, then the run ends here.
  void DecideFailover(const std::string& why, TimePoint until, int accepting_in_a_row);
  static constexpr std::chrono::milliseconds kFailoverProbing{1000};
  // Walks the successors of the last assignment, skipping the host. `host_refused`: the
  // host's address refused connections, so its agent is certainly gone (the claims say so and
  // the successor does not wait for it); otherwise it was only silent for the lease.
  void StartFailover(const std::string& why, bool host_refused);
  // A lease without a word from an embedded server hosted by another agent: that host may be
  // gone or cut off, or this node may be. The survivors fail over all the same: the majority
  // rule keeps a cut-off minority (its successor, or the old host) from forming a round.
  bool FailsOverOnSilence() const;
  // A new assignment's members become successors_; those of the previous ones it lacks are
  // kept in earlier_members_ for MaybeLookForTheRun.
  void RememberMembers(const std::vector<Successor>& members);
  static constexpr size_t kMaxEarlierMembers = 64;
  // While this agent hosts the run's server and has waited a lease without a round: asks the
  // other hosts of the last round and of earlier ones, on probe_loop_, whether one of them serves
  // the run and went on; FollowServedRun moves there.
  void MaybeLookForTheRun();
  void FollowServedRun(const ServedRun& other, const ServedRun& mine);
  void AdvanceFailover();  // the next successor, hosting here when it is this node
  // keep_alive_max_attempt heartbeats (at least one), and the silence they span: fencing's
  // measure, and the time a successor gets to take the run.
  int LeaseAttempts() const { return std::max(1, options_.timeouts.keep_alive_max_attempt); }
  Duration Lease() const { return heartbeat_interval_ * LeaseAttempts(); }
  std::chrono::milliseconds NextBackoff();
  // While reconnecting: a lease of silence fences, unless the server's address refuses
  // connections (it is down: silence counts again from its return).
  void JudgeSilenceWhileReconnecting();
  // No word from the server for the lease: stop (fixed world) or rejoin as a new node.
  void Fence(const std::string& why);
  // A new call joining as the new node `node_` has become, within join_timeout.
  void JoinAsNewNode();
  void HandleServerMessage(const proto::ServerMessage& message);
  void HandleDone(int grpc_code, const std::string& message);
  void ScheduleHeartbeat();
  void SendHeartbeat();  // with the latest progress
  void Closed(absl::Status status, std::optional<HangNotice> hang = std::nullopt);

  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<LoopThread> loop_;
  // Internal loop only, but for Silence() (Leave, the destructor: on the caller's thread).
  EventDelivery events_;

  // Internal loop only.
  std::unique_ptr<AgentCall> call_;
  NodeInfo node_;
  bool joined_ = false;                 // the server acknowledged the join
  std::vector<RankProgress> progress_;  // the latest ReportProgress, sent with heartbeats
  TimePoint last_heard_{};              // the server's last message (fencing)
  int unanswered_ = 0;                  // heartbeats sent since then
  uint64_t call_generation_ = 0;        // of call_; older calls' reactions are dropped
  std::vector<std::unique_ptr<AgentCall>> retired_calls_;  // cancelled by a rejoin
  bool ever_joined_ = false;                               // re-registrations carry claim_
  bool server_embedded_ = false;       // the server lives in an agent: failover when it is gone
  std::string endpoint_;               // the server's address: options_.endpoint, or a successor
  std::string host_node_id_;           // the node whose agent hosts an embedded server
  std::vector<Successor> successors_;  // from the last assignment
  // Members of earlier rounds that the last one lacks, newest first (at most
  // kMaxEarlierMembers): the other side of a partition may be serving the run among them
  // (a round formed on this side with a member that never heard of it; last_round_majority.h).
  std::vector<Successor> earlier_members_;
  bool failing_over_ = false;  // walking failover_candidates_
  std::vector<Successor> failover_candidates_;
  size_t failover_next_ = 0;
  TimePoint candidate_deadline_{};
  TimePoint waiting_since_{};  // the workers were last stopped (no round to run)
  TimePoint last_look_{};      // MaybeLookForTheRun's last question
  bool looking_ = false;       // a question is out on probe_loop_
  // Blocking probes and Status calls of MaybeLookForTheRun, off the loop that heartbeats.
  std::unique_ptr<LoopThread> probe_loop_;
  ResumeClaim claim_;               // what this node knows of its place
  std::string member_key_;          // from the last Joined; presented with claim_
  std::string former_key_;          // the key of node_.formerly_node_id, presented with it
  bool reconnecting_ = false;       // the current call re-registers after a broken stream
  bool server_down_ = false;        // while reconnecting, the address refused connections
  TimePoint reconnect_deadline_{};  // read_timeout after the break
  int reconnect_attempts_ = 0;
  std::string broken_because_;  // how the stream broke, for the final message
  std::chrono::milliseconds connect_budget_{0};
  TimePoint connect_deadline_{};     // connect_budget_ after the join's first call
  std::string join_broken_because_;  // the last break of a join not yet acknowledged
  const char* connect_budget_name_ = "read_timeout";
  bool timed_out_ = false;    // read_timeout cut the call
  bool stepped_out_ = false;  // between StepOut and StepIn
  uint64_t read_timer_ = 0;
  uint64_t heartbeat_timer_ = 0;
  std::chrono::milliseconds heartbeat_interval_;  // ours, or the run's when that is shorter
};

// One Status call (for `ddprun status`), with options.rpc_timeout as its deadline.
absl::StatusOr<RunStatus> QueryRunStatus(const ClientOptions& options, const std::string& run_id);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_RENDEZVOUS_CLIENT_H_
