// Options of `ddp-train imagenet`, filled from the command line in main.cc only. Flag names
// follow PyTorch's imagenet example / imagenet_elastic_trainer.py where they have one.
#ifndef DDPRUN_TRAINER_TRAIN_IMAGENET_OPTIONS_H_
#define DDPRUN_TRAINER_TRAIN_IMAGENET_OPTIONS_H_

#include <cstdint>
#include <string>

#include "trainer/train/train_options.h"

namespace ddprun::trainer {

struct ImageNetOptions : TrainOptions {
  ImageNetOptions() {
    // The imagenet example's defaults (data_dir: the training ImageFolder).
    batch_size = 32;
    epochs = 90;
    lr = 0.1;
    seed = 0;                     // model init, sampler order, augmentation
    bucket_cap_bytes = 25 << 20;  // DDP's default
  }

  std::string val_dir;  // ImageFolder for validation; empty: no validation
  std::string arch = "resnet18";
  double momentum = 0.9;
  double weight_decay = 1e-4;
  std::string lr_schedule = "step";  // step: x0.1 every lr_step_epochs; cosine: to 0
  int64_t lr_step_epochs = 30;
  double warmup_epochs = 0;  // linear warm-up from 0, counted in steps
  int workers = 4;           // decode threads per process
  int image_size = 224;
  bool evaluate = false;       // validate once and exit
  bool amp = false;            // bf16 autocast (CUDA builds)
  bool channels_last = false;  // NHWC activations
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_IMAGENET_OPTIONS_H_
