#include "rendezvous/liveness/thread_priority.h"

#include <pthread.h>
#include <sched.h>

namespace ddprun::rendezvous {

bool RaiseToRealtimePriority() {
  sched_param fifo{};
  fifo.sched_priority = 1;
  return pthread_setschedparam(pthread_self(), SCHED_FIFO, &fifo) == 0;
}

}  // namespace ddprun::rendezvous
