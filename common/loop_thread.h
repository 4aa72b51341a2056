// LoopThread: one thread that runs posted tasks in order, and timers. The rendezvous server's
// state machine and the client's connection state are each owned by one LoopThread; gRPC
// reactors only post to it, so no state is shared between threads and no reactor ever blocks.
//
// Unlike ddprun::EventLoop (common/event_loop.h: epoll, run on the caller's thread, timers only
// from that thread), it owns its thread and its timers may be set from any thread, which is what
// gRPC reactors need.
//
// Thread-safe: Post, PostAt and Cancel may be called from any thread, including the loop's own.
#ifndef DDPRUN_COMMON_LOOP_THREAD_H_
#define DDPRUN_COMMON_LOOP_THREAD_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "common/clock.h"
#include "common/executor.h"
#include "common/std_mutex.h"

namespace ddprun {

class LoopThread final : public Executor {
 public:
  using TimerId = uint64_t;

  LoopThread();            // starts the thread
  ~LoopThread() override;  // Stop()
  LoopThread(const LoopThread&) = delete;
  LoopThread& operator=(const LoopThread&) = delete;

  // Runs `fn` on the loop thread, after everything posted before. Dropped after Stop().
  void Post(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_) override;
  // Runs `fn` on the loop thread once the steady clock reaches `when`.
  TimerId PostAt(TimePoint when, std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels a timer that has not run yet; no-op otherwise.
  void Cancel(TimerId id) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs every task already posted (timers are dropped), then ends the thread. Idempotent; must
  // not be called from the loop thread.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  bool InLoopThread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  // A std::mutex and condition variable rather than absl::Mutex conditions: posters wake the
  // loop only when it sleeps, and the loop takes every queued task in one swap, which keeps a
  // burst of 10,000 joins from costing 10,000 futex wake-ups. The timers wait on the steady
  // clock, which absl::CondVar does not (common/std_mutex.h).
  StdMutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::multimap<TimePoint, TimerId> timer_order_ ABSL_GUARDED_BY(mu_);
  std::map<TimerId, std::pair<TimePoint, std::function<void()>>> timers_ ABSL_GUARDED_BY(mu_);
  TimerId next_timer_ ABSL_GUARDED_BY(mu_) = 1;
  // Bumped by PostAt so that a loop asleep on an older (or no) first deadline wakes up.
  uint64_t timers_added_ ABSL_GUARDED_BY(mu_) = 0;
  bool sleeping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ddprun

#endif  // DDPRUN_COMMON_LOOP_THREAD_H_
