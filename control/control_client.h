// The worker's side of the control channel (control_message.h), for C++ workers (ddp-train):
// connects to the agent's socket, says hello, and reads the agent's messages on a thread of its
// own, so that a worker blocked in a collective still learns that its round is over.
//
// Thread-safe: any thread may wait for a round, ask whether the current one is over or send
// ready.
#ifndef DDPRUN_CONTROL_CONTROL_CLIENT_H_
#define DDPRUN_CONTROL_CONTROL_CLIENT_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "control/control_message.h"

namespace ddprun::control {

class ControlClient {
 public:
  // Connects to the agent at `socket_path` (DDPRUN_CONTROL_SOCKET), says hello as `local_rank`,
  // and waits up to `timeout` for the agent's first round message (this worker's round).
  // kUnavailable when the agent cannot be reached or does not answer in time.
  static absl::StatusOr<std::unique_ptr<ControlClient>> Connect(const std::string& socket_path,
                                                                int local_rank,
                                                                absl::Duration timeout);
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // The newest round the agent sent.
  RoundMessage current_round() const ABSL_LOCKS_EXCLUDED(mu_);
  // True once round `round` is over: the agent aborted it, sent a newer round, or is gone.
  bool RoundOver(int64_t round) const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until a round newer than `after` arrives. kDeadlineExceeded after `timeout`;
  // kUnavailable when the agent closed the channel (it is gone, or dropped a garbled line).
  absl::StatusOr<RoundMessage> WaitForRound(int64_t after, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until RoundOver(round) or `timeout`; returns RoundOver(round). For waits that poll
  // something else too (a collective's completion).
  bool WaitRoundOver(int64_t round, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Called (on the reader thread) whenever a message arrives or the channel closes: a waiter
  // on another condition can wake and check RoundOver. Set before anything may arrive that
  // matters (replacing it is not synchronised with a call in progress).
  void SetWakeup(std::function<void()> wakeup) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status SendReady(int64_t round, int64_t step) ABSL_LOCKS_EXCLUDED(write_mu_);

  // Why the last abort was sent ("" when none).
  std::string abort_reason() const ABSL_LOCKS_EXCLUDED(mu_);
  // The latest checkpoint advice the agent sent (seconds of training between checkpoints).
  std::optional<double> checkpoint_advice() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit ControlClient(int fd);
  void ReadLoop() ABSL_LOCKS_EXCLUDED(mu_);

  const int fd_;
  std::thread reader_;
  // State below is written by the reader thread and read by any thread.
  mutable absl::Mutex mu_;
  std::optional<RoundMessage> round_ ABSL_GUARDED_BY(mu_);
  int64_t aborted_round_ ABSL_GUARDED_BY(mu_) = -1;  // highest round an abort named
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  std::optional<double> checkpoint_advice_s_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::string close_reason_ ABSL_GUARDED_BY(mu_);
  std::function<void()> wakeup_ ABSL_GUARDED_BY(mu_);
  absl::Mutex write_mu_;  // one line at a time on fd_ (SendReady from any thread)
};

}  // namespace ddprun::control

#endif  // DDPRUN_CONTROL_CONTROL_CLIENT_H_
