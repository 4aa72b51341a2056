// A named pipe that the workers write lines into, read on the agent's EventLoop: torch's
// FileTimer requests (TORCHELASTIC_TIMER_FILE) and ddp-train's step reports
// (DDPRUN_PROGRESS_FILE). Writers open, write one line in one write() (atomic up to PIPE_BUF)
// and close, or keep the pipe open; the agent holds a write end itself so that the pipe never
// reads as ended between writers (no EOF storm on epoll).
//
// A hostile or broken worker cannot stall the loop: each wake-up reads a bounded number of
// bytes, a line longer than kMaxLine is dropped whole (reported once to the handler as
// oversized), and parsing is the handler's job.
#ifndef DDPRUN_LAUNCHER_HANGS_FIFO_CHANNEL_H_
#define DDPRUN_LAUNCHER_HANGS_FIFO_CHANNEL_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/event_loop.h"

namespace ddprun::launcher {

class FifoChannel {
 public:
  // torch refuses requests longer than PIPE_BUF; so does the channel.
  static constexpr size_t kMaxLine = 4096;
  // `oversized`: the line was longer than kMaxLine; `line` then holds its start only.
  using LineHandler = std::function<void(absl::string_view line, bool oversized)>;

  // Creates a FIFO at `path` (mode 0600), or uses the FIFO already there; anything else at
  // `path` is an InvalidArgument error naming it. `describe` names the pipe in messages
  // ("TORCHELASTIC_TIMER_FILE=/tmp/x").
  static absl::StatusOr<std::unique_ptr<FifoChannel>> Open(EventLoop* loop, const std::string& path,
                                                           LineHandler on_line);
  ~FifoChannel();  // stops reading; removes the FIFO if Open created it
  FifoChannel(const FifoChannel&) = delete;
  FifoChannel& operator=(const FifoChannel&) = delete;

  const std::string& path() const { return path_; }
  // Reads whatever is buffered now (the agent drains before judging expiries).
  void Drain();

 private:
  FifoChannel(EventLoop* loop, std::string path, bool created, LineHandler on_line);
  void OnReadable();

  EventLoop* loop_;
  const std::string path_;
  const bool created_;
  LineHandler on_line_;
  int read_fd_ = -1;
  int keep_fd_ = -1;  // our own write end
  std::string partial_;
  bool skipping_ = false;  // inside an oversized line, until its newline
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_HANGS_FIFO_CHANNEL_H_
