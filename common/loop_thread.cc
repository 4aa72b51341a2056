#include "common/loop_thread.h"

#include <utility>

namespace ddprun {

LoopThread::LoopThread() : thread_([this] { Run(); }) {}

LoopThread::~LoopThread() { Stop(); }

void LoopThread::Post(std::function<void()> fn) {
  bool wake = false;
  {
    StdMutexLock lock(&mu_);
    if (stopping_) return;
    tasks_.push_back(std::move(fn));
    wake = sleeping_;
  }
  if (wake) wake_.notify_one();
}

LoopThread::TimerId LoopThread::PostAt(TimePoint when, std::function<void()> fn) {
  bool wake = false;
  TimerId id = 0;
  {
    StdMutexLock lock(&mu_);
    if (stopping_) return 0;
    id = next_timer_++;
    timers_.emplace(id, std::make_pair(when, std::move(fn)));
    timer_order_.emplace(when, id);
    ++timers_added_;
    wake = sleeping_;
  }
  if (wake) wake_.notify_one();
  return id;
}

void LoopThread::Cancel(TimerId id) {
  StdMutexLock lock(&mu_);
  auto it = timers_.find(id);
  if (it == timers_.end()) return;
  auto range = timer_order_.equal_range(it->second.first);
  for (auto o = range.first; o != range.second; ++o) {
    if (o->second == id) {
      timer_order_.erase(o);
      break;
    }
  }
  timers_.erase(it);
}

void LoopThread::Stop() {
  {
    StdMutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void LoopThread::Run() {
  std::deque<std::function<void()>> batch;
  for (;;) {
    {
      StdMutexLock lock(&mu_);
      for (;;) {
        // Every queued task, in order, for one lock acquisition; then the timers that are due,
        // so that a steady stream of posts cannot starve them.
        batch.swap(tasks_);
        const TimePoint now = std::chrono::steady_clock::now();
        while (!stopping_ && !timer_order_.empty() && timer_order_.begin()->first <= now) {
          const TimerId id = timer_order_.begin()->second;
          timer_order_.erase(timer_order_.begin());
          auto it = timers_.find(id);
          batch.push_back(std::move(it->second.second));
          timers_.erase(it);
        }
        if (!batch.empty()) break;
        if (stopping_) return;
        // Sleeps until a task is posted, Stop() is called, a timer is added (it may be due
        // sooner), or the first timer is due.
        const uint64_t timers_seen = timers_added_;
        auto ready = [this, timers_seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !tasks_.empty() || stopping_ || timers_added_ != timers_seen;
        };
        sleeping_ = true;
        if (timer_order_.empty()) {
          lock.Wait(&wake_, ready);
        } else {
          // A copy: wait_until reads its deadline again after each wake-up, and a Cancel()
          // while we wait erases the node the reference would point into (ASan found it).
          const TimePoint first_due = timer_order_.begin()->first;
          lock.WaitUntil(&wake_, first_due, ready);
        }
        sleeping_ = false;
      }
    }
    for (std::function<void()>& task : batch) task();
    batch.clear();
  }
}

}  // namespace ddprun
