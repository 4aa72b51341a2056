// ConsoleWriter: ddprun's stdout or stderr as its workers' output reaches it, written by a thread
// of its own so that a console nobody reads (a full pipe) never blocks the agent's loop: signals,
// worker exits and the rendezvous go on. Writes are queued whole (one write per batch, so lines
// stay whole) up to kMaxQueued bytes; beyond that a batch is dropped and counted, with one
// warning on ddprun's log; the log files still get every byte. Thread-safe.
//
// Several writers share one console (each worker stream, and ddprun's own log lines). A writer
// may leave the console's last line open (a progress bar, or a line in progress shown before
// it ends); the console's open line belongs to that writer. When another writer writes while
// the line is open, a newline is put first, so that two writers never share a line (on a
// terminal a redraw, "\r...", replaces the line shown instead, as when workers share a terminal).
// ddprun's stdout and stderr on one file (`2>&1`, a terminal, a Slurm output file) share one queue
// and one open line, so that this holds across them too.
#ifndef DDPRUN_LAUNCHER_WORKERS_CONSOLE_WRITER_H_
#define DDPRUN_LAUNCHER_WORKERS_CONSOLE_WRITER_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "common/log.h"

namespace ddprun::launcher {

class ConsoleWriter final : public LogSink {
 public:
  static constexpr size_t kMaxQueued = 8 << 20;

  // Writes to `fd` (not owned; ddprun's 1 or 2). `name` is for messages ("stdout"). When `fd`
  // is the same file as `same_file_as`'s, the two share their queue, thread and open line.
  ConsoleWriter(int fd, std::string name, const ConsoleWriter* same_file_as = nullptr);
  // Waits up to `flush_timeout` while the console still takes bytes (FlushFor), then leaves a
  // writer blocked on a console nobody reads behind.
  ~ConsoleWriter();
  ConsoleWriter(const ConsoleWriter&) = delete;
  ConsoleWriter& operator=(const ConsoleWriter&) = delete;

  int fd() const;
  // Queues `bytes` from `writer` (any address that names the writer; nullptr is ddprun's own
  // log); never blocks. False when dropped (the queue was full). When another writer's line is
  // open, a newline goes first. `prefix_if_taken`: `bytes` begin by continuing the line `writer`
  // left open; when that line is no longer the writer's (another wrote since), it starts a line
  // of its own with this prefix (decided under the console's lock, with the queueing).
  bool Write(std::string bytes, const void* writer = nullptr,
             absl::string_view prefix_if_taken = absl::string_view());
  // Waits until everything queued is written, or until no byte was written for `idle`.
  // True when drained.
  bool FlushFor(std::chrono::milliseconds idle);
  size_t dropped_bytes() const;
  // LogSink: ddprun's own log lines, queued like worker output.
  void WriteLine(std::string line) override { Write(std::move(line)); }

 private:
  struct State;
  const int fd_;
  std::shared_ptr<State> state_;  // shared with the writing thread, which may outlive us
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_WORKERS_CONSOLE_WRITER_H_
