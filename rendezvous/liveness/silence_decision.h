// SilenceDecision: what a rendezvous server does with its LivenessReceiver's report that a node
// fell silent (docs/design.md §3a, "Who decides"), shared by the gRPC service and the etcd
// backend's coordinator agent so that both lose a silent node by the same rule:
//   - when most of the nodes judged by silence are suspected at once, the fault is more likely
//     the server's own network or cores than theirs: nobody is lost (their leases still decide),
//     and that is logged once per such episode;
//   - a node the run does not let the detector judge now (SilenceVerdict::kByLease: the spare
//     was taken since the receiver judged) is not lost: its workers may hold the longer lease;
//   - otherwise the suspicion goes to LossConfirmation, which decides (the server is the only
//     observer so far: one of one).
// Pure apart from the one log line; not thread-safe (the caller's loop owns it).
#ifndef DDPRUN_RENDEZVOUS_LIVENESS_SILENCE_DECISION_H_
#define DDPRUN_RENDEZVOUS_LIVENESS_SILENCE_DECISION_H_

#include <cstddef>
#include <string>

#include "common/clock.h"
#include "rendezvous/api/run_config.h"
#include "rendezvous/detector/loss_confirmation.h"

namespace ddprun::rendezvous {

class SilenceDecision {
 public:
  // `node` was reported silent, with `suspected` of the receiver's `watched` nodes suspected at
  // that evaluation; `verdict`: who the run lets decide the node's loss now. True: the node is
  // lost, and forgotten here (the caller acts on it).
  bool Lost(const std::string& node, SilenceVerdict verdict, size_t suspected, size_t watched,
            TimePoint now);
  // `node` was heard again after a report: its suspicion no longer stands.
  void Heard(const std::string& node);
  // `node` is no longer watched (it left, was closed, or its loss was acted on).
  void Forget(const std::string& node);

 private:
  LossConfirmation confirmation_{ConfirmationRule{/*observers_required=*/1}};
  bool mass_silence_logged_ = false;  // the current mass suspicion was logged
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_LIVENESS_SILENCE_DECISION_H_
