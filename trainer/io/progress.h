// Rank 0's training progress: a redrawn bar on a terminal, plain lines (the classic example's
// "Train Epoch: 1 [640/60000 (1%)]\tLoss: ..." format) otherwise, so logs stay greppable.
#ifndef DDPRUN_TRAINER_IO_PROGRESS_H_
#define DDPRUN_TRAINER_IO_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <ostream>

namespace ddprun::trainer {

class ProgressReporter {
 public:
  // `tty`: draw a bar with '\r'. `log_interval`: steps between plain lines. Not owned: `out`.
  ProgressReporter(std::ostream& out, bool tty, int log_interval);

  // After step `step` (1-based within the epoch) of `steps`; `done`/`total` are global samples;
  // `global_step` counts optimizer steps since the start of training (checkpoints carry it), so
  // that a restart's lost work can be read off the plain lines.
  void Step(int64_t epoch, int64_t step, int64_t steps, int64_t done, int64_t total, double loss,
            double samples_per_s, int64_t global_step);
  // Ends the bar line (if any) before other output.
  void EndEpoch();

 private:
  std::ostream& out_;
  bool tty_;
  int log_interval_;
  bool bar_open_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_PROGRESS_H_
