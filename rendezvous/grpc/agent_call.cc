#include "rendezvous/grpc/agent_call.h"

#include <utility>

namespace ddprun::rendezvous {

AgentCall::AgentCall(MessageFn on_message, DoneFn on_done)
    : on_message_(std::move(on_message)), on_done_(std::move(on_done)) {}

void AgentCall::Start(const std::shared_ptr<grpc::Channel>& channel, proto::AgentMessage first) {
  stub_ = proto::RendezvousService::NewStub(channel);
  stub_->async()->Connect(&context_, this);
  AddHold();  // released by MarkDead: lets Send() start writes from outside reactions
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(first));
  }
  StartRead(&read_);
  Pump();
  StartCall();
}

void AgentCall::Send(proto::AgentMessage message) {
  {
    absl::MutexLock lock(&mu_);
    if (dead_) return;
    queue_.push_back(std::move(message));
  }
  Pump();
}

void AgentCall::Pump() {
  {
    absl::MutexLock lock(&mu_);
    if (writing_ || dead_ || queue_.empty()) return;
    writing_msg_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
  }
  // Safe outside the lock: the hold is kept while writing_ is set.
  StartWrite(&writing_msg_);
}

void AgentCall::MarkDead() {
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    dead_ = true;
    queue_.clear();
    if (!writing_ && !hold_released_) release = hold_released_ = true;
  }
  if (release) RemoveHold();
}

void AgentCall::OnReadDone(bool ok) {
  if (!ok) {
    MarkDead();
    return;
  }
  on_message_(std::move(read_));
  read_.Clear();
  StartRead(&read_);
}

void AgentCall::OnWriteDone(bool ok) {
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      dead_ = true;
      queue_.clear();
    }
    if (dead_ && !hold_released_) release = hold_released_ = true;
  }
  if (release) {
    RemoveHold();
    return;
  }
  Pump();
}

void AgentCall::OnDone(const grpc::Status& status) {
  on_done_(status);
  done_.Notify();
}

}  // namespace ddprun::rendezvous
