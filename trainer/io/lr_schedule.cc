#include "trainer/io/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace ddprun::trainer {

double LearningRateAt(const LrSchedule& s, double done) {
  if (done < s.warmup_epochs) return s.base_lr * done / s.warmup_epochs;
  if (s.kind == LrSchedule::Kind::kCosine) {
    // The cosine spans the epochs after warm-up, so warm-up does not cut its tail short.
    const double span = std::max(1e-9, s.total_epochs - s.warmup_epochs);
    const double t = std::min(1.0, (done - s.warmup_epochs) / span);
    return 0.5 * s.base_lr * (1 + std::cos(M_PI * t));
  }
  // Step decay counts from epoch 0 (torchvision's reference), warm-up included.
  return s.base_lr * std::pow(0.1, std::floor(done / static_cast<double>(s.step_epochs)));
}

}  // namespace ddprun::trainer
