#include "rendezvous/detector/phi_accrual.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace ddprun::rendezvous {
namespace {

int64_t Micros(Duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

// The z at which PhiOfStandardNormal reaches `phi`, by bisection: phi is increasing in z, and
// 60 halvings of [-40, 40] are far below a microsecond of silence.
double ZForPhi(double phi) {
  double lo = -40, hi = 40;
  for (int i = 0; i < 60; ++i) {
    const double mid = (lo + hi) / 2;
    (PhiOfStandardNormal(mid) < phi ? lo : hi) = mid;
  }
  return hi;
}

}  // namespace

Duration EarliestSuspicion(double phi_threshold, Duration acceptable_pause,
                           Duration min_std_deviation) {
  // SuspectAfter with a mean of zero and the spread at its floor; z >= 0 for phi >= 0.31.
  const double z = std::max(0.0, ZForPhi(phi_threshold));
  return acceptable_pause +
         std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::nano>(
             std::floor(z * static_cast<double>(min_std_deviation.count()))));
}

double PhiOfStandardNormal(double z) {
  const double p_later = 0.5 * std::erfc(z / std::sqrt(2.0));
  if (p_later <= 0) return std::numeric_limits<double>::infinity();
  return -std::log10(p_later);
}

absl::Status ValidateAccrualOptions(const AccrualOptions& o) {
  auto bad = [](const char* field, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("failure detector: ", field, " ", why));
  };
  if (o.expected_interval <= Duration::zero()) return bad("expected_interval", "must be > 0");
  if (!(o.phi_threshold > 0) || !std::isfinite(o.phi_threshold)) {
    return bad("phi_threshold", absl::StrCat("must be a finite number > 0, not ", o.phi_threshold));
  }
  if (o.window_size < 2 || o.window_size > kMaxWindowSize) {
    return bad("window_size",
               absl::StrCat("must be in [2, ", kMaxWindowSize, "], not ", o.window_size));
  }
  if (o.min_std_deviation <= Duration::zero()) return bad("min_std_deviation", "must be > 0");
  if (o.acceptable_pause < Duration::zero()) return bad("acceptable_pause", "must be >= 0");
  if (o.max_evaluation_gap <= Duration::zero()) return bad("max_evaluation_gap", "must be > 0");
  return absl::OkStatus();
}

PhiAccrualDetector::PhiAccrualDetector(const AccrualOptions& options)
    : options_(options),
      threshold_z_(ZForPhi(options.phi_threshold)),
      window_(options.window_size) {}

ArrivalKind PhiAccrualDetector::Heartbeat(TimePoint arrival, uint64_t incarnation) {
  if (last_arrival_ && incarnation < incarnation_) return ArrivalKind::kStale;
  if (last_arrival_ && incarnation > incarnation_) {
    // A restarted sender: its old intervals say nothing about the new process (and the gap of
    // the restart itself is no interval of a live sender).
    window_.Clear();
    incarnation_ = incarnation;
    last_arrival_ = arrival;
    return ArrivalKind::kRestarted;
  }
  if (!last_arrival_) {
    incarnation_ = incarnation;
    last_arrival_ = arrival;
    return ArrivalKind::kFirst;
  }
  if (arrival < *last_arrival_) return ArrivalKind::kStale;
  if (arrival == *last_arrival_) return ArrivalKind::kDuplicate;
  window_.Add(Micros(arrival - *last_arrival_));
  last_arrival_ = arrival;
  return ArrivalKind::kSample;
}

Suspicion PhiAccrualDetector::Evaluate(TimePoint now) {
  if (last_evaluation_ && now - *last_evaluation_ > options_.max_evaluation_gap) {
    // This observer was not running: the silence it sees is its own, not the sender's.
    woke_at_ = now;
  }
  last_evaluation_ = now;
  Suspicion s;
  const std::optional<TimePoint> origin = SilenceOrigin();
  if (!origin) return s;
  s.silence = std::max(Duration::zero(), now - *origin);
  s.phi = Phi(now);
  s.suspected = s.phi >= options_.phi_threshold;
  return s;
}

std::optional<TimePoint> PhiAccrualDetector::SilenceOrigin() const {
  if (!last_arrival_) return std::nullopt;
  if (woke_at_ && *woke_at_ > *last_arrival_) return woke_at_;
  return last_arrival_;
}

double PhiAccrualDetector::Phi(TimePoint now) const {
  const std::optional<TimePoint> origin = SilenceOrigin();
  if (!origin || now <= *origin) return 0;
  const double silence_us = static_cast<double>(Micros(now - *origin));
  const double pause_us = static_cast<double>(Micros(options_.acceptable_pause));
  return PhiOfStandardNormal((silence_us - pause_us - ModelMeanUs()) / ModelStdDevUs());
}

std::optional<Duration> PhiAccrualDetector::SuspectAfter() const {
  if (!last_arrival_) return std::nullopt;
  const double us = static_cast<double>(Micros(options_.acceptable_pause)) + ModelMeanUs() +
                    threshold_z_ * ModelStdDevUs();
  return std::chrono::duration_cast<Duration>(
      std::chrono::duration<double, std::micro>(std::ceil(us)));
}

double PhiAccrualDetector::ModelMeanUs() const {
  if (window_.size() == 0) return static_cast<double>(Micros(options_.expected_interval));
  return window_.mean_us();
}

double PhiAccrualDetector::ModelStdDevUs() const {
  const double floor_us = static_cast<double>(Micros(options_.min_std_deviation));
  // Before two intervals there is no spread to measure: assume a quarter of the interval.
  const double measured = window_.size() < 2
                              ? static_cast<double>(Micros(options_.expected_interval)) / 4
                              : window_.std_dev_us();
  return std::max(measured, floor_us);
}

double PhiAccrualDetector::mean_ms() const { return ModelMeanUs() / 1000; }
double PhiAccrualDetector::std_dev_ms() const { return window_.std_dev_us() / 1000; }

}  // namespace ddprun::rendezvous
