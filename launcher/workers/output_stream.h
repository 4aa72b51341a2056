// One worker stream (stdout or stderr) on its way out of the agent: split into whole lines,
// optionally prefixed ("[default0]:") and written to the console, copied raw to a log file, and
// the last lines kept for the failure summary. The agent's single loop thread does all writes.
// A line redrawn with \r (a tqdm bar) is shown as it is redrawn: each update, as of the end of
// the data read, is written whole as "\r<prefix><text>", and the finished line as
// "\r<prefix><last text>\n"; the log file keeps the raw stream. That redrawing is for a
// terminal or a prefix: on a pipe or a file without a prefix the console gets the worker's bytes
// unchanged, and with a prefix only the prefixes are added (a CRLF stays a CRLF), except that a
// line redrawn with \r is shown as its redraws there too. A line longer than kMaxLine is written
// in pieces that add nothing.
//
// A line in progress (no newline yet) is held back for a moment, so that a line written in
// several pieces reaches the console whole, then shown as it is when FlushLineInProgress() is
// called (the worker group calls it kLineInProgressDelay after such bytes arrive): a progress bar
// or a "loading..." line in a Slurm output file or a pipe moves as it does on a terminal. Its
// console line then stays open; a console shared with other writers (ConsoleWriter) ends it
// before another writer's line, and the rest of it starts a line of its own (with the prefix).
#ifndef DDPRUN_LAUNCHER_WORKERS_OUTPUT_STREAM_H_
#define DDPRUN_LAUNCHER_WORKERS_OUTPUT_STREAM_H_

#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "launcher/workers/console_writer.h"

namespace ddprun::launcher {

class OutputStream {
 public:
  // What the console is: a terminal shows \r redraws and gets whole, redrawn lines; a pipe or
  // a file gets the bytes as they are.
  enum class Console { kStream, kTerminal };
  struct Config {
    int console_fd = -1;    // -1: not shown on the console
    std::string prefix;     // prepended to each console line
    int log_fd = -1;        // -1: no log file; not owned
    size_t tail_lines = 0;  // lines to keep for Tail()
    // --duplicate-std*-filters: lines containing any of `filters` are also written, with
    // `filtered_prefix`, to filtered_fd (one file for every worker of the attempt; not owned).
    int filtered_fd = -1;
    std::vector<std::string> filters;
    std::string filtered_prefix;
    Console console = Console::kStream;
    // When set, console writes go through it (never blocking) instead of to console_fd.
    ConsoleWriter* console_writer = nullptr;
    std::string log_path;  // log_fd's file, for messages
  };
  // A line longer than this is emitted in pieces rather than buffered without bound.
  static constexpr size_t kMaxLine = 64 * 1024;
  // How long a line in progress is held back before it is shown unfinished: long enough for the
  // pieces of one print() (CPython unbuffered writes each piece) to arrive, short enough that a
  // bar redrawn every 100 ms (tqdm's default) moves at its pace.
  static constexpr std::chrono::milliseconds kLineInProgressDelay{100};

  explicit OutputStream(Config config);

  void Feed(absl::string_view data);
  // Whether bytes of a line in progress wait to be shown (FlushLineInProgress would write).
  bool HasLineInProgress() const;
  // Shows the line in progress as far as it has come (see the file comment).
  void FlushLineInProgress();
  // End of stream: emits a trailing partial line (with a newline added on the console).
  void Finish();
  std::vector<std::string> Tail() const { return {tail_.begin(), tail_.end()}; }
  // From now on also keep the raw bytes (up to `limit`): what a worker prints while dying,
  // e.g. CPython's faulthandler dump, for its stacks file.
  void StartCapture(size_t limit) {
    capturing_ = true;
    capture_limit_ = limit;
    capture_.clear();
  }
  std::string TakeCapture() {
    capturing_ = false;
    return std::move(capture_);
  }

 private:
  struct Batch {
    std::string console, filtered;
    // The console bytes begin by continuing this stream's open console line (no prefix).
    bool continues = false;
  };
  enum class LineEnd { kNewline, kPiece };  // a piece: kMaxLine bytes of a longer line
  void EmitLine(absl::string_view line, LineEnd end, Batch* batch);
  // The console shows each line as it is (no prefix, not a terminal): bytes pass through.
  bool PassesThrough() const;
  // Whether this stream's last console line is still open for it to continue.
  bool ConsoleLineOpen() const;
  // The prefix for the next console line of `batch`: none when it continues this stream's open
  // line (then marked in the batch, when it is the batch's start).
  absl::string_view PrefixFor(Batch* batch) const;
  void EmitPassThrough(absl::string_view data, Batch* batch);
  void Write(const Batch& batch);
  void ShowUpdate(Batch* batch);

  Config config_;
  std::string partial_;
  // Console bytes held until a line ends, when they pass through unchanged.
  std::string passthrough_;
  // The console's current line was begun by this stream (a piece of a long line, or a line in
  // progress shown unfinished): what follows continues it, unprefixed.
  bool continuing_ = false;
  // Bytes of partial_ already on the console as a line in progress.
  size_t partial_shown_ = 0;
  // The unfinished line's latest \r update as shown on the console.
  std::string shown_;
  std::deque<std::string> tail_;
  bool log_failed_ = false;  // a write to the log file failed (a full disk): warned once
  bool capturing_ = false;
  size_t capture_limit_ = 0;
  std::string capture_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_WORKERS_OUTPUT_STREAM_H_
