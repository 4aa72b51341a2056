// A rendezvous without a server: --standalone and one-node static jobs, and
// torch.distributed.launch-style static multi-node with --rdzv-conf static_coordination=none
// (otherwise static_rendezvous.h coordinates them). Each node knows its place from its flags;
// the restart budget is this node's own (such static nodes do not coordinate; their workers fail
// together through the broken TCPStore/gloo connections).
#ifndef DDPRUN_LAUNCHER_RDZV_LOCAL_RENDEZVOUS_H_
#define DDPRUN_LAUNCHER_RDZV_LOCAL_RENDEZVOUS_H_

#include <string>

#include "common/executor.h"
#include "rendezvous/api/crash_loop.h"
#include "rendezvous/api/rendezvous.h"

namespace ddprun::launcher {

struct LocalRendezvousOptions {
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int max_restarts = 0;
};

// Not thread-safe: used from the agent's loop thread only; events are posted to `executor`.
class LocalRendezvous final : public rendezvous::Rendezvous {
 public:
  LocalRendezvous(Executor* executor, LocalRendezvousOptions options);

  void Join(const rendezvous::NodeInfo& node, rendezvous::RendezvousEvents* events) override;
  void ReportGroupState(int64_t round, rendezvous::GroupState state,
                        const std::optional<rendezvous::WorkerFailure>& failure) override;
  void ReportProgress(const std::vector<rendezvous::RankProgress>&, bool) override {}
  void Leave(const std::string& reason) override;
  // Nobody else to go on: the node waits, and StepIn assigns it a new round.
  void StepOut(const std::string& reason) override;
  void StepIn() override;

 private:
  rendezvous::Assignment MakeAssignment() const;

  Executor* executor_;
  const LocalRendezvousOptions options_;
  rendezvous::RendezvousEvents* events_ = nullptr;
  int nproc_ = 1;
  int64_t round_ = 0;
  int restarts_ = 0;
  rendezvous::CrashLoopBreaker crash_loop_;
  bool left_ = false;
  bool stepped_out_ = false;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_RDZV_LOCAL_RENDEZVOUS_H_
