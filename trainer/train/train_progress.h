// Where a run stands, as checkpoints record it: enough for any trainer to continue at the
// exact sample and step it stopped at.
#ifndef DDPRUN_TRAINER_TRAIN_TRAIN_PROGRESS_H_
#define DDPRUN_TRAINER_TRAIN_TRAIN_PROGRESS_H_

#include <cstdint>

namespace ddprun::trainer {

struct TrainProgress {
  int64_t epoch = 1;          // 1-based epoch in progress (or next to start)
  int64_t epoch_offset = 0;   // samples of this epoch's global order already consumed
  int64_t global_step = 0;    // optimizer steps so far
  double epoch_loss_sum = 0;  // sum over this epoch's steps of the global mean batch loss
  int64_t epoch_loss_steps = 0;
  int world_size = 1;  // of the run that saved (informational)
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_TRAIN_PROGRESS_H_
