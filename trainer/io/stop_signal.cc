#include "trainer/io/stop_signal.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

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

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr std::chrono::milliseconds kWatchEvery{20};

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

void StopSignal::StepBegan() { step_began_ns_.store(NowNs(), std::memory_order_release); }

void StopSignal::StepEnded() {
  const int64_t began = step_began_ns_.exchange(0, std::memory_order_acq_rel);
  if (began == 0) return;
  const int64_t took = NowNs() - began;
  if (took > longest_step_ns_.load(std::memory_order_relaxed)) {
    longest_step_ns_.store(took, std::memory_order_relaxed);
  }
}

std::chrono::nanoseconds StopSignal::StuckGrace() const {
  return std::max<std::chrono::nanoseconds>(
      kMinStuckGrace,
      std::chrono::nanoseconds(kStepsOfGrace * longest_step_ns_.load(std::memory_order_relaxed)));
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
    if (received_.compare_exchange_strong(expected, sig, std::memory_order_acq_rel)) {
      WatchTheStep(sig);
    }
  }
}

void StopSignal::WatchTheStep(int sig) {
  // Polled: the step's end is not a thing to wait on, and 20 ms is nothing next to the grace.
  while (!stopping_.load(std::memory_order_acquire)) {
    const int64_t began = step_began_ns_.load(std::memory_order_acquire);
    if (began == 0) return;  // no step running: the loop sees the request at its next check
    const auto ran = std::chrono::nanoseconds(NowNs() - began);
    if (ran > StuckGrace()) {
      std::fprintf(stderr,
                   "ddp-train: signal %d arrived in a step that has not ended after %.1f s (a "
                   "collective with a rank that is gone): stopping now, without a checkpoint "
                   "(the last one stays valid)\n",
                   sig, std::chrono::duration<double>(ran).count());
      std::fflush(stderr);
      _exit(128 + sig);
    }
    std::this_thread::sleep_for(kWatchEvery);
  }
}

}  // namespace ddprun::trainer
