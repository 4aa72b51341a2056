// Options of `ddp-train mnist`, filled from the command line in main.cc only. Flag names follow
// the classic PyTorch MNIST example where it has one.
#ifndef DDPRUN_WORKER_MNIST_OPTIONS_H_
#define DDPRUN_WORKER_MNIST_OPTIONS_H_

#include <cstdint>
#include <string>

namespace ddprun::worker {

enum class ResumeMode {
  kAuto,    // resume when the checkpoint directory holds a checkpoint (default)
  kAlways,  // --resume: a checkpoint must exist
  kNever,   // --no-resume: refuse a directory that already holds checkpoints
};

struct MnistOptions {
  std::string data_dir;
  int64_t batch_size = 64;         // per process
  int64_t test_batch_size = 1000;  // per process
  int64_t epochs = 14;
  double lr = 1.0;
  double gamma = 0.7;         // StepLR(step_size=1)
  uint64_t seed = 1;          // model init and dropout
  uint64_t sampler_seed = 0;  // DistributedSampler's seed (torch default 0); + epoch
  int log_interval = 10;      // steps between progress lines
  bool dry_run = false;       // one step per epoch
  bool save_model = false;    // rank 0 writes the model to save_model_path at the end
  std::string save_model_path = "mnist_cnn.pt";

  std::string checkpoint_dir;    // empty: no checkpoints
  int64_t checkpoint_every = 0;  // steps; 0: only at the end of each epoch
  int keep_checkpoints = 3;
  ResumeMode resume = ResumeMode::kAuto;

  std::string metrics_file;      // empty: none (rank 0 writes it)
  std::string backend = "auto";  // gloo | nccl | auto
  std::string device = "auto";   // cpu | cuda | auto (cuda:LOCAL_RANK when available)
  double comm_timeout_s = 300;

  int64_t max_steps = 0;     // per epoch; 0: whole epoch
  int64_t train_subset = 0;  // first N training images; 0: all
  int64_t test_subset = 0;   // first N test images; 0: all
  int threads = 0;           // intra-op threads; 0: OMP_NUM_THREADS, else 1 when
                             // several processes share the node, else LibTorch's default
  int64_t bucket_cap_bytes = 1 << 20;
  bool progress_bar = true;  // a bar when stdout is a terminal
};

}  // namespace ddprun::worker

#endif  // DDPRUN_WORKER_MNIST_OPTIONS_H_
