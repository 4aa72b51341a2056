#include "trainer/io/stop_signal.h"

#include <pthread.h>
#include <signal.h>

namespace ddprun::trainer {
namespace {

sigset_t StopSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  return set;
}

}  // namespace

StopSignal::StopSignal() {
  sigset_t set = StopSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  watcher_ = std::thread([this] { Run(); });
}

StopSignal::~StopSignal() {
  stopping_.store(true, std::memory_order_release);
  // Wake the watcher with one of its own signals; it sees stopping_ and returns.
  pthread_kill(watcher_.native_handle(), SIGUSR1);
  watcher_.join();
}

void StopSignal::Run() {
  const sigset_t set = StopSet();
  while (true) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (stopping_.load(std::memory_order_acquire)) return;
    int expected = 0;
    // Only the first signal counts: the train loop finishes its step, saves and exits with
    // 128 + that signal. A launcher that loses patience follows up with SIGKILL.
    received_.compare_exchange_strong(expected, sig, std::memory_order_acq_rel);
  }
}

}  // namespace ddprun::trainer
