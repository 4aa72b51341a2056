// Options of `ddp-train imagenet`, filled from the command line in main.cc only. Flag names
// follow PyTorch's imagenet example / imagenet_elastic_trainer.py where they have one.
#ifndef DDPRUN_WORKER_IMAGENET_OPTIONS_H_
#define DDPRUN_WORKER_IMAGENET_OPTIONS_H_

#include <cstdint>
#include <string>

#include "worker/mnist_options.h"  // ResumeMode

namespace ddprun::worker {

struct ImageNetOptions {
  std::string data_dir;  // ImageFolder for training
  std::string val_dir;   // ImageFolder for validation; empty: no validation
  std::string arch = "resnet18";
  int64_t epochs = 90;
  int64_t batch_size = 32;  // per process
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 1e-4;
  std::string lr_schedule = "step";  // step: x0.1 every lr_step_epochs; cosine: to 0
  int64_t lr_step_epochs = 30;
  double warmup_epochs = 0;  // linear warm-up from 0, counted in steps
  int workers = 4;           // decode threads per process
  int print_freq = 10;
  uint64_t seed = 0;  // model init, sampler order, augmentation
  int image_size = 224;
  int64_t max_steps = 0;  // per epoch; 0: all
  bool evaluate = false;  // validate once and exit

  std::string checkpoints_path;  // empty: no checkpoints
  int keep_checkpoints = 3;
  ResumeMode resume = ResumeMode::kAuto;
  std::string metrics_file;

  std::string backend = "auto";
  std::string device = "auto";
  double comm_timeout_s = 300;
  int threads = 0;                      // intra-op threads, as in mnist
  int64_t bucket_cap_bytes = 25 << 20;  // DDP's default
  bool amp = false;                     // bf16 autocast (CUDA builds)
  bool channels_last = false;           // NHWC activations
};

}  // namespace ddprun::worker

#endif  // DDPRUN_WORKER_IMAGENET_OPTIONS_H_
