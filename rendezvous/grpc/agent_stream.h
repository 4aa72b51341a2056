// AgentStream: the server's reactor for one agent's Connect stream. Reads AgentMessages and
// posts them to the service's event loop; writes the ServerMessages the loop queues, one at a
// time, and finishes the stream after a Close. Never blocks: every decision about which gRPC
// operation to start is taken under a short mutex and the operation is started outside it.
//
// Lifetime: created by RendezvousServiceImpl::Connect; after OnDone it tells the service,
// whose loop deletes it (the loop is the only other user of the pointer, so it cannot dangle).
//
// Thread-safety: Send and FinishWith may be called from any thread; the write queue is guarded
// by mu_, the read chain is gRPC's alone.
#ifndef DDPRUN_RENDEZVOUS_GRPC_AGENT_STREAM_H_
#define DDPRUN_RENDEZVOUS_GRPC_AGENT_STREAM_H_

#include <atomic>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/core/outgoing.h"

namespace ddprun::rendezvous {

class RendezvousServiceImpl;

class AgentStream final
    : public grpc::ServerBidiReactor<proto::AgentMessage, proto::ServerMessage> {
 public:
  AgentStream(RendezvousServiceImpl* service, ConnId conn);
  // Starts the read chain; call once the loop knows the stream (events are posted in order).
  void Start() { StartRead(&read_); }

  // Thread-safe. Queues `message`; with `last`, finishes the stream (OK) once it is written.
  // Dropped once the stream is finishing.
  void Send(proto::ServerMessage message, bool last) ABSL_LOCKS_EXCLUDED(mu_);
  // Thread-safe. Finishes the stream with `status` after the queued writes.
  void FinishWith(grpc::Status status) ABSL_LOCKS_EXCLUDED(mu_);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) override;
  void OnDone() override;

 private:
  // Starts the next write, or the finish, if nothing is in flight.
  void Pump() ABSL_LOCKS_EXCLUDED(mu_);

  RendezvousServiceImpl* const service_;
  const ConnId conn_;
  proto::AgentMessage read_;    // only touched by the read chain
  std::atomic<int> queued_{0};  // messages posted to the loop and not yet handled

  absl::Mutex mu_;
  std::deque<proto::ServerMessage> queue_ ABSL_GUARDED_BY(mu_);
  proto::ServerMessage writing_msg_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
};

// A stream refused before it starts (bad token): finishes with `status` and deletes itself.
// No state of its own: gRPC calls it, from any thread.
class RefusedStream final
    : public grpc::ServerBidiReactor<proto::AgentMessage, proto::ServerMessage> {
 public:
  explicit RefusedStream(grpc::Status status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_AGENT_STREAM_H_
