// RendezvousServiceImpl: the gRPC face of ServerState (callback API). One AgentStream reactor per
// Connect stream translates wire messages into state-machine events posted to the server's
// LoopThread; the loop owns ServerState and the stream registry, applies the decisions by queueing
// writes on the reactors, and wakes itself for the state machine's next deadline. Reactors never
// block and never touch ServerState.
//
// Thread-safety: the gRPC entry points may run on any thread; everything else runs on `loop`.
// Lifetime: `loop` and `clock` must outlive the service; the grpc::Server using the service must
// be shut down (all RPCs done) before the loop is stopped and the service destroyed.
#ifndef DDPRUN_RENDEZVOUS_GRPC_RENDEZVOUS_SERVICE_H_
#define DDPRUN_RENDEZVOUS_GRPC_RENDEZVOUS_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "common/loop_thread.h"
#include "common/strings.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/api/run_config.h"
#include "rendezvous/core/outgoing.h"
#include "rendezvous/core/server_state.h"
#include "rendezvous/liveness/liveness_receiver.h"
#include "rendezvous/liveness/silence_decision.h"

namespace ddprun::rendezvous {

class AgentStream;

class RendezvousServiceImpl final : public proto::RendezvousService::CallbackService {
 public:
  // `token` empty: no authentication.
  RendezvousServiceImpl(LoopThread* loop, const Clock* clock, std::string token,
                        ServerLimits limits, RunTimeouts default_timeouts, bool embedded = false,
                        RoundQuorum round_quorum = RoundQuorum::kAnyNodes);
  ~RendezvousServiceImpl() override;

  grpc::ServerBidiReactor<proto::AgentMessage, proto::ServerMessage>* Connect(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const proto::StatusRequest* request,
                                   proto::StatusResponse* response) override;

  // Called by AgentStream from gRPC threads; each posts to the loop.
  // `queued` counts the stream's messages not yet handled; decremented once this one is.
  void PostMessage(ConnId conn, proto::AgentMessage message, std::atomic<int>* queued);
  int max_queued_messages_per_stream() const { return max_queued_; }
  void PostStreamBroken(ConnId conn);
  void PostStreamDone(ConnId conn);
  // The liveness receiver's reports (any thread): `conn`'s heartbeats stopped for
  // `silent_for` (`suspected` of the `watched` streams at once); `conn` was heard again.
  // When more than half of the watched streams (at least two) are suspected at once, the
  // server's own path or cores are the likelier fault: nobody is lost by silence (logged once
  // per episode) and the leases decide.
  void PostSilent(ConnId conn, Duration silent_for, size_t suspected, size_t watched);
  void PostHeard(ConnId conn);
  // The liveness path, for runs with liveness on (RunTimeouts::liveness); null: none (every
  // run falls back to its lease). Set before serving; must outlive the loop's tasks.
  void set_liveness(LivenessReceiver* receiver) { liveness_ = receiver; }

  // Ends every agent stream (after its queued writes) with UNAVAILABLE "server shutting down",
  // so that shutdown need not wait for long-lived streams. Thread-safe; returns once done.
  void EndAllStreams();

  // The /metrics text and the status page, rendered on the loop (empty when the loop does not
  // answer within a second: it is stopping). Any thread.
  std::string RenderMetrics();
  std::string RenderStatusPage(const std::string& server);
  // Embedded: the node whose agent hosts this server, told to agents in Joined and in every
  // Assignment (agents may join before the host does) so that none picks it as the successor.
  // Loop thread only (RendezvousServer::SetHostNodeId posts it; a rejoin of the host under a
  // new name moves it).
  void set_host_node_id(std::string node_id) { host_node_id_ = std::move(node_id); }
  // Streams accepted so far (for tests and load reports).
  uint64_t streams_accepted() const { return next_conn_.load() - 1; }

 private:
  // Loop thread only.
  void HandleMessage(ConnId conn, const proto::AgentMessage& message);
  // An accepted join of the hosting agent under a new name `node_id`
  // (JoinedNotice::succeeds_node_id): host_node_id_ follows it.
  void FollowHostRename(ConnId conn, const std::string& node_id, const Outbox& out);
  void Apply(const Outbox& out);
  void LogDecisions(const Outbox& out);  // LogInfo lines (shown when verbose)
  void ScheduleTick();
  void RunTick();
  // A Joined of a run with liveness on: the receiver starts judging the stream's heartbeats and
  // `joined` tells the agent where to send them.
  void WatchLiveness(ConnId conn, const JoinedNotice& notice, proto::Joined* joined);
  void UnwatchLiveness(ConnId conn);

  LoopThread* const loop_;
  const Clock* const clock_;
  const std::string token_;
  const RunTimeouts default_timeouts_;
  const bool embedded_;                        // told to agents in Joined
  std::string host_node_id_;                   // loop thread only
  const std::string instance_ = RandomHex(8);  // StatusResponse.server_instance
  const int max_queued_;
  std::atomic<ConnId> next_conn_{1};
  std::atomic<int> open_streams_{0};  // counted from Connect until the loop deletes the stream

  // Owned by the loop thread.
  ServerState state_;
  struct StreamEntry {
    AgentStream* stream = nullptr;  // owned here once registered; deleted on the loop
    std::string peer_host;
    std::string scope;                   // of the call's token (scoped_token.h); "": the server's
    LoopThread::TimerId join_timer = 0;  // closes the stream if it never joins
    bool closed = false;                 // a Close was sent: later messages are ignored
    bool liveness_watched = false;       // the liveness receiver judges its heartbeats
  };
  std::unordered_map<ConnId, StreamEntry> streams_;
  LivenessReceiver* liveness_ = nullptr;
  // When a silence is a loss: the server is the only observer so far (docs/design.md §3a).
  SilenceDecision silence_;
  LoopThread::TimerId tick_timer_ = 0;
  TimePoint tick_at_{};
  bool tick_scheduling_posted_ = false;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_RENDEZVOUS_SERVICE_H_
