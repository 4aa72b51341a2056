// Where callbacks run. The agent and the rendezvous server each own one event loop; other
// threads (gRPC reactors, timers) hand work to it through Post() instead of touching its state.
#ifndef DDPRUN_COMMON_EXECUTOR_H_
#define DDPRUN_COMMON_EXECUTOR_H_

#include <functional>

namespace ddprun {

class Executor {
 public:
  virtual ~Executor() = default;
  // Thread-safe. Runs `fn` later on the executor's own thread, in posting order.
  virtual void Post(std::function<void()> fn) = 0;
};

}  // namespace ddprun

#endif  // DDPRUN_COMMON_EXECUTOR_H_
