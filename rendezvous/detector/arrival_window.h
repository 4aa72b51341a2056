// ArrivalWindow: the last N intervals between a sender's heartbeats, with their mean and standard
// deviation, for the accrual detector (phi_accrual.h). Intervals are whole microseconds and the
// sums are integers, so adding and evicting for days leaves no rounding drift.
//
// Pure and not thread-safe: one observer owns one window per sender.
#ifndef DDPRUN_RENDEZVOUS_DETECTOR_ARRIVAL_WINDOW_H_
#define DDPRUN_RENDEZVOUS_DETECTOR_ARRIVAL_WINDOW_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddprun::rendezvous {

// The largest window a detector may keep, and the longest interval it records (longer ones are
// recorded as this): together they keep the sum of squares within int64.
inline constexpr size_t kMaxWindowSize = 1000;
inline constexpr int64_t kMaxIntervalUs = 60'000'000;

class ArrivalWindow {
 public:
  // `capacity` in [1, kMaxWindowSize] (AccrualOptions are validated before).
  explicit ArrivalWindow(size_t capacity);

  // Records one interval; the oldest is forgotten once `capacity` are held.
  void Add(int64_t interval_us);
  void Clear();

  size_t size() const { return size_; }
  size_t capacity() const { return ring_.size(); }
  // 0 when empty.
  double mean_us() const;
  // Population standard deviation; 0 with fewer than two intervals.
  double std_dev_us() const;

 private:
  std::vector<int64_t> ring_;
  size_t next_ = 0;  // where the next interval goes
  size_t size_ = 0;
  int64_t sum_ = 0;
  int64_t sum_of_squares_ = 0;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_DETECTOR_ARRIVAL_WINDOW_H_
