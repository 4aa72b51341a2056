// AgentCall: the client's reactor for its Connect stream. Queues writes (one in flight at a
// time), keeps reading, and hands every server message and the final status to callbacks, which
// the client points at its own event loop. Holds the call open (AddHold) while the client may
// still write, so that a write from the client's thread can never race OnDone.
//
// Thread-safety: Send and Cancel may be called from any thread. Owned by RendezvousClient, which
// deletes it only after done() is notified.
#ifndef DDPRUN_RENDEZVOUS_GRPC_AGENT_CALL_H_
#define DDPRUN_RENDEZVOUS_GRPC_AGENT_CALL_H_

#include <deque>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/grpcpp.h"
#include "proto/rendezvous.grpc.pb.h"

namespace ddprun::rendezvous {

class AgentCall final : public grpc::ClientBidiReactor<proto::AgentMessage, proto::ServerMessage> {
 public:
  using MessageFn = std::function<void(proto::ServerMessage)>;
  using DoneFn = std::function<void(grpc::Status)>;

  // `context` is configured (metadata, wait-for-ready) by the caller before Start().
  AgentCall(MessageFn on_message, DoneFn on_done);

  grpc::ClientContext* context() { return &context_; }
  // Starts the call on `channel` with `first` as its first message.
  void Start(const std::shared_ptr<grpc::Channel>& channel, proto::AgentMessage first)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Queues a message; dropped once the stream is over.
  void Send(proto::AgentMessage message) ABSL_LOCKS_EXCLUDED(mu_);
  void Cancel() { context_.TryCancel(); }
  // Notified after OnDone (the last reaction).
  absl::Notification& done() { return done_; }

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) override;
  void OnDone(const grpc::Status& status) override;

 private:
  void Pump() ABSL_LOCKS_EXCLUDED(mu_);
  // The stream can take no more writes; releases the hold once no write is in flight.
  void MarkDead() ABSL_LOCKS_EXCLUDED(mu_);

  const MessageFn on_message_;
  const DoneFn on_done_;
  grpc::ClientContext context_;
  std::unique_ptr<proto::RendezvousService::Stub> stub_;
  proto::ServerMessage read_;
  absl::Notification done_;

  // The write queue, shared by the client's thread (Send) and gRPC's (the reactions).
  absl::Mutex mu_;
  std::deque<proto::AgentMessage> queue_ ABSL_GUARDED_BY(mu_);
  proto::AgentMessage writing_msg_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool dead_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_released_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_AGENT_CALL_H_
