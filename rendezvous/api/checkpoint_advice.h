// The checkpoint advice's data (issue 41, point 3; docs/design.md §3c): what an agent reports
// for it, and what the server advises (rendezvous/checkpoints/checkpoint_advisor.h computes it).
#ifndef DDPRUN_RENDEZVOUS_API_CHECKPOINT_ADVICE_H_
#define DDPRUN_RENDEZVOUS_API_CHECKPOINT_ADVICE_H_

#include <optional>

namespace ddprun::rendezvous {

// What one agent measured since its last report (the wire's CheckpointCosts).
struct CheckpointReport {
  std::optional<double> save_s;           // a checkpoint its workers saved
  std::optional<double> recovery_s;       // a recovery its ledger closed
  std::optional<double> effective_ratio;  // its ledger's effective training time ratio, [0, 1]
  bool empty() const { return !save_s && !recovery_s && !effective_ratio; }
};

struct CheckpointAdvice {
  double interval_s = 0;  // Daly's optimum: seconds of training between checkpoints
  double mtbf_s = 0;      // the estimate it used
  int failures = 0;       // failure restarts seen
  double trained_s = 0;   // since the run first trained
  bool prior = false;     // mtbf= was given
  double save_s = 0;
  double recovery_s = 0;
  double predicted_ratio = 0;            // Daly's efficiency at interval_s
  std::optional<double> measured_ratio;  // the median of the agents' ledgers
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_API_CHECKPOINT_ADVICE_H_
