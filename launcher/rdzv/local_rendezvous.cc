#include "launcher/rdzv/local_rendezvous.h"

#include "absl/strings/str_cat.h"

namespace ddprun::launcher {

LocalRendezvous::LocalRendezvous(Executor* executor, LocalRendezvousOptions options)
    : executor_(executor), options_(std::move(options)) {}

rendezvous::Assignment LocalRendezvous::MakeAssignment() const {
  rendezvous::Assignment a;
  a.round = round_;
  a.group_rank = options_.node_rank;
  a.group_world_size = options_.nnodes;
  a.rank_offset = options_.node_rank * nproc_;
  a.world_size = options_.nnodes * nproc_;
  a.master_addr = options_.master_addr;
  a.master_port = options_.master_port;
  a.restart_count = restarts_;
  a.max_restarts = options_.max_restarts;
  return a;
}

void LocalRendezvous::Join(const rendezvous::NodeInfo& node, rendezvous::RendezvousEvents* events) {
  events_ = events;
  nproc_ = node.nproc_per_node;
  executor_->Post([this, a = MakeAssignment()] {
    if (!left_) events_->OnAssignment(a);
  });
}

void LocalRendezvous::ReportGroupState(int64_t round, rendezvous::GroupState state,
                                       const std::optional<rendezvous::WorkerFailure>& failure) {
  if (left_ || round != round_ || state != rendezvous::GroupState::kFailed) return;
  if (restarts_ >= options_.max_restarts) {
    const std::string why = absl::StrCat(
        "restart budget spent (", restarts_, " of --max-restarts=", options_.max_restarts,
        " used); root cause: worker ", failure.has_value() && failure->hang ? "hang" : "failure",
        " on ", failure.has_value() ? failure->hostname : std::string("this node"));
    std::optional<rendezvous::HangNotice> hang;
    if (failure.has_value() && failure->hang) hang = rendezvous::HangNotice{};
    executor_->Post([this, why, hang] {
      if (!left_) events_->OnClosed(absl::ResourceExhaustedError(why), hang);
    });
    return;
  }
  // Only while restarts remain: with the budget spent the job ends as torchrun's would.
  if (failure.has_value() && crash_loop_.Repeats(*failure)) {
    const std::string why = rendezvous::CrashLoopMessage(
        absl::StrCat("rank ", failure->rank, " on ", failure->hostname, ": ", failure->signature));
    executor_->Post([this, why] {
      if (!left_) events_->OnClosed(rendezvous::CrashLoopStop(why), std::nullopt);
    });
    return;
  }
  ++restarts_;
  ++round_;
  const std::string reason = absl::StrCat("restarting the worker group (restart ", restarts_,
                                          " of ", options_.max_restarts, ")");
  std::optional<rendezvous::HangNotice> hang;
  if (failure.has_value() && failure->hang) hang = rendezvous::HangNotice{};
  const rendezvous::Cause cause =
      hang.has_value() ? rendezvous::Cause::kHang : rendezvous::Cause::kWorkerFailure;
  executor_->Post([this, cause, reason, hang, a = MakeAssignment()] {
    if (left_) return;
    events_->OnRestart(cause, reason, hang, {});
    events_->OnAssignment(a);
  });
}

void LocalRendezvous::Leave(const std::string& reason) { left_ = true; }

void LocalRendezvous::StepOut(const std::string& reason) { stepped_out_ = true; }

void LocalRendezvous::StepIn() {
  if (left_ || !stepped_out_) return;
  stepped_out_ = false;
  ++round_;  // the round this node stepped out of is gone; a new one, at no cost
  executor_->Post([this, a = MakeAssignment()] {
    if (!left_) events_->OnAssignment(a);
  });
}

}  // namespace ddprun::launcher
