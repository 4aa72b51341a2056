// Everything a run needs to continue exactly where it stopped, as one byte string (the
// checkpoint payload): model parameters, Adadelta state, learning rate, epoch, the global
// sample offset within the epoch, the global step, the epoch's running loss, and the CPU RNG
// state (dropout). Serialised with LibTorch's archive format.
#ifndef DDPRUN_WORKER_TRAIN_STATE_H_
#define DDPRUN_WORKER_TRAIN_STATE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/adadelta.h"
#include "worker/mnist_net.h"

namespace ddprun::worker {

struct TrainProgress {
  int64_t epoch = 1;          // 1-based epoch in progress (or next to start)
  int64_t epoch_offset = 0;   // samples of this epoch's global order already consumed
  int64_t global_step = 0;    // optimizer steps so far
  double epoch_loss_sum = 0;  // sum over this epoch's steps of the global mean batch loss
  int64_t epoch_loss_steps = 0;
  int world_size = 1;  // of the run that saved (informational)
};

// Throws nothing; LibTorch errors become kInternal.
absl::StatusOr<std::string> SerializeTrainState(MnistNet& model, const Adadelta& optimizer,
                                                const TrainProgress& progress);

// Restores into `model`, `optimizer` and the default CPU generator. kInvalidArgument when the
// payload is from another model or has other shapes; nothing is modified then.
absl::Status DeserializeTrainState(absl::string_view payload, MnistNet& model, Adadelta& optimizer,
                                   TrainProgress* progress);

}  // namespace ddprun::worker

#endif  // DDPRUN_WORKER_TRAIN_STATE_H_
