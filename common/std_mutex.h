// StdMutex and StdMutexLock: a std::mutex and its std::unique_lock as clang's -Wthread-safety
// sees them, so that ABSL_GUARDED_BY(mu_) and ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) are checked on
// a StdMutex as on an absl::Mutex.
//
// For the classes that wait on a std::condition_variable with a timeout, and only for them:
// Abseil 20220623's absl::CondVar and Mutex::AwaitWithTimeout time out on the wall clock
// (FUTEX_CLOCK_REALTIME), which a clock step moves; libstdc++'s wait_for and wait_until on the
// steady clock do not. Everything else uses absl::Mutex.
//
// Thread-safe as std::mutex is; a StdMutexLock belongs to the thread that made it.
#ifndef DDPRUN_COMMON_STD_MUTEX_H_
#define DDPRUN_COMMON_STD_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "absl/base/thread_annotations.h"

namespace ddprun {

class ABSL_LOCKABLE StdMutex {
 public:
  StdMutex() = default;
  StdMutex(const StdMutex&) = delete;
  StdMutex& operator=(const StdMutex&) = delete;

 private:
  friend class StdMutexLock;
  std::mutex mu_;
};

// Holds the mutex from construction to destruction, except between Unlock() and Lock() and
// while a Wait* sleeps. The predicates of Wait* run with the mutex held: they say so with
// ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) on the lambda, which lets them read what it guards.
class ABSL_SCOPED_LOCKABLE StdMutexLock {
 public:
  explicit StdMutexLock(StdMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : lock_(mu->mu_) {}
  ~StdMutexLock() ABSL_UNLOCK_FUNCTION() {}
  StdMutexLock(const StdMutexLock&) = delete;
  StdMutexLock& operator=(const StdMutexLock&) = delete;

  // Around blocking work done without the mutex.
  void Unlock() ABSL_UNLOCK_FUNCTION() { lock_.unlock(); }
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { lock_.lock(); }

  // std::condition_variable's waits, on this lock.
  template <typename Predicate>
  void Wait(std::condition_variable* cv, Predicate ready) {
    cv->wait(lock_, std::move(ready));
  }
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(std::condition_variable* cv, const std::chrono::duration<Rep, Period>& timeout,
               Predicate ready) {
    return cv->wait_for(lock_, timeout, std::move(ready));
  }
  template <typename Clock, typename Duration, typename Predicate>
  bool WaitUntil(std::condition_variable* cv,
                 const std::chrono::time_point<Clock, Duration>& deadline, Predicate ready) {
    return cv->wait_until(lock_, deadline, std::move(ready));
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace ddprun

#endif  // DDPRUN_COMMON_STD_MUTEX_H_
