// Turns SIGTERM / SIGINT / SIGUSR1 into a "stop after this step" request that the train loop
// polls. No logic runs in a signal handler: the signals are blocked in every thread and one
// watcher thread takes them with sigwait().
//
// A step that cannot end: when a stop signal arrives while a step runs (StepBegan without
// StepEnded) and the step has not ended after a grace, the watcher ends the process with
// 128 + the signal at once. Such a step is blocked in a collective with a rank that is gone (a
// peer's host died or froze, so the launcher stops this rank for the next round): the step can
// never end, so there is nothing a graceful stop could save (the state is mid-step; the last
// checkpoint stays valid), and waiting would only hold the launcher until its --stop-timeout
// and SIGKILL. The grace, max(kMinStuckGrace, kStepsOfGrace x the longest step ended so far),
// lets a live world's slow collective finish and the step end normally. Outside a step
// (checkpointing, evaluating, between steps) the signal is only a request, as before.
//
// Construct it first thing in main(), before LibTorch or gloo start threads, so every later
// thread inherits the blocked mask.
#ifndef DDPRUN_TRAINER_IO_STOP_SIGNAL_H_
#define DDPRUN_TRAINER_IO_STOP_SIGNAL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace ddprun::trainer {

inline constexpr std::chrono::milliseconds kMinStuckGrace{1000};
inline constexpr int kStepsOfGrace = 4;

class StopSignal {
 public:
  StopSignal();
  ~StopSignal();  // stops and joins the watcher
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // The first signal received, 0 when none. Thread-safe.
  int received() const { return received_.load(std::memory_order_acquire); }

  // The train loop's marks around each step (thread-safe; called by one thread).
  void StepBegan();
  void StepEnded();
  // What the watcher would wait now for a running step to end after a signal.
  std::chrono::nanoseconds StuckGrace() const;

 private:
  void Run();
  // After `sig`: waits while a step runs, ending the process if one outlives the grace.
  void WatchTheStep(int sig);

  std::atomic<int> received_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> step_began_ns_{0};  // steady clock; 0: no step running
  std::atomic<int64_t> longest_step_ns_{0};
  std::thread watcher_;
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_STOP_SIGNAL_H_
