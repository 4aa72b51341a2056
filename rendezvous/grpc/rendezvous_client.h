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
// The decisions (state, timings, failover, fencing) are ConnectionStateMachine's
// (rendezvous/client/connection_state.h); this class is its I/O: the gRPC stream, the timers,
// the probes, the agent's events.
//
// Thread-safety: Join, ReportGroupState, ReportProgress, ReportStep, ReportFigures,
// ReportPreflight, Leave, StepOut and StepIn may be called from any thread; they
// post to the client's own LoopThread, which owns all other state (gRPC reactor callbacks only post
// to it too). RendezvousEvents are delivered on the agent's Executor. After Leave() returns, or
// once the client is destroyed, no event reaches the agent.
#ifndef DDPRUN_RENDEZVOUS_GRPC_RENDEZVOUS_CLIENT_H_
#define DDPRUN_RENDEZVOUS_GRPC_RENDEZVOUS_CLIENT_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/executor.h"
#include "rendezvous/api/event_delivery.h"
#include "rendezvous/api/rendezvous.h"
#include "rendezvous/client/connection_state.h"
#include "rendezvous/grpc/channel_args.h"
#include "rendezvous/grpc/client_options.h"
#include "rendezvous/liveness/liveness_sender.h"

namespace ddprun {
class LoopThread;
}  // namespace ddprun

namespace ddprun::rendezvous {

class AgentCall;

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
  void ReportFigures(const NodeFigures& figures) override;
  void ReportPreflight(const PreflightReport& report) override;
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
  void Execute(ClientActions actions);
  void ExecuteOnConnection(const ClientAction& action);
  void Tell(const ClientAction& action);  // the agent's events
  void StartCall(const ClientAction& action);
  void RetireCall();  // call_ to retired_calls_, where its last reactions are awaited
  void WakeAt(const ClientAction& action);
  void CancelWake(Wake::Kind kind);
  void CutCallLater(TimePoint at);
  void Probe(const ClientAction& action);
  void HostHere(int port);
  // Asks the other hosts on probe_loop_ whether one of them serves the run and went on.
  void LookForTheRun(const ClientAction& action);
  void SendHeartbeat();  // with the latest progress
  // A message of call `generation`: to the machine, and ClientOptions::on_server_heard.
  void OnServerMessage(uint64_t generation, const ServerWord& word);
  // An ack's checkpoint advice: told to the agent when it changed.
  void OnCheckpointAdvice(double interval_s);
  // kStartLiveness: a LivenessSender to the current server's host (its failure to start is
  // logged: the lease still covers the node).
  void StartLiveness(const ClientAction& action);
  TimePoint Now() const { return clock_->Now(); }

  const ClientOptions options_;
  const Clock* const clock_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<LoopThread> loop_;
  // Internal loop only, but for Silence() (Leave, the destructor: on the caller's thread).
  EventDelivery events_;

  // Internal loop only.
  ConnectionStateMachine machine_;
  std::unique_ptr<AgentCall> call_;
  std::vector<std::unique_ptr<AgentCall>> retired_calls_;  // cancelled by a rejoin
  bool closing_ = false;                // set by the destructor: the machine's actions are dropped
  std::vector<RankProgress> progress_;  // the latest ReportProgress, sent with heartbeats
  uint64_t read_timer_ = 0;
  uint64_t heartbeat_timer_ = 0;
  // When each heartbeat of the current call not yet acknowledged was sent (the server
  // acknowledges each, in order): what on_server_heard reports.
  std::deque<TimePoint> unanswered_sent_;
  double checkpoint_advice_s_ = 0;  // the last advice told to the agent
  // While the machine is kJoined with a liveness path: its sender (stopped on leaving it).
  std::unique_ptr<LivenessSender> liveness_;
  // Blocking probes and Status calls of kLookForTheRun, off the loop that heartbeats.
  std::unique_ptr<LoopThread> probe_loop_;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_RENDEZVOUS_CLIENT_H_
