// `ddp-train mnist`: data-parallel training of the classic MNIST network with checkpoints,
// resume, metrics and progress. The train loop; everything it talks to is passed in.
// No LibTorch types in this header, so main.cc stays a cheap translation unit.
#ifndef DDPRUN_TRAINER_TRAIN_MNIST_TRAINER_H_
#define DDPRUN_TRAINER_TRAIN_MNIST_TRAINER_H_

#include <optional>
#include <ostream>

#include "absl/status/statusor.h"
#include "trainer/io/dist_env.h"
#include "trainer/io/mnist_data.h"
#include "trainer/io/stop_signal.h"
#include "trainer/train/mnist_options.h"

namespace ddprun::trainer {

struct MnistOutcome {
  int stop_signal = 0;  // > 0: stopped early on a signal (after saving a checkpoint)
  double test_acc = 0;  // of the last evaluated epoch
  int64_t global_step = 0;
};

// Runs the whole training. `stop` may be null. Every LibTorch exception is caught inside and
// returned as a Status: kInvalidArgument / kNotFound / kFailedPrecondition / kDataLoss for bad
// input (data, checkpoint, options), kUnavailable / kDeadlineExceeded for communication.
// `preloaded`: options.data_dir's data, read ahead (a --preload=native spare's warm-up).
absl::StatusOr<MnistOutcome> RunMnist(const MnistOptions& options, const DistEnv& env,
                                      StopSignal* stop, std::ostream& log,
                                      std::optional<MnistData> preloaded = std::nullopt);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_MNIST_TRAINER_H_
