// ddprun's log lines (common/log.h) kept for a test to read or wait for, instead of going to
// stderr: install with SetLogSink(&log) and remove with SetLogSink(nullptr) before it goes.
// Header-only; the test links ddprun_common through the library under test.
//
// Thread-safe: any thread may log while the test thread reads or waits.
#ifndef DDPRUN_TESTS_TESTING_CAPTURED_LOG_H_
#define DDPRUN_TESTS_TESTING_CAPTURED_LOG_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/log.h"

namespace ddprun::testing {

class CapturedLog : public LogSink {
 public:
  void WriteLine(std::string line) override {
    absl::MutexLock lock(&mu_);
    text_ += line;
  }
  std::string text() const {
    absl::MutexLock lock(&mu_);
    return text_;
  }
  // How many times `needle` occurs in what was logged.
  int Count(const std::string& needle) const {
    absl::MutexLock lock(&mu_);
    return CountLocked(needle);
  }
  // Waits up to `timeout` until `needle` occurs `times` times; whether it did.
  bool WaitFor(const std::string& needle, int times, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto enough = [this, &needle, times]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return CountLocked(needle) >= times; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

 private:
  int CountLocked(const std::string& needle) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int n = 0;
    for (size_t at = text_.find(needle); at != std::string::npos;
         at = text_.find(needle, at + needle.size())) {
      ++n;
    }
    return n;
  }

  mutable absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_CAPTURED_LOG_H_
