// Options every `ddp-train` subcommand has, filled from the command line in main.cc only, where
// AddCommonFlags declares their flags once. Each subcommand's options (mnist_options.h,
// imagenet_options.h) extend these and set the defaults that differ between the two.
#ifndef DDPRUN_TRAINER_TRAIN_TRAIN_OPTIONS_H_
#define DDPRUN_TRAINER_TRAIN_TRAIN_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "trainer/io/fault_injection.h"

namespace ddprun::trainer {

enum class ResumeMode {
  kAuto,    // resume when the checkpoint directory holds a checkpoint (default)
  kAlways,  // --resume: a checkpoint must exist
  kNever,   // --no-resume: refuse a directory that already holds checkpoints
};

struct TrainOptions {
  std::string data_dir;
  int64_t batch_size = 0;  // per process; the defaults of these five are the subcommand's
  int64_t epochs = 0;
  double lr = 0;
  uint64_t seed = 0;
  int64_t bucket_cap_bytes = 0;

  int log_interval = 10;  // steps between progress lines
  int64_t max_steps = 0;  // per epoch; 0: whole epoch

  std::string checkpoint_dir;    // empty: no checkpoints
  int64_t checkpoint_every = 0;  // steps; 0: only at the end of each epoch
  // --checkpoint-every=auto: as often as ddprun's checkpoint advice says (seconds of training,
  // DDPRUN_CHECKPOINT_INTERVAL_ADVICE, then the control channel's updates); before any advice,
  // every kIntervalBeforeAdvice.
  bool checkpoint_auto = false;
  int keep_checkpoints = 3;
  ResumeMode resume = ResumeMode::kAuto;
  std::string metrics_file;  // empty: none (rank 0 writes it)

  std::string backend = "auto";  // gloo | nccl | auto
  std::string device = "auto";   // cpu | cuda | auto (cuda:LOCAL_RANK when available)
  double comm_timeout_s = 300;
  int threads = 0;  // intra-op threads; 0: OMP_NUM_THREADS, else 1 when several processes
                    // share the node, else LibTorch's default
  // --deterministic: the same bits on a GPU run after run (cuDNN's deterministic algorithms,
  // no autotuning, a fixed cuBLAS workspace), at some speed; the CPU is deterministic already.
  bool deterministic = false;

  std::optional<HangFault> fault;  // hidden --fault=hang@STEP:RANK (tests of launchers)
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_TRAIN_OPTIONS_H_
