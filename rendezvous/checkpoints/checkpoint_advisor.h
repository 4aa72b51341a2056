// CheckpointAdvisor: the checkpoint interval a run should use now (issue 41, point 3;
// docs/design.md §3c), from what the run itself measured:
//   - the mean time between failures M: the run's failure restarts over the time it has trained,
//     with the prior of --rdzv-conf mtbf= as one failure seen at that time: M = (T + P) / (n + 1)
//     (the posterior mean time of an exponential failure process under a gamma prior of one
//     pseudo-failure in P; with no prior, P = 0: a run that has not failed yet is advised as if
//     it were about to, and the advice grows as it keeps training);
//   - the time to save a checkpoint δ: the median of the latest saves the workers reported;
//   - the recovery cost R: the median of the latest recoveries the agents' goodput ledgers
//     measured (failure detected to the first step after it, detection included).
// The interval is Daly's optimum for them (daly_model.h); beside it, the effective training time
// ratio Daly's model predicts at that interval, and the one the agents' ledgers measure.
//
// Pure: no I/O, no clock reads. Not thread-safe (one per run, on the server's loop).
#ifndef DDPRUN_RENDEZVOUS_CHECKPOINTS_CHECKPOINT_ADVISOR_H_
#define DDPRUN_RENDEZVOUS_CHECKPOINTS_CHECKPOINT_ADVISOR_H_

#include <deque>
#include <map>
#include <optional>
#include <string>

#include "common/clock.h"
#include "rendezvous/api/checkpoint_advice.h"

namespace ddprun::rendezvous {

// One line for people (status page, `ddprun status`, the log): "checkpoint every 42.0 s
// (MTBF 1.20 h: 3 failures in 3.60 h trained, prior given; save 0.80 s, recovery 2.10 s);
// effective training time 97.1 % predicted, 96.4 % measured".
std::string DescribeCheckpointAdvice(const CheckpointAdvice& advice);

class CheckpointAdvisor {
 public:
  static constexpr size_t kKept = 5;  // latest saves and recoveries the medians take

  explicit CheckpointAdvisor(std::optional<Duration> mtbf_prior = std::nullopt)
      : prior_(mtbf_prior) {}

  // The run trains (a round runs); the first call starts its exposure to failures.
  void Started(TimePoint now);
  // A failure restart of the run (not a membership change).
  void Failure();
  void Report(const std::string& node_id, const CheckpointReport& report);
  // The node left the run: its ratio no longer counts.
  void Forget(const std::string& node_id) { ratios_.erase(node_id); }

  // nullopt until a save time is known (no checkpoint yet), or before the run trained with no
  // prior.
  std::optional<CheckpointAdvice> Advise(TimePoint now) const;

 private:
  const std::optional<Duration> prior_;
  std::optional<TimePoint> started_;
  int failures_ = 0;
  std::deque<double> saves_, recoveries_;
  std::map<std::string, double> ratios_;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CHECKPOINTS_CHECKPOINT_ADVISOR_H_
