// Turns SIGTERM / SIGINT / SIGUSR1 into a "stop after this step" request that the train loop
// polls. No logic runs in a signal handler: the signals are blocked in every thread and one
// watcher thread takes them with sigwait().
//
// Construct it first thing in main(), before LibTorch or gloo start threads, so every later
// thread inherits the blocked mask.
#ifndef DDPRUN_TRAINER_IO_STOP_SIGNAL_H_
#define DDPRUN_TRAINER_IO_STOP_SIGNAL_H_

#include <atomic>
#include <thread>

namespace ddprun::trainer {

class StopSignal {
 public:
  StopSignal();
  ~StopSignal();  // stops and joins the watcher
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // The first signal received, 0 when none. Thread-safe.
  int received() const { return received_.load(std::memory_order_acquire); }

 private:
  void Run();

  std::atomic<int> received_{0};
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
};

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_STOP_SIGNAL_H_
