// EventDelivery: how a Rendezvous implementation (the gRPC client, the etcd backend) hands its
// RendezvousEvents to the agent. Events run on the agent's Executor, in order; none before Join
// set the sink or after the run is over for this node; OnClosed at most once; and none at all
// once Silence() was called (Leave, the destructor), not even those already queued.
//
// Thread-compatible: the owner calls it from its one internal loop, except Silence(), which any
// thread may call.
#ifndef DDPRUN_RENDEZVOUS_API_EVENT_DELIVERY_H_
#define DDPRUN_RENDEZVOUS_API_EVENT_DELIVERY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/executor.h"
#include "rendezvous/api/rendezvous.h"

namespace ddprun::rendezvous {

class EventDelivery {
 public:
  // `executor` (not owned) runs the events and must outlive everything posted to it.
  explicit EventDelivery(Executor* executor)
      : executor_(executor), silenced_(std::make_shared<std::atomic<bool>>(false)) {}

  // Join: where events go. False (nothing changes) when a sink is already set: only the first
  // Join counts.
  bool SetSink(RendezvousEvents* events) {
    if (events_ != nullptr) return false;
    events_ = events;
    return true;
  }

  // The run is over for this node (OnClosed delivered, or the agent left): nothing more is
  // delivered.
  bool closed() const { return closed_; }

  void Assigned(const Assignment& a) {
    Deliver([a](RendezvousEvents* e) { e->OnAssignment(a); });
  }
  void Restart(Cause cause, const std::string& reason, const std::optional<HangNotice>& hang,
               const RestartFacts& facts = {}) {
    Deliver([cause, reason, hang, facts](RendezvousEvents* e) {
      e->OnRestart(cause, reason, hang, facts);
    });
  }
  void Standby(const StandbyNotice& standby) {
    Deliver([standby](RendezvousEvents* e) { e->OnStandby(standby); });
  }
  void Reconnecting(const std::string& why) {
    Deliver([why](RendezvousEvents* e) { e->OnReconnecting(why); });
  }
  void Resumed(int64_t round) {
    Deliver([round](RendezvousEvents* e) { e->OnResumed(round); });
  }
  void Preflight(const PreflightRequest& request) {
    Deliver([request](RendezvousEvents* e) { e->OnPreflight(request); });
  }
  void CheckpointAdvice(double interval_s) {
    Deliver([interval_s](RendezvousEvents* e) { e->OnCheckpointAdvice(interval_s); });
  }
  // The run is over for this node: OnClosed, once. False (nothing delivered) when it was over
  // already.
  bool Close(const absl::Status& status, const std::optional<HangNotice>& hang = std::nullopt) {
    if (closed_) return false;
    Deliver([status, hang](RendezvousEvents* e) { e->OnClosed(status, hang); });
    closed_ = true;
    return true;
  }
  // The agent left (or, in a test, crashed): the run is over for this node without an OnClosed.
  // False when it was over already.
  bool CloseQuietly() { return !std::exchange(closed_, true); }

  // An elastic node that its run gave up (fenced, or its lease lost) comes back as a new node,
  // which the others see as a scale-up: OnRestart (stop the workers; this node's lease is lost
  // to the run) naming `why`, and `node` renamed <its first node id>-rejoinN for the next join.
  void RejoinAsNewNode(const std::string& why, NodeInfo* node) {
    Restart(Cause::kNodeLostLease, absl::StrCat(why, "; rejoining as a new node"), std::nullopt);
    RenameForRejoin(node);
  }
  // `node` renamed <its first node id>-rejoinN, formerly its current id, for a join as a new
  // node (after a fence, or a node that stepped out coming back).
  void RenameForRejoin(NodeInfo* node) {
    if (base_node_id_.empty()) base_node_id_ = node->node_id;
    node->formerly_node_id = node->node_id;
    node->node_id = absl::StrCat(base_node_id_, "-rejoin", ++rejoins_);
  }

  // Thread-safe. No event starts after this returns, not even one already on the executor.
  void Silence() { silenced_->store(true); }

 private:
  void Deliver(std::function<void(RendezvousEvents*)> fn) {
    if (closed_ || events_ == nullptr) return;
    executor_->Post([events = events_, silenced = silenced_, fn = std::move(fn)] {
      if (!silenced->load()) fn(events);
    });
  }

  Executor* const executor_;
  // Shared with the events queued on the executor, which may run after this object is gone.
  const std::shared_ptr<std::atomic<bool>> silenced_;
  RendezvousEvents* events_ = nullptr;
  bool closed_ = false;
  std::string base_node_id_;  // the node id of the first join
  int rejoins_ = 0;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_API_EVENT_DELIVERY_H_
