// LivenessReceiver: the server's end of the liveness path (issue 40, docs/design.md §3a). One
// UDP socket bound on the server's address and one thread of its own that receives the agents'
// heartbeat datagrams in batches (recvmmsg), checks each (packet.h: MAC under the node's key,
// no replay), feeds the node's PhiAccrualDetector, answers each with an ack (sendmmsg), and
// every kEvaluateEvery asks every watched node's detector whether it suspects the node.
//
// It decides nothing about the run: a suspicion is reported to `on_silent` (once per silence:
// a node heard again reports `on_heard` and may be suspected again later), and the server's
// loop decides (LossConfirmation, RunState::Silent). A node never heard from is not suspected
// (the lease and the join timeout cover it): a path that UDP cannot take falls back to them.
//
// Nor is a node judged before it follows: each ack carries the verdict the server offers for
// the node (Offer), and only once the node's heartbeats say its local lease follows kBySilence,
// echoing an ack of the current offer, may its silence be reported. Until then its workers may
// hold the stream's longer lease, and losing the node on a short silence would reuse its ranks
// while they still commit (docs/design.md §3a, "Who decides").
//
// Threading: Watch/Unwatch from any thread; the callbacks run on the receiver's thread, outside
// its lock, and must not block (post to a loop). Destruction stops and joins the thread.
#ifndef DDPRUN_RENDEZVOUS_LIVENESS_LIVENESS_RECEIVER_H_
#define DDPRUN_RENDEZVOUS_LIVENESS_LIVENESS_RECEIVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "rendezvous/detector/phi_accrual.h"
#include "rendezvous/liveness/packet.h"
#include "rendezvous/liveness/udp_socket.h"

namespace ddprun::rendezvous {

// How often the receiver judges every watched node: bounds the detection delay it adds.
inline constexpr std::chrono::milliseconds kEvaluateEvery{10};

class LivenessReceiver {
 public:
  struct Callbacks {
    // `token` (what Watch was given) is suspected: no heartbeat for `silent_for`; with it, how
    // many of the `watched` nodes judged by silence are suspected at this evaluation (when most
    // are, the fault is more likely the server's own path than theirs).
    std::function<void(uint64_t token, Duration silent_for, size_t suspected, size_t watched)>
        on_silent;
    // `token`, reported silent, was heard again.
    std::function<void(uint64_t token)> on_heard;
  };
  struct Counters {
    uint64_t heartbeats = 0;  // authentic, new
    uint64_t refused = 0;     // unknown node, bad MAC, replayed, malformed
    uint64_t acks = 0;
  };

  // Binds `host` (the gRPC server's address), port 0, and starts the thread.
  static absl::StatusOr<std::unique_ptr<LivenessReceiver>> Start(const std::string& host,
                                                                 Callbacks callbacks);
  ~LivenessReceiver();
  LivenessReceiver(const LivenessReceiver&) = delete;
  LivenessReceiver& operator=(const LivenessReceiver&) = delete;

  int port() const { return port_; }
  // Random per receiver: bound into every node's key (DeriveLivenessKey), so a packet of an
  // earlier server process is no packet here.
  const std::string& salt() const { return salt_; }

  // Starts hearing node `node_index`, reported as `token`, offering it `offered`; a second Watch
  // of the index replaces the first.
  void Watch(uint32_t node_index, uint64_t token, const LivenessKey& key,
             const AccrualOptions& options, SilenceVerdict offered);
  // The verdict the acks of `node_index` offer from now on (nothing if unwatched or unchanged).
  // A new kBySilence offer is followed only by heartbeats that echo one of its acks.
  void Offer(uint32_t node_index, SilenceVerdict offered);
  void Unwatch(uint32_t node_index);
  Counters counters() const;
  size_t watched() const;

 private:
  struct Node {
    Node(uint64_t t, const LivenessKey& k, const AccrualOptions& o)
        : token(t), mac(k), options(o), detector(o) {}
    uint64_t token;
    PacketMac mac;
    AccrualOptions options;
    PhiAccrualDetector detector;
    ReplayGuard guard;
    uint64_t ack_seq = 0;
    SilenceVerdict offered = SilenceVerdict::kByLease;
    uint64_t offered_from_seq = 1;  // the first ack of the current offer
    bool followed = false;          // a heartbeat said it follows the current kBySilence offer
    bool reported = false;          // on_silent was called for this silence
    bool judged() const { return offered == SilenceVerdict::kBySilence && followed; }
  };
  LivenessReceiver(UdpSocket socket, Callbacks callbacks);
  void Run();
  // The ack for one datagram, or false when it is refused.
  bool Handle(const uint8_t* data, size_t size, TimePoint now, PacketBytes* ack)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Evaluate(TimePoint now);

  UdpSocket socket_;
  const int port_;
  const std::string salt_;
  const uint64_t incarnation_;  // of the acks
  const Callbacks callbacks_;
  std::atomic<bool> stop_{false};

  mutable absl::Mutex mu_;
  std::unordered_map<uint32_t, Node> nodes_ ABSL_GUARDED_BY(mu_);
  Counters counters_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_LIVENESS_LIVENESS_RECEIVER_H_
