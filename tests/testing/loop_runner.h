// An EventLoop (common/event_loop.h) on a thread of its own, for tests of classes that live on
// the agent's loop while the test thread plays their peers over real sockets: the test hands
// every call on those classes to the loop with Call() and gets its result back. Header-only;
// the test links ddprun_common through the library under test.
//
// Thread-safe: Call() from any thread but the loop's. Stop() before destroying anything the
// loop's callbacks use (Stop is idempotent and also runs in the destructor).
#ifndef DDPRUN_TESTS_TESTING_LOOP_RUNNER_H_
#define DDPRUN_TESTS_TESTING_LOOP_RUNNER_H_

#include <future>
#include <memory>
#include <thread>
#include <type_traits>

#include "common/event_loop.h"

namespace ddprun::testing {

class LoopRunner {
 public:
  LoopRunner() : thread_([this] { loop_.Run(); }) {}
  ~LoopRunner() { Stop(); }
  LoopRunner(const LoopRunner&) = delete;
  LoopRunner& operator=(const LoopRunner&) = delete;

  EventLoop* loop() { return &loop_; }

  // Runs `fn` on the loop thread and returns what it returned. Must not be called after Stop().
  template <typename Fn>
  std::invoke_result_t<Fn> Call(Fn fn) {
    auto task = std::make_shared<std::packaged_task<std::invoke_result_t<Fn>()>>(std::move(fn));
    auto result = task->get_future();
    loop_.Post([task] { (*task)(); });
    return result.get();
  }

  // Ends the loop and joins its thread; callbacks never run after it returns.
  void Stop() {
    loop_.Stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  EventLoop loop_;
  std::thread thread_;
};

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_LOOP_RUNNER_H_
