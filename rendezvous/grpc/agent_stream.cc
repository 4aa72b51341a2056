#include "rendezvous/grpc/agent_stream.h"

#include <utility>

#include "rendezvous/grpc/rendezvous_service.h"

namespace ddprun::rendezvous {

AgentStream::AgentStream(RendezvousServiceImpl* service, ConnId conn)
    : service_(service), conn_(conn) {}

void AgentStream::Send(proto::ServerMessage message, bool last) {
  {
    absl::MutexLock lock(&mu_);
    if (finish_requested_) return;
    queue_.push_back(std::move(message));
    if (last) {
      finish_requested_ = true;
      finish_status_ = grpc::Status::OK;
    }
  }
  Pump();
}

void AgentStream::FinishWith(grpc::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (finish_requested_) return;
    finish_requested_ = true;
    finish_status_ = std::move(status);
  }
  Pump();
}

void AgentStream::Pump() {
  enum { kNothing, kWrite, kFinish } action = kNothing;
  grpc::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (writing_ || finished_) return;
    if (!queue_.empty()) {
      writing_msg_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      action = kWrite;
    } else if (finish_requested_) {
      finished_ = true;
      status = finish_status_;
      action = kFinish;
    }
  }
  // writing_msg_ is stable until OnWriteDone: nothing else assigns it while writing_ is set.
  if (action == kWrite) StartWrite(&writing_msg_);
  if (action == kFinish) Finish(status);
}

void AgentStream::OnReadDone(bool ok) {
  if (!ok) {
    // The agent half-closed, its connection broke, or the call was cancelled.
    service_->PostStreamBroken(conn_);
    FinishWith(grpc::Status::OK);
    return;
  }
  if (queued_.fetch_add(1) >= service_->max_queued_messages_per_stream()) {
    // Flooding: stop reading (bounding memory) and end the stream.
    queued_.fetch_sub(1);
    service_->PostStreamBroken(conn_);
    FinishWith(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            "agent sends messages faster than the server handles them"));
    return;
  }
  service_->PostMessage(conn_, std::move(read_), &queued_);
  read_.Clear();
  StartRead(&read_);
}

void AgentStream::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      // The stream is broken; nothing more can be written. The read side reports the break.
      queue_.clear();
      if (!finish_requested_) {
        finish_requested_ = true;
        finish_status_ = grpc::Status::OK;
      }
    }
  }
  Pump();
}

void AgentStream::OnDone() { service_->PostStreamDone(conn_); }

}  // namespace ddprun::rendezvous
