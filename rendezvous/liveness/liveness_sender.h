// LivenessSender: an agent's end of the liveness path (issue 40, docs/design.md §3a). A thread
// of its own sends a heartbeat datagram to the server every `interval` and reads the server's
// acks; each authentic ack (packet.h) is a sign of life of the server, told to `on_ack` (the
// hook the fence's local lease renews from: ISSUE40 contract 4) and fed to a PhiAccrualDetector
// of the server. When that detector suspects the server, `on_silent` is told once; the
// rendezvous client fences on it (ConnectionStateMachine::OnServerSilent), in the same few
// hundred ms in which the server, by its own detector, gives this node up.
//
// The thread takes no lock the agent's loop holds: its settings are fixed at Start, it keeps
// its own state, and it talks to the rest only through the two callbacks. It asks for
// SCHED_FIFO priority 1 (granted with CAP_SYS_NICE, else it keeps its priority): a heartbeat
// thread starved by busy cores is silent to the server like a dead host.
//
// Threading: Start/destruction from one thread; the callbacks run on the sender's thread and
// must not block (on_silent may post to a loop). Destruction stops and joins the thread (within
// one interval).
#ifndef DDPRUN_RENDEZVOUS_LIVENESS_LIVENESS_SENDER_H_
#define DDPRUN_RENDEZVOUS_LIVENESS_LIVENESS_SENDER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "rendezvous/detector/phi_accrual.h"
#include "rendezvous/liveness/packet.h"
#include "rendezvous/liveness/udp_socket.h"

namespace ddprun::rendezvous {

// The heartbeat interval while the server's lease decides this node's loss (its acks offer
// kByLease: liveness=auto with no spare ready): the heartbeats then only carry the verdict's
// handshake, so they go at 4 a second instead of 50 (the server's cost for a large run with no
// spare), and an offer of kBySilence reaches the agent within this. Never faster than the
// run's interval.
inline constexpr Duration kLeaseVerdictInterval = std::chrono::milliseconds(250);

struct SenderOptions {
  std::string host;  // the server's address (its gRPC endpoint's host)
  int port = 0;      // Joined.liveness_port
  uint32_t node_index = 0;
  LivenessKey key{};
  Duration interval = kDefaultHeartbeatInterval;
  AccrualOptions detector;  // of the server's acks: the run's settings, as the server's
  // Optional: an authentic ack, with the time the heartbeat it answers (its echo) was sent: the
  // server had this node as a member when it read that heartbeat, so no earlier; and the
  // verdict the server offers (the local lease follows it before the heartbeats say so). Acks
  // of heartbeats older than the last kSentKept are not reported (nor is their verdict taken).
  std::function<void(TimePoint, SilenceVerdict)> on_ack;
  // Optional: no ack for that long (suspected), while the server offers kBySilence.
  std::function<void(Duration)> on_silent;
};

class LivenessSender {
 public:
  static constexpr size_t kSentKept = 64;  // send times remembered for on_ack
  struct Counters {
    uint64_t sent = 0;
    uint64_t acks = 0;     // authentic, new
    uint64_t refused = 0;  // anything else received
  };

  static absl::StatusOr<std::unique_ptr<LivenessSender>> Start(SenderOptions options);
  ~LivenessSender();
  LivenessSender(const LivenessSender&) = delete;
  LivenessSender& operator=(const LivenessSender&) = delete;

  Counters counters() const;

 private:
  LivenessSender(SenderOptions options, UdpSocket socket);
  void Run();
  void Receive(TimePoint now);

  const SenderOptions options_;
  UdpSocket socket_;
  const uint64_t incarnation_;
  std::atomic<bool> stop_{false};
  // Written by the thread only; read by counters().
  std::atomic<uint64_t> sent_{0}, acks_{0}, refused_{0};
  // The send interval for verdict_: the run's under kBySilence, kLeaseVerdictInterval else.
  Duration Interval() const;

  // The thread's own.
  uint64_t seq_ = 0;
  TimePoint next_send_{};
  uint64_t last_ack_seq_ = 0;                          // echoed in the next heartbeat
  SilenceVerdict verdict_ = SilenceVerdict::kByLease;  // of the last ack on_ack took
  struct Sent {
    uint64_t seq = 0;
    TimePoint at{};
  };
  std::array<Sent, kSentKept> sent_at_{};  // by seq % kSentKept
  PacketMac mac_;                          // under options_.key
  ReplayGuard guard_;
  PhiAccrualDetector detector_;
  bool reported_ = false;
  std::thread thread_;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_LIVENESS_LIVENESS_SENDER_H_
