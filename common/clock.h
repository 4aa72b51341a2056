// Time as an injected dependency: production code reads a Clock, tests step a FakeClock.
#ifndef DDPRUN_COMMON_CLOCK_H_
#define DDPRUN_COMMON_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace ddprun {

using Duration = std::chrono::nanoseconds;
using TimePoint = std::chrono::steady_clock::time_point;

// Monotonic time source. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

// The process-wide steady clock.
class SystemClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  // A shared instance; stateless, so sharing it is not global mutable state.
  static const Clock* Get();
};

// A clock that moves only when told to. Not thread-safe; for single-threaded tests.
class FakeClock final : public Clock {
 public:
  TimePoint Now() const override { return now_; }
  void Advance(Duration d) { now_ += d; }

 private:
  TimePoint now_{std::chrono::seconds(1000)};
};

inline int64_t ToMillis(Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// Wall-clock time in milliseconds since the Unix epoch, for timestamps people and tools read.
inline int64_t UnixMillisNow() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace ddprun

#endif  // DDPRUN_COMMON_CLOCK_H_
