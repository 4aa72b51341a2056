// The ddprun progress channel, worker side. ddprun makes a FIFO per local rank and exports its
// path as DDPRUN_PROGRESS_FILE; after every optimizer step each rank writes one line
//   {"pid":<pid>,"step":<global step>}\n
// or, at the start of a step, with how long its previous step computed before it waited on the
// step's collective (ddprun's slow-node judge, issue 41), and how long the checkpoint it saved
// since its last report took (the checkpoint advice, issue 41):
//   {"pid":<pid>,"step":<global step>,"compute_ms":<ms>,"checkpoint_ms":<ms>}\n
// to it, so the launcher sees which rank is making progress (and which stopped) without reading
// logs. Training must never wait for the launcher: the FIFO is opened non-blocking, a full pipe
// drops the report, and any other failure turns reporting off after one warning.
#ifndef DDPRUN_TRAINER_IO_STEP_REPORT_H_
#define DDPRUN_TRAINER_IO_STEP_REPORT_H_

#include <sys/types.h>

#include <cstdint>
#include <iostream>
#include <optional>
#include <string>

namespace ddprun::trainer {

class StepReporter {
 public:
  // `path` empty: off. Otherwise opens it once, O_WRONLY | O_NONBLOCK (a FIFO without a reader
  // fails with ENXIO instead of blocking); when that fails or `path` is no FIFO, writes
  //   ddp-train: step reports off: <path>: <reason>
  // to `warnings` and stays off. Once on, SIGPIPE is ignored for the whole process, so a
  // launcher that went away cannot kill training. `warnings` must outlive this object.
  explicit StepReporter(const std::string& path, std::ostream& warnings = std::cerr);
  ~StepReporter();
  StepReporter(const StepReporter&) = delete;
  StepReporter& operator=(const StepReporter&) = delete;

  bool on() const { return fd_ >= 0; }

  // One write() of one line (atomic: far below PIPE_BUF). A full pipe drops the line silently;
  // another error (EPIPE: the reader closed) warns once and turns reporting off.
  void Report(int64_t step, std::optional<double> compute_ms = std::nullopt,
              std::optional<double> checkpoint_ms = std::nullopt);

 private:
  void TurnOff(const std::string& reason);

  std::string path_;
  std::ostream& warnings_;
  int fd_ = -1;
  pid_t pid_ = 0;  // cached: one syscall per report, the write
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_STEP_REPORT_H_
