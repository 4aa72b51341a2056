// PhiAccrualDetector: how strongly one observer suspects one sender, from the arrival times of
// the sender's heartbeats (Hayashibara et al., "The phi accrual failure detector", 2004, as in
// Akka and Cassandra). The intervals between arrivals (a bounded ArrivalWindow) are taken as
// normally distributed; after a silence of t since the last arrival,
//
//   phi(t) = -log10(P(an interval > t - acceptable_pause))
//
// with the window's mean and max(its standard deviation, min_std_deviation). The sender is
// suspected while phi >= phi_threshold. The acceptable pause is the delay the defaults promise to
// absorb on every link (10 % loss and 50 ms jitter, docs/design.md §3a); the accrual part
// lengthens the wait on a link that is worse than that and keeps it short on a clean one.
//
// Suspicion is not a verdict: a node is declared lost only by the confirmation rule
// (loss_confirmation.h). Each heartbeat carries the sender's incarnation: a new one (the agent
// restarted) starts a fresh window. An observer that was not running for longer than
// max_evaluation_gap (its process stopped, its cores busy) measures silence from when it woke.
//
// In use with --rdzv-conf liveness=on: the server's LivenessReceiver keeps one per agent, each
// agent's LivenessSender one of the server's acks (rendezvous/liveness/, docs/design.md §3a).
// Pure: no I/O, no clock reads, every input carries its time. Not
// thread-safe: one observer owns one detector per sender.
#ifndef DDPRUN_RENDEZVOUS_DETECTOR_PHI_ACCRUAL_H_
#define DDPRUN_RENDEZVOUS_DETECTOR_PHI_ACCRUAL_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "common/clock.h"
#include "rendezvous/detector/arrival_window.h"

namespace ddprun::rendezvous {

// The defaults and why (docs/design.md §3a has the false-alarm argument).
// Heartbeats every 20 ms: 50 packets a second per observed link.
inline constexpr std::chrono::milliseconds kDefaultHeartbeatInterval{20};
// phi 8: the normal model puts a false suspicion at 1e-8 per silence.
inline constexpr double kDefaultPhiThreshold = 8.0;
// 200 intervals: 4 s of history at 20 ms, enough to follow a link that changes.
inline constexpr size_t kDefaultWindowSize = 200;
// A clean link's intervals vary by well under a millisecond; 20 ms keeps phi from reacting to a
// single late packet there.
inline constexpr std::chrono::milliseconds kDefaultMinStdDeviation{20};
// Absorbs 50 ms of jitter each way (100 ms) plus a run of lost heartbeats.
inline constexpr std::chrono::milliseconds kDefaultAcceptablePause{120};
// An observer evaluates every few milliseconds; a gap of 100 ms means it was not running.
inline constexpr std::chrono::milliseconds kDefaultMaxEvaluationGap{100};

struct AccrualOptions {
  // What the sender was asked to send at: the estimate before two heartbeats have arrived
  // (mean = this, standard deviation = a quarter of it).
  Duration expected_interval = kDefaultHeartbeatInterval;
  double phi_threshold = kDefaultPhiThreshold;
  size_t window_size = kDefaultWindowSize;
  Duration min_std_deviation = kDefaultMinStdDeviation;
  Duration acceptable_pause = kDefaultAcceptablePause;
  Duration max_evaluation_gap = kDefaultMaxEvaluationGap;
};

// kInvalidArgument naming the first bad field; OK otherwise.
absl::Status ValidateAccrualOptions(const AccrualOptions& options);

// What a heartbeat did to the detector.
enum class ArrivalKind {
  kFirst,      // the first of this incarnation: silence counts from it, no interval yet
  kSample,     // one more interval in the window
  kDuplicate,  // at the same time as the last arrival: a sign of life, no interval (a zero
               // interval would pull the mean down and make the detector jumpy)
  kStale,      // earlier than the last arrival, or from an older incarnation: ignored
  kRestarted,  // a newer incarnation: the window starts afresh from this heartbeat
};

struct Suspicion {
  bool suspected = false;
  double phi = 0;      // +inf beyond what a double can tell apart from certainty
  Duration silence{};  // since the last arrival (or the observer's waking, see above)
};

class PhiAccrualDetector {
 public:
  // `options` must pass ValidateAccrualOptions.
  explicit PhiAccrualDetector(const AccrualOptions& options);

  // A heartbeat of `incarnation` arrived at `arrival`.
  ArrivalKind Heartbeat(TimePoint arrival, uint64_t incarnation);
  // The observer's periodic look: applies the stall rule above, then judges.
  Suspicion Evaluate(TimePoint now);
  // The suspicion level at `now`, without the stall rule (0 before any heartbeat).
  double Phi(TimePoint now) const;
  // The silence after which the sender is suspected with the current estimate (for the
  // observer's next deadline); nullopt before any heartbeat: a sender never heard from is the
  // join timeout's business, not this detector's.
  std::optional<Duration> SuspectAfter() const;

  size_t samples() const { return window_.size(); }
  double mean_ms() const;
  double std_dev_ms() const;  // before the min_std_deviation floor

 private:
  // Where silence is measured from: the last arrival, or the observer's waking after a stall.
  std::optional<TimePoint> SilenceOrigin() const;
  // Mean and standard deviation used by phi, in microseconds (bootstrap and floor applied).
  double ModelMeanUs() const;
  double ModelStdDevUs() const;

  AccrualOptions options_;
  double threshold_z_;  // phi(z) == phi_threshold for the standard normal
  ArrivalWindow window_;
  std::optional<TimePoint> last_arrival_;
  uint64_t incarnation_ = 0;
  std::optional<TimePoint> last_evaluation_;
  std::optional<TimePoint> woke_at_;  // the end of the observer's last stall
};

// The shortest silence after the last heartbeat at which a detector with these settings can
// suspect its sender, whatever the window holds (a mean of 0, the spread at its floor):
// acceptable_pause + z(phi) x min_std_deviation (232 ms at the defaults). A local lease renewed
// from heartbeats' send times and no longer than this ends before the observer's verdict.
Duration EarliestSuspicion(double phi_threshold, Duration acceptable_pause,
                           Duration min_std_deviation);

// phi of a standard normal variable exceeding z: -log10(P(X > z)); +inf where P underflows.
double PhiOfStandardNormal(double z);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_DETECTOR_PHI_ACCRUAL_H_
