// Options of `ddp-train mnist`, filled from the command line in main.cc only. Flag names follow
// the classic PyTorch MNIST example where it has one.
#ifndef DDPRUN_TRAINER_TRAIN_MNIST_OPTIONS_H_
#define DDPRUN_TRAINER_TRAIN_MNIST_OPTIONS_H_

#include <cstdint>
#include <string>

#include "trainer/train/train_options.h"

namespace ddprun::trainer {

struct MnistOptions : TrainOptions {
  MnistOptions() {
    // The classic example's defaults.
    batch_size = 64;
    epochs = 14;
    lr = 1.0;
    seed = 1;  // model init and dropout
    bucket_cap_bytes = 1 << 20;
  }

  int64_t test_batch_size = 1000;  // per process
  double gamma = 0.7;              // StepLR(step_size=1)
  uint64_t sampler_seed = 0;       // DistributedSampler's seed (torch default 0); + epoch
  bool dry_run = false;            // one step per epoch
  bool save_model = false;         // rank 0 writes the model to save_model_path at the end
  std::string save_model_path = "mnist_cnn.pt";

  int64_t train_subset = 0;  // first N training images; 0: all
  int64_t test_subset = 0;   // first N test images; 0: all
  bool progress_bar = true;  // a bar when stdout is a terminal
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_MNIST_OPTIONS_H_
