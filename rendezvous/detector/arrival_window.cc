#include "rendezvous/detector/arrival_window.h"

#include <algorithm>
#include <cmath>

namespace ddprun::rendezvous {

ArrivalWindow::ArrivalWindow(size_t capacity)
    : ring_(std::clamp<size_t>(capacity, 1, kMaxWindowSize), 0) {}

void ArrivalWindow::Add(int64_t interval_us) {
  const int64_t v = std::clamp<int64_t>(interval_us, 0, kMaxIntervalUs);
  if (size_ == ring_.size()) {
    const int64_t oldest = ring_[next_];
    sum_ -= oldest;
    sum_of_squares_ -= oldest * oldest;
  } else {
    ++size_;
  }
  ring_[next_] = v;
  next_ = (next_ + 1) % ring_.size();
  sum_ += v;
  sum_of_squares_ += v * v;
}

void ArrivalWindow::Clear() {
  next_ = 0;
  size_ = 0;
  sum_ = 0;
  sum_of_squares_ = 0;
}

double ArrivalWindow::mean_us() const {
  return size_ == 0 ? 0.0 : static_cast<double>(sum_) / static_cast<double>(size_);
}

double ArrivalWindow::std_dev_us() const {
  if (size_ < 2) return 0.0;
  const double n = static_cast<double>(size_);
  const double mean = static_cast<double>(sum_) / n;
  // The integer sums are exact; only this last step rounds (and may dip below 0 by a rounding).
  const double variance = static_cast<double>(sum_of_squares_) / n - mean * mean;
  return variance > 0 ? std::sqrt(variance) : 0.0;
}

}  // namespace ddprun::rendezvous
