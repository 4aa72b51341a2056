#include "launcher/stragglers/compute_times.h"

#include <algorithm>
#include <cmath>

namespace ddprun::launcher {

void ComputeTimes::Add(int local_rank, double compute_ms) {
  if (!std::isfinite(compute_ms) || compute_ms < 0) return;
  std::vector<double>& times = times_[local_rank];
  if (times.size() < kMaxPerWindow) times.push_back(compute_ms);
}

std::vector<LocalCompute> ComputeTimes::Take() {
  std::vector<LocalCompute> out;
  for (auto& [local_rank, times] : times_) {
    if (times.empty()) continue;
    const auto mid = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
    std::nth_element(times.begin(), mid, times.end());
    out.push_back({local_rank, *mid, static_cast<int64_t>(times.size())});
  }
  times_.clear();
  return out;
}

}  // namespace ddprun::launcher
