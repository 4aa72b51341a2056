#include "launcher/workers/console_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/std_mutex.h"

namespace ddprun::launcher {
namespace {

// Whether two descriptors write to the same file, pipe or terminal (`2>&1`).
bool SameFile(int a, int b) {
  struct stat sa {
  }, sb{};
  if (fstat(a, &sa) != 0 || fstat(b, &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace

// One queue and one writing thread per console: two writers of the same file share it, so
// that their batches reach the file in the order they were queued. Thread-safe: every member
// that changes is guarded by mu (a StdMutex: FlushFor waits on the steady clock).
struct ConsoleWriter::State {
  State(std::string n, bool t) : name(std::move(n)), terminal(t) {}
  struct Batch {
    int fd;
    std::string bytes;
  };
  const std::string name;
  // A terminal: a redraw (\r...) replaces the line shown, whoever left it open.
  const bool terminal;
  StdMutex mu;
  std::condition_variable changed;
  std::deque<Batch> queue ABSL_GUARDED_BY(mu);
  size_t queued ABSL_GUARDED_BY(mu) = 0;  // bytes in queue
  size_t dropped ABSL_GUARDED_BY(mu) = 0;
  uint64_t written_batches ABSL_GUARDED_BY(mu) = 0;  // progress, for FlushFor
  bool writing ABSL_GUARDED_BY(mu) = false;          // a batch is being written
  // ConsoleWriters sharing the state: the one that made it, from before the thread starts (the
  // thread ends once there are none).
  int owners ABSL_GUARDED_BY(mu) = 1;
  // Who left the console's last queued line open (no newline at its end).
  const void* open_line_writer ABSL_GUARDED_BY(mu) = nullptr;
  bool line_open ABSL_GUARDED_BY(mu) = false;

  void Run() ABSL_LOCKS_EXCLUDED(mu) {
    StdMutexLock lock(&mu);
    for (;;) {
      lock.Wait(&changed,
                [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return owners == 0 || !queue.empty(); });
      if (queue.empty()) return;  // closed by every owner, and everything written
      Batch batch = std::move(queue.front());
      queue.pop_front();
      writing = true;
      lock.Unlock();
      WriteAll(batch.fd, batch.bytes);  // may block for as long as nobody reads the console
      lock.Lock();
      writing = false;
      queued -= batch.bytes.size();
      ++written_batches;
      changed.notify_all();
    }
  }
};

ConsoleWriter::ConsoleWriter(int fd, std::string name, const ConsoleWriter* same_file_as)
    : fd_(fd) {
  if (same_file_as != nullptr && SameFile(fd, same_file_as->fd_)) {
    state_ = same_file_as->state_;
    StdMutexLock lock(&state_->mu);
    ++state_->owners;
    return;
  }
  state_ = std::make_shared<State>(std::move(name), isatty(fd) == 1);  // owners = 1
  // Detached: at exit it may be blocked in write() on a console nobody reads, and must not hold
  // ddprun up; it owns a reference to the state it uses.
  std::thread([state = state_] { state->Run(); }).detach();
}

ConsoleWriter::~ConsoleWriter() {
  FlushFor(std::chrono::seconds(2));
  size_t dropped = 0;
  {
    StdMutexLock lock(&state_->mu);
    if (--state_->owners > 0) return;  // the other writer of this file reports
    dropped = state_->dropped;
    state_->changed.notify_all();
  }
  if (dropped > 0) {
    LogWarning(absl::StrCat(dropped, " bytes of worker output to ddprun's ", state_->name,
                            " were dropped: nobody read it"));
  }
}

int ConsoleWriter::fd() const { return fd_; }

bool ConsoleWriter::Write(std::string bytes, const void* writer,
                          absl::string_view prefix_if_taken) {
  if (bytes.empty()) return true;
  bool first_drop = false;
  {
    StdMutexLock lock(&state_->mu);
    const bool own_line = state_->line_open && state_->open_line_writer == writer;
    // The writer meant to continue its line, which is not its own any more: a line of its own.
    if (!own_line && !prefix_if_taken.empty())
      bytes.insert(0, prefix_if_taken.data(), prefix_if_taken.size());
    // Another writer's line is open: end it first, so that this one starts a line of its own.
    // On a terminal a redraw (a progress bar's \r update) replaces what is shown instead, as
    // when workers write to the terminal themselves: bars of two ranks take turns on one line
    // rather than scroll the terminal a line per update. A file or a pipe keeps every line.
    const bool redraws = state_->terminal && bytes.front() == '\r';
    if (state_->line_open && !own_line && !redraws) bytes.insert(0, "\n");
    if (state_->queued + bytes.size() <= kMaxQueued) {
      state_->line_open = bytes.back() != '\n';
      state_->open_line_writer = writer;
      state_->queued += bytes.size();
      state_->queue.push_back({fd_, std::move(bytes)});
      state_->changed.notify_all();
      return true;
    }
    first_drop = state_->dropped == 0;
    state_->dropped += bytes.size();
  }
  if (first_drop) {
    LogWarning(absl::StrCat("ddprun's ", state_->name,
                            " is not being read: worker output to it is dropped while it stays "
                            "full (log files under --log-dir get every byte)"));
  }
  return false;
}

bool ConsoleWriter::FlushFor(std::chrono::milliseconds idle) {
  StdMutexLock lock(&state_->mu);
  for (;;) {
    if (state_->queue.empty() && !state_->writing) return true;
    const uint64_t before = state_->written_batches;
    lock.WaitFor(&state_->changed, idle, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
      return state_->written_batches != before || (state_->queue.empty() && !state_->writing);
    });
    if (state_->written_batches == before && !(state_->queue.empty() && !state_->writing)) {
      return false;  // no progress for `idle`: nobody reads
    }
  }
}

size_t ConsoleWriter::dropped_bytes() const {
  StdMutexLock lock(&state_->mu);
  return state_->dropped;
}

}  // namespace ddprun::launcher
