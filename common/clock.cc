#include "common/clock.h"

namespace ddprun {

const Clock* SystemClock::Get() {
  static const SystemClock* const kClock = new SystemClock();
  return kClock;
}

}  // namespace ddprun
