// `ddp-train imagenet`: data-parallel ResNet training on ImageFolder data with SGD, a step or
// cosine schedule with warm-up, top-1/top-5 validation reduced across ranks, checkpoints and
// resume through CheckpointStore (the latest under --checkpoints-path, the best-so-far under
// <checkpoints-path>/best). No LibTorch types here, so main.cc stays cheap to compile.
#ifndef DDPRUN_TRAINER_TRAIN_IMAGENET_TRAINER_H_
#define DDPRUN_TRAINER_TRAIN_IMAGENET_TRAINER_H_

#include <ostream>

#include "absl/status/statusor.h"
#include "trainer/io/dist_env.h"
#include "trainer/io/stop_signal.h"
#include "trainer/train/imagenet_options.h"

namespace ddprun::trainer {

struct ImageNetOutcome {
  int stop_signal = 0;  // > 0: stopped early on a signal (after saving a checkpoint)
  double best_acc1 = 0;
  int64_t global_step = 0;
};

// Every LibTorch exception is caught inside and returned as a Status (input errors as
// kInvalidArgument / kNotFound / kPermissionDenied / kFailedPrecondition / kDataLoss).
absl::StatusOr<ImageNetOutcome> RunImageNet(const ImageNetOptions& options, const DistEnv& env,
                                            StopSignal* stop, std::ostream& log);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_IMAGENET_TRAINER_H_
