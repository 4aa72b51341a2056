// ProbeListener: the target's end of the preflight's pair probes (probe_wire.h). Every agent of
// a run with a preflight opens one before it joins, on every address at a port of the kernel's
// choosing, and says the port in its join; its peers probe it at the address its workers use.
// It answers whoever connects with the probe protocol and nothing else: no data of the run
// crosses it. At most kMaxConcurrent probes are answered at once (a ring sends it one); more are
// closed at once.
//
// Thread-safety: its own accept thread and one detached thread per probe answered, which touches
// nothing of the listener but the shared count (so the listener may go while one still answers:
// the probe's deadline ends it); the public methods are for the owning thread.
#ifndef DDPRUN_LAUNCHER_PREFLIGHT_PROBE_LISTENER_H_
#define DDPRUN_LAUNCHER_PREFLIGHT_PROBE_LISTENER_H_

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ddprun::launcher {

class ProbeListener {
 public:
  static constexpr int kMaxConcurrent = 4;

  // Listens on every address (IPv6 and IPv4) at a free port.
  static absl::StatusOr<std::unique_ptr<ProbeListener>> Start();
  ~ProbeListener();  // stops accepting and waits for the probes being answered
  ProbeListener(const ProbeListener&) = delete;
  ProbeListener& operator=(const ProbeListener&) = delete;

  int port() const { return port_; }

 private:
  // The probes being answered, shared with their threads.
  struct Answering {
    absl::Mutex mu;
    int count ABSL_GUARDED_BY(mu) = 0;
  };

  ProbeListener(int fd, int port);
  void AcceptLoop();

  const int fd_;
  const int port_;
  std::atomic<bool> stopping_{false};
  const std::shared_ptr<Answering> answering_;
  std::thread accept_thread_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_PREFLIGHT_PROBE_LISTENER_H_
