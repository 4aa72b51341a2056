// What the run's liveness settings (RunTimeouts::liveness, --rdzv-conf liveness_*) mean for
// the failure detector that both ends of the liveness path run.
#ifndef DDPRUN_RENDEZVOUS_LIVENESS_LIVENESS_SETTINGS_H_
#define DDPRUN_RENDEZVOUS_LIVENESS_LIVENESS_SETTINGS_H_

#include "rendezvous/api/run_config.h"
#include "rendezvous/detector/phi_accrual.h"

namespace ddprun::rendezvous {

// The detector's options for `settings` (which pass ValidateLivenessSettings); the window size
// and the stall guard keep their defaults.
inline AccrualOptions AccrualOptionsOf(const LivenessSettings& settings) {
  AccrualOptions o;
  o.expected_interval = settings.interval;
  o.phi_threshold = settings.phi;
  o.acceptable_pause = settings.pause;
  o.min_std_deviation = settings.min_sd;
  return o;
}

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_LIVENESS_LIVENESS_SETTINGS_H_
