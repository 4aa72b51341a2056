#include "rendezvous/loop_thread.h"

#include <utility>

#include "absl/time/time.h"

namespace ddprun::rendezvous {

LoopThread::LoopThread() : thread_([this] { Run(); }) {}

LoopThread::~LoopThread() { Stop(); }

void LoopThread::Post(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  tasks_.push_back(std::move(fn));
}

LoopThread::TimerId LoopThread::PostAt(TimePoint when, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return 0;
  const TimerId id = next_timer_++;
  timers_.emplace(id, std::make_pair(when, std::move(fn)));
  timer_order_.emplace(when, id);
  ++timers_added_;
  return id;
}

void LoopThread::Cancel(TimerId id) {
  absl::MutexLock lock(&mu_);
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
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void LoopThread::Run() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        if (!tasks_.empty()) {
          task = std::move(tasks_.front());
          tasks_.pop_front();
          break;
        }
        if (stopping_) return;
        const TimePoint now = std::chrono::steady_clock::now();
        if (!timer_order_.empty() && timer_order_.begin()->first <= now) {
          const TimerId id = timer_order_.begin()->second;
          timer_order_.erase(timer_order_.begin());
          auto it = timers_.find(id);
          task = std::move(it->second.second);
          timers_.erase(it);
          break;
        }
        // Sleeps until a task is posted, Stop() is called, a timer is added (it may be due
        // sooner), or the first timer is due.
        const uint64_t timers_seen = timers_added_;
        auto ready = [this, timers_seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !tasks_.empty() || stopping_ || timers_added_ != timers_seen;
        };
        if (timer_order_.empty()) {
          mu_.Await(absl::Condition(&ready));
        } else {
          const auto wait = timer_order_.begin()->first - now;
          mu_.AwaitWithTimeout(absl::Condition(&ready), absl::FromChrono(wait));
        }
      }
    }
    task();
  }
}

}  // namespace ddprun::rendezvous
