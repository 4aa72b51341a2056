// A single-threaded epoll loop: file descriptors, timers and cross-thread Post(). The thread
// that calls Run() owns every callback; other threads may only Post() and Stop().
#ifndef DDPRUN_COMMON_EVENT_LOOP_H_
#define DDPRUN_COMMON_EVENT_LOOP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/executor.h"

namespace ddprun {

class EventLoop final : public Executor {
 public:
  using FdCallback = std::function<void(uint32_t epoll_events)>;
  using TimerId = uint64_t;

  EventLoop();
  ~EventLoop() override;
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Watches `fd` for `events` (EPOLLIN...). The loop does not own or close the fd. A callback
  // may add or remove any registration, its own included.
  void AddFd(int fd, uint32_t events, FdCallback callback);
  void RemoveFd(int fd);

  // Runs `callback` once at `deadline` (steady clock). Cancelling a fired timer is a no-op.
  TimerId AddTimer(TimePoint deadline, std::function<void()> callback);
  TimerId AddTimerAfter(Duration delay, std::function<void()> callback) {
    return AddTimer(std::chrono::steady_clock::now() + delay, std::move(callback));
  }
  void CancelTimer(TimerId id);

  // Thread-safe.
  void Post(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_) override;

  // Dispatches until Stop(). Returns at once if Stop() was already called.
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Thread-safe and idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct FdEntry {
    int fd;
    std::shared_ptr<FdCallback> callback;
  };
  void Wake();
  void DrainPosted() ABSL_LOCKS_EXCLUDED(mu_);
  int NextTimeoutMs() const;
  void FireDueTimers();

  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Post() and Stop() from other threads
  uint64_t next_registration_ = 1;
  std::map<uint64_t, FdEntry> fds_;          // registration id -> entry
  std::map<int, uint64_t> registration_of_;  // fd -> registration id
  TimerId next_timer_ = 1;
  std::multimap<TimePoint, TimerId> timer_queue_;
  std::map<TimerId, std::function<void()>> timers_;

  // State below is shared with the threads that Post() and Stop(); the rest is the loop
  // thread's.
  absl::Mutex mu_;
  std::vector<std::function<void()>> posted_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ddprun

#endif  // DDPRUN_COMMON_EVENT_LOOP_H_
