// Per-epoch metrics as JSON lines (one object per line), for plots and benchmarks.
#ifndef DDPRUN_TRAINER_IO_METRICS_H_
#define DDPRUN_TRAINER_IO_METRICS_H_

#include <cstdint>
#include <fstream>
#include <string>

#include "absl/status/status.h"

namespace ddprun::trainer {

struct EpochMetrics {
  int64_t epoch = 0;
  int world_size = 1;
  double samples_per_s = 0;  // training samples (all ranks) / training seconds of this epoch
  double train_loss = 0;     // mean NLL over the epoch's training batches, all ranks
  double test_loss = 0;      // mean NLL over the test set
  double test_acc = 0;       // fraction in [0, 1]
  double train_s = 0;        // training seconds of this epoch (without evaluation)
  double wall_s = 0;         // seconds since the worker started, at the end of this epoch
  double lr = 0;             // learning rate used in this epoch
  int64_t samples = 0;       // training samples processed in this epoch by this run
  int64_t global_step = 0;   // optimizer steps since the first run started
  bool resumed = false;      // the epoch began from a checkpoint
};

std::string FormatMetricsLine(const EpochMetrics& m);

// Appends one line per Write() to a file; each line flushed. Not thread-safe.
class MetricsWriter {
 public:
  // Opens `path` for append; kFailedPrecondition naming the file when it cannot.
  absl::Status Open(const std::string& path);
  absl::Status Write(const EpochMetrics& m);
  bool is_open() const { return out_.is_open(); }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_METRICS_H_
