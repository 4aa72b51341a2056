// A user-space stand-in for `tc qdisc ... netem loss P% delay D J` on kernels built without
// sch_netem (CONFIG_NET_SCH_NETEM unset, no modules): two packet sockets copy Ethernet frames
// between two interfaces of one network namespace, and each direction drops and delays frames
// as netem does without a distribution table: every frame lost independently with probability
// P, every kept frame held for a delay drawn uniformly in [D - J, D + J] (so frames reorder,
// as with netem). Frames travel with their virtio-net header (PACKET_VNET_HDR), so GSO
// super-frames and checksums left to offload cross unchanged.
//
// The relay's threads run SCHED_FIFO when the process may (root): a netem qdisc runs in the
// kernel and is not starved by busy user space; neither should its stand-in be.
//
// Thread-safe; the destructor stops every thread and closes the sockets.
#ifndef DDPRUN_TESTS_TESTING_FRAME_RELAY_H_
#define DDPRUN_TESTS_TESTING_FRAME_RELAY_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddprun::testing {

// What netem's `loss P% delay D [J]` asks of one direction of a link.
struct LinkImpairment {
  double loss = 0;  // probability in [0, 1]
  std::chrono::microseconds delay{0};
  std::chrono::microseconds jitter{0};  // uniform, +- around delay
  bool none() const { return loss == 0 && delay.count() == 0 && jitter.count() == 0; }
};

// Parses the netem arguments the soak uses: "loss P%" and "delay D [J]" (units us, ms, s), in
// any order. Anything else (a distribution, correlation, rate...) is InvalidArgument naming it.
absl::StatusOr<LinkImpairment> ParseNetemArgs(const std::string& args);

class FrameRelay {
 public:
  struct Counts {
    uint64_t passed = 0;
    uint64_t dropped = 0;
  };

  // Relays between interfaces `a` and `b` of the namespace at `netns_path` (/run/netns/NAME):
  // frames arriving on `a` leave on `b` impaired by `a_to_b`, and the other way round.
  static absl::StatusOr<std::unique_ptr<FrameRelay>> Start(const std::string& netns_path,
                                                           const std::string& a,
                                                           const std::string& b,
                                                           LinkImpairment a_to_b,
                                                           LinkImpairment b_to_a, uint64_t seed);
  ~FrameRelay();
  FrameRelay(const FrameRelay&) = delete;
  FrameRelay& operator=(const FrameRelay&) = delete;

  Counts a_to_b() const;
  Counts b_to_a() const;

  // One UDP flow among the frames relayed from b to a (IPv4 only): the longest time between two
  // of its frames leaving the relay, i.e. the longest silence its receiver on a's side met.
  struct UdpFlow {
    std::string from, to;  // "10.213.0.2:40000"
    uint64_t frames = 0;
    std::chrono::microseconds longest_gap{0};
  };
  std::vector<UdpFlow> UdpFlowsToA() const;
  // False when the threads could not be made SCHED_FIFO (then busy cores delay frames more).
  // Known once the threads have started (they set it themselves).
  bool realtime() const { return realtime_threads_.load() == 4; }

 private:
  class Direction;
  FrameRelay() = default;

  int fds_[2] = {-1, -1};  // the packet sockets on a and b; owned
  std::unique_ptr<Direction> forward_, backward_;
  std::atomic<int> realtime_threads_{0};
};

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_FRAME_RELAY_H_
