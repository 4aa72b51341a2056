#include "launcher/workers/console_writer.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace ddprun::launcher {

struct ConsoleWriter::State {
  State(int f, std::string n) : fd(f), name(std::move(n)) {}
  const int fd;
  const std::string name;
  std::mutex mu;
  std::condition_variable changed;
  std::deque<std::string> queue;  // guarded by mu
  size_t queued = 0;              // bytes in queue; guarded by mu
  size_t dropped = 0;             // guarded by mu
  uint64_t written_batches = 0;   // progress, for FlushFor; guarded by mu
  bool writing = false;           // a batch is being written; guarded by mu
  bool closing = false;           // guarded by mu

  void Run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      changed.wait(lock, [&] { return closing || !queue.empty(); });
      if (queue.empty()) return;  // closing, and everything written
      std::string batch = std::move(queue.front());
      queue.pop_front();
      writing = true;
      lock.unlock();
      WriteAll(fd, batch);  // may block for as long as nobody reads the console
      lock.lock();
      writing = false;
      queued -= batch.size();
      ++written_batches;
      changed.notify_all();
    }
  }
};

ConsoleWriter::ConsoleWriter(int fd, std::string name)
    : state_(std::make_shared<State>(fd, std::move(name))) {
  // Detached: at exit it may be blocked in write() on a console nobody reads, and must not hold
  // ddprun up; it owns a reference to the state it uses.
  std::thread([state = state_] { state->Run(); }).detach();
}

ConsoleWriter::~ConsoleWriter() {
  FlushFor(std::chrono::seconds(2));
  size_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->closing = true;
    dropped = state_->dropped;
    state_->changed.notify_all();
  }
  if (dropped > 0) {
    LogWarning(absl::StrCat(dropped, " bytes of worker output to ddprun's ", state_->name,
                            " were dropped: nobody read it"));
  }
}

int ConsoleWriter::fd() const { return state_->fd; }

bool ConsoleWriter::Write(std::string bytes) {
  if (bytes.empty()) return true;
  bool first_drop = false;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->queued + bytes.size() <= kMaxQueued) {
      state_->queued += bytes.size();
      state_->queue.push_back(std::move(bytes));
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
  std::unique_lock<std::mutex> lock(state_->mu);
  for (;;) {
    if (state_->queue.empty() && !state_->writing) return true;
    const uint64_t before = state_->written_batches;
    state_->changed.wait_for(lock, idle, [&] {
      return state_->written_batches != before || (state_->queue.empty() && !state_->writing);
    });
    if (state_->written_batches == before && !(state_->queue.empty() && !state_->writing)) {
      return false;  // no progress for `idle`: nobody reads
    }
  }
}

size_t ConsoleWriter::dropped_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->dropped;
}

}  // namespace ddprun::launcher
