#include "launcher/rdzv/static_rendezvous.h"

#include <utility>

namespace ddprun::launcher {

StaticRendezvous::StaticRendezvous(std::unique_ptr<rendezvous::Rendezvous> coordinated,
                                   std::string master_addr, int master_port)
    : coordinated_(std::move(coordinated)),
      master_addr_(std::move(master_addr)),
      master_port_(master_port) {}

void StaticRendezvous::Join(const rendezvous::NodeInfo& node,
                            rendezvous::RendezvousEvents* events) {
  events_ = events;
  coordinated_->Join(node, this);
}

void StaticRendezvous::ReportGroupState(int64_t round, rendezvous::GroupState state,
                                        const std::optional<rendezvous::WorkerFailure>& failure) {
  coordinated_->ReportGroupState(round, state, failure);
}

void StaticRendezvous::ReportProgress(const std::vector<rendezvous::RankProgress>& progress,
                                      bool urgent) {
  coordinated_->ReportProgress(progress, urgent);
}

void StaticRendezvous::ReportStep(const std::string& json) { coordinated_->ReportStep(json); }

void StaticRendezvous::ReportFigures(const rendezvous::NodeFigures& figures) {
  coordinated_->ReportFigures(figures);
}

void StaticRendezvous::ReportPreflight(const rendezvous::PreflightReport& report) {
  coordinated_->ReportPreflight(report);
}

void StaticRendezvous::Leave(const std::string& reason) { coordinated_->Leave(reason); }

void StaticRendezvous::OnAssignment(const rendezvous::Assignment& assignment) {
  rendezvous::Assignment a = assignment;
  a.master_addr = master_addr_;
  a.master_port = master_port_;
  events_->OnAssignment(a);
}

void StaticRendezvous::OnRestart(rendezvous::Cause cause, const std::string& reason,
                                 const std::optional<rendezvous::HangNotice>& hang,
                                 const rendezvous::RestartFacts& facts) {
  events_->OnRestart(cause, reason, hang, facts);
}

void StaticRendezvous::OnStandby(const rendezvous::StandbyNotice& standby) {
  events_->OnStandby(standby);
}

void StaticRendezvous::OnClosed(const absl::Status& status,
                                const std::optional<rendezvous::HangNotice>& hang) {
  events_->OnClosed(status, hang);
}

void StaticRendezvous::OnReconnecting(const std::string& why) { events_->OnReconnecting(why); }

void StaticRendezvous::OnResumed(int64_t round) { events_->OnResumed(round); }

void StaticRendezvous::OnCheckpointAdvice(double interval_s) {
  events_->OnCheckpointAdvice(interval_s);
}

void StaticRendezvous::OnPreflight(const rendezvous::PreflightRequest& request) {
  events_->OnPreflight(request);
}

}  // namespace ddprun::launcher
