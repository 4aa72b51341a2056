// Must NOT compile under DDPRUN_THREAD_SAFETY: Count() reads a member guarded by mu_ without
// holding mu_, which clang's -Wthread-safety reports and the build treats as an error.
// tests/thread_safety checks that building this fails for exactly that reason.
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace {

// Thread-safe in intent: every member below is guarded by mu_.
class Counter {
 public:
  void Add() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ++count_;
  }
  int Count() const { return count_; }  // the deliberate violation: mu_ is not held

 private:
  mutable absl::Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

int main() {
  Counter counter;
  counter.Add();
  return counter.Count() == 1 ? 0 : 1;
}
