// A static multi-node job (--rdzv-backend=static --nnodes=N --node-rank=R, or a platform's
// MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE) coordinated like a c10d one: node 0's agent
// hosts the rendezvous at MASTER_ADDR on the static port (MASTER_PORT + 1 unless --rdzv-conf
// static_port says otherwise), every agent joins it with its --node-rank as its group rank, and
// the run has one restart budget, restarts every node together and notices a lost node within
// its lease. torchrun's static nodes coordinate through nothing but their workers' broken
// connections (pytorch issue 146371: a rank that exits can leave the others running).
//
// The workers see exactly what the uncoordinated static rendezvous gives them: MASTER_ADDR and
// MASTER_PORT are the flags' (the server would name node 0's address and a port its agent
// holds), so this wrapper rewrites them in every assignment; group ranks are the node ranks
// because each agent asks for its own.
#ifndef DDPRUN_LAUNCHER_RDZV_STATIC_RENDEZVOUS_H_
#define DDPRUN_LAUNCHER_RDZV_STATIC_RENDEZVOUS_H_

#include <memory>
#include <string>

#include "rendezvous/api/rendezvous.h"

namespace ddprun::launcher {

// Not thread-safe, as the agent's side of any Rendezvous: events arrive on the agent's Executor
// and are passed on there.
class StaticRendezvous final : public rendezvous::Rendezvous, rendezvous::RendezvousEvents {
 public:
  // `coordinated` is the c10d rendezvous of node 0's server; master_addr and master_port are the
  // workers' (the flags').
  StaticRendezvous(std::unique_ptr<rendezvous::Rendezvous> coordinated, std::string master_addr,
                   int master_port);

  void Join(const rendezvous::NodeInfo& node, rendezvous::RendezvousEvents* events) override;
  void ReportGroupState(int64_t round, rendezvous::GroupState state,
                        const std::optional<rendezvous::WorkerFailure>& failure) override;
  void ReportProgress(const std::vector<rendezvous::RankProgress>& progress, bool urgent) override;
  void ReportStep(const std::string& json) override;
  void ReportFigures(const rendezvous::NodeFigures& figures) override;
  void ReportPreflight(const rendezvous::PreflightReport& report) override;
  void Leave(const std::string& reason) override;
  void StepOut(const std::string& reason) override { coordinated_->StepOut(reason); }
  void StepIn() override { coordinated_->StepIn(); }

 private:
  // RendezvousEvents, from the coordinated rendezvous.
  void OnAssignment(const rendezvous::Assignment& assignment) override;
  void OnRestart(rendezvous::Cause cause, const std::string& reason,
                 const std::optional<rendezvous::HangNotice>& hang,
                 const rendezvous::RestartFacts& facts) override;
  void OnStandby(const rendezvous::StandbyNotice& standby) override;
  void OnClosed(const absl::Status& status,
                const std::optional<rendezvous::HangNotice>& hang) override;
  void OnReconnecting(const std::string& why) override;
  void OnResumed(int64_t round) override;
  void OnCheckpointAdvice(double interval_s) override;
  void OnPreflight(const rendezvous::PreflightRequest& request) override;

  const std::unique_ptr<rendezvous::Rendezvous> coordinated_;
  const std::string master_addr_;
  const int master_port_;
  rendezvous::RendezvousEvents* events_ = nullptr;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_RDZV_STATIC_RENDEZVOUS_H_
