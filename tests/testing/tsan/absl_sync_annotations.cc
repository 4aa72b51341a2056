// ThreadSanitizer builds only (CMakePresets.json "tsan"): tells TSan about Abseil's
// synchronization. Debian's Abseil is a prebuilt, uninstrumented shared library, so TSan sees
// neither its locks nor its notifications: every hand-off through absl::Mutex, CondVar or
// Notification (ours, and gRPC's, which locks with absl::Mutex too) would be reported as a
// race. This file interposes their public entry points in the test executable (it defines the
// same symbols, which take precedence over the library's, and calls the library's through
// dlsym(RTLD_NEXT)), adding the happens-before edges the instrumented library would have
// recorded: release before a lock is given up, acquire after one is taken. It changes no
// behaviour; it is linked into test binaries of the tsan preset only (tests/CMakeLists.txt).
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace {

// The library's definition of a symbol this file replaces.
template <typename Fn>
Fn Real(const char* mangled) {
  void* f = dlsym(RTLD_NEXT, mangled);
  if (f == nullptr) {
    std::fprintf(stderr, "absl_sync_annotations: %s not found: %s\n", mangled, dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

void Acquired(const void* mu) { __tsan_acquire(const_cast<void*>(mu)); }
void Releasing(const void* mu) { __tsan_release(const_cast<void*>(mu)); }

// Abseil evaluates a Condition with the mutex held but inside the library (the waiter after it
// re-took the lock, or the thread that is releasing it), and when it is false the waiter gives
// the lock up inside the library: a condition that acquires before and releases after.
//
// The waiter builds this wrapper on its own stack and another thread may evaluate it, so the
// waiter publishes it with Releasing(mu) before it hands it to the library (Wrap), and Eval
// acquires before it reads a field. It is wrapped in a Condition of the library's own
// (void*) constructor, whose fields only the uninstrumented library reads: the template
// constructor's trampoline lives in this binary and read the waiter's Condition before any
// acquire, a race TSan reported now and then in LoopThreadTest (CI, 2026-11-24).
struct AnnotatedCondition {
  const absl::Condition* cond;
  const absl::Mutex* mu;
  static bool Eval(void* arg) {
    auto* self = static_cast<AnnotatedCondition*>(arg);
    Acquired(self->mu);
    const bool holds = self->cond->Eval();
    Releasing(self->mu);
    return holds;
  }
  absl::Condition Wrap() {
    Releasing(mu);
    return absl::Condition(&AnnotatedCondition::Eval, static_cast<void*>(this));
  }
};

}  // namespace

// The ABI's names of the replaced functions (Abseil 20220623, inline namespace debian3).
#define DDPRUN_ABSL(name) "_ZN4absl7debian3" name
#define DDPRUN_ABSL_CONST(name) "_ZNK4absl7debian3" name

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto real = Real<void (*)(Mutex*)>(DDPRUN_ABSL("5Mutex4LockEv"));
  real(this);
  Acquired(this);
}
void Mutex::ReaderLock() {
  static auto real = Real<void (*)(Mutex*)>(DDPRUN_ABSL("5Mutex10ReaderLockEv"));
  real(this);
  Acquired(this);
}
bool Mutex::TryLock() {
  static auto real = Real<bool (*)(Mutex*)>(DDPRUN_ABSL("5Mutex7TryLockEv"));
  const bool locked = real(this);
  if (locked) Acquired(this);
  return locked;
}
bool Mutex::ReaderTryLock() {
  static auto real = Real<bool (*)(Mutex*)>(DDPRUN_ABSL("5Mutex13ReaderTryLockEv"));
  const bool locked = real(this);
  if (locked) Acquired(this);
  return locked;
}
void Mutex::Unlock() {
  static auto real = Real<void (*)(Mutex*)>(DDPRUN_ABSL("5Mutex6UnlockEv"));
  Releasing(this);
  real(this);
}
void Mutex::ReaderUnlock() {
  static auto real = Real<void (*)(Mutex*)>(DDPRUN_ABSL("5Mutex12ReaderUnlockEv"));
  Releasing(this);
  real(this);
}
void Mutex::LockWhen(const Condition& cond) {
  static auto real =
      Real<void (*)(Mutex*, const Condition&)>(DDPRUN_ABSL("5Mutex8LockWhenERKNS0_9ConditionE"));
  AnnotatedCondition annotated{&cond, this};
  real(this, annotated.Wrap());
  Acquired(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>(
      DDPRUN_ABSL("5Mutex14ReaderLockWhenERKNS0_9ConditionE"));
  AnnotatedCondition annotated{&cond, this};
  real(this, annotated.Wrap());
  Acquired(this);
}
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      DDPRUN_ABSL("5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE"));
  AnnotatedCondition annotated{&cond, this};
  const bool met = real(this, annotated.Wrap(), timeout);
  Acquired(this);  // held on return either way
  return met;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      DDPRUN_ABSL("5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE"));
  AnnotatedCondition annotated{&cond, this};
  const bool met = real(this, annotated.Wrap(), deadline);
  Acquired(this);
  return met;
}
void Mutex::Await(const Condition& cond) {
  static auto real =
      Real<void (*)(Mutex*, const Condition&)>(DDPRUN_ABSL("5Mutex5AwaitERKNS0_9ConditionE"));
  AnnotatedCondition annotated{&cond, this};  // Wrap() releases: Await gives the lock up
  real(this, annotated.Wrap());
  Acquired(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      DDPRUN_ABSL("5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE"));
  AnnotatedCondition annotated{&cond, this};  // Wrap() releases: Await gives the lock up
  const bool met = real(this, annotated.Wrap(), timeout);
  Acquired(this);
  return met;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      DDPRUN_ABSL("5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE"));
  AnnotatedCondition annotated{&cond, this};  // Wrap() releases: Await gives the lock up
  const bool met = real(this, annotated.Wrap(), deadline);
  Acquired(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  static auto real = Real<void (*)(CondVar*, Mutex*)>(DDPRUN_ABSL("7CondVar4WaitEPNS0_5MutexE"));
  Releasing(mu);
  real(this, mu);
  Acquired(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      DDPRUN_ABSL("7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE"));
  Releasing(mu);
  const bool timed_out = real(this, mu, timeout);
  Acquired(mu);
  return timed_out;
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Time)>(
      DDPRUN_ABSL("7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE"));
  Releasing(mu);
  const bool timed_out = real(this, mu, deadline);
  Acquired(mu);
  return timed_out;
}

void Notification::Notify() {
  static auto real = Real<void (*)(Notification*)>(DDPRUN_ABSL("12Notification6NotifyEv"));
  Releasing(this);
  real(this);
}
void Notification::WaitForNotification() const {
  static auto real = Real<void (*)(const Notification*)>(
      DDPRUN_ABSL_CONST("12Notification19WaitForNotificationEv"));
  real(this);
  Acquired(this);
}
bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  static auto real = Real<bool (*)(const Notification*, Duration)>(
      DDPRUN_ABSL_CONST("12Notification30WaitForNotificationWithTimeoutENS0_8DurationE"));
  const bool notified = real(this, timeout);
  if (notified) Acquired(this);
  return notified;
}
bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  static auto real = Real<bool (*)(const Notification*, Time)>(
      DDPRUN_ABSL_CONST("12Notification31WaitForNotificationWithDeadlineENS0_4TimeE"));
  const bool notified = real(this, deadline);
  if (notified) Acquired(this);
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
