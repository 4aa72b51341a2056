// Everything a run needs to continue exactly where it stopped, as one byte string (the
// checkpoint payload): model parameters, Adadelta state, learning rate, epoch, the global
// sample offset within the epoch, the global step, the epoch's running loss, and the CPU RNG
// state (dropout). Serialised with LibTorch's archive format.
#ifndef DDPRUN_TRAINER_TRAIN_TRAIN_STATE_H_
#define DDPRUN_TRAINER_TRAIN_TRAIN_STATE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/train/adadelta.h"
#include "trainer/train/mnist_net.h"
#include "trainer/train/train_progress.h"

namespace ddprun::trainer {

// Throws nothing; LibTorch errors become kInternal.
absl::StatusOr<std::string> SerializeTrainState(MnistNet& model, const Adadelta& optimizer,
                                                const TrainProgress& progress);

// Restores into `model`, `optimizer` and the default CPU generator. kInvalidArgument when the
// payload is from another model or has other shapes; nothing is modified then.
absl::Status DeserializeTrainState(absl::string_view payload, MnistNet& model, Adadelta& optimizer,
                                   TrainProgress* progress);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_TRAIN_STATE_H_
