// The learning rate of `ddp-train imagenet` as a function of training progress in epochs
// (fractional, so it changes every step): linear warm-up from 0 over `warmup_epochs`, then
// either torchvision's step decay (x0.1 every `step_epochs`) or a cosine from `base_lr` to 0 at
// `total_epochs`. Pure, so it is tested without a model.
#ifndef DDPRUN_TRAINER_IO_LR_SCHEDULE_H_
#define DDPRUN_TRAINER_IO_LR_SCHEDULE_H_

#include <cstdint>

namespace ddprun::trainer {

struct LrSchedule {
  enum class Kind { kStep, kCosine };
  Kind kind = Kind::kStep;
  double base_lr = 0.1;
  int64_t step_epochs = 30;
  double warmup_epochs = 0;
  int64_t total_epochs = 90;
};

// `epochs_done` >= 0: e.g. 2.5 halfway through the third epoch.
double LearningRateAt(const LrSchedule& schedule, double epochs_done);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_LR_SCHEDULE_H_
