#include "tests/testing/frame_relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <queue>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ddprun::testing {
namespace {

using Clock = std::chrono::steady_clock;

// The header PACKET_VNET_HDR puts before each frame: struct virtio_net_hdr of
// <linux/virtio_net.h> (that header does not compile as C++: a member is named `class`).
struct VnetHeader {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len, gso_size, csum_start, csum_offset;
};
static_assert(sizeof(VnetHeader) == 10, "virtio_net_hdr is 10 bytes");
constexpr uint8_t kVnetDataValid = 2;  // VIRTIO_NET_HDR_F_DATA_VALID

// "50ms", "1s", "500us" (netem's units); a bare number is microseconds, as tc reads it.
bool ParseTime(absl::string_view text, std::chrono::microseconds* out) {
  double scale = 1;
  if (absl::ConsumeSuffix(&text, "us")) {
    scale = 1;
  } else if (absl::ConsumeSuffix(&text, "ms")) {
    scale = 1e3;
  } else if (absl::ConsumeSuffix(&text, "s")) {
    scale = 1e6;
  }
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || value < 0) return false;
  *out = std::chrono::microseconds(static_cast<int64_t>(value * scale));
  return true;
}

// A thread of the relay made SCHED_FIFO (as a qdisc, it must not wait behind user space).
bool MakeRealtime() {
  sched_param p{};
  p.sched_priority = 10;
  return pthread_setschedparam(pthread_self(), SCHED_FIFO, &p) == 0;
}

// A packet socket on `ifname` inside the namespace at `netns_path`: made on a thread of its
// own that enters the namespace (the socket keeps it; the process's threads stay where they
// are).
absl::StatusOr<int> PacketSocketIn(const std::string& netns_path, const std::string& ifname) {
  absl::StatusOr<int> result = absl::InternalError("not made");
  std::thread([&] {
    const int ns = open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) {
      result =
          absl::UnavailableError(absl::StrCat("cannot enter ", netns_path, ": ", strerror(errno)));
      if (ns >= 0) close(ns);
      return;
    }
    close(ns);
    const unsigned index = if_nametoindex(ifname.c_str());
    const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (index == 0 || fd < 0) {
      result = absl::UnavailableError(
          absl::StrCat("no packet socket on ", ifname, " in ", netns_path, ": ", strerror(errno)));
      if (fd >= 0) close(fd);
      return;
    }
    const int one = 1;
    // Larger than the default: a socket that overflows loses frames nobody asked to lose.
    const int buffer = 8 << 20;
    sockaddr_ll addr{};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = htons(ETH_P_ALL);
    addr.sll_ifindex = static_cast<int>(index);
    packet_mreq promisc{};
    promisc.mr_ifindex = static_cast<int>(index);
    promisc.mr_type = PACKET_MR_PROMISC;
    if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) != 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) != 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &promisc, sizeof(promisc)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof(buffer)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buffer, sizeof(buffer)) != 0 ||
        bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      result = absl::UnavailableError(
          absl::StrCat("cannot set up the packet socket on ", ifname, ": ", strerror(errno)));
      close(fd);
      return;
    }
    result = fd;
  }).join();
  return result;
}

}  // namespace

absl::StatusOr<LinkImpairment> ParseNetemArgs(const std::string& args) {
  LinkImpairment out;
  const std::vector<std::string> words = absl::StrSplit(args, ' ', absl::SkipWhitespace());
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == "loss" && i + 1 < words.size()) {
      absl::string_view p = words[++i];
      double percent = 0;
      if (!absl::ConsumeSuffix(&p, "%") || !absl::SimpleAtod(p, &percent) || percent < 0 ||
          percent > 100) {
        return absl::InvalidArgumentError(
            absl::StrCat("netem arguments '", args, "': loss wants a percentage, not ", p));
      }
      out.loss = percent / 100;
    } else if (words[i] == "delay" && i + 1 < words.size()) {
      if (!ParseTime(words[++i], &out.delay)) {
        return absl::InvalidArgumentError(
            absl::StrCat("netem arguments '", args, "': bad delay ", words[i]));
      }
      if (i + 1 < words.size() && ParseTime(words[i + 1], &out.jitter)) ++i;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("netem arguments '", args,
                       "': only 'loss P%' and 'delay D [J]' are understood, not '", words[i], "'"));
    }
  }
  if (out.jitter > out.delay) {
    return absl::InvalidArgumentError(
        absl::StrCat("netem arguments '", args, "': jitter larger than the delay"));
  }
  return out;
}

// One direction: a reader that drops or schedules each frame, a sender that lets it go when
// its time comes.
class FrameRelay::Direction {
 public:
  Direction(int from, int to, LinkImpairment impairment, uint64_t seed, bool track_udp)
      : from_(from), to_(to), impairment_(impairment), rng_(seed), track_udp_(track_udp) {}
  ~Direction() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      cv_.Signal();
    }
    if (reader_.joinable()) reader_.join();
    if (sender_.joinable()) sender_.join();
  }

  void Start(std::atomic<int>* realtime_threads) {
    reader_ = std::thread([this, realtime_threads] {
      if (MakeRealtime()) ++*realtime_threads;
      ReadLoop();
    });
    sender_ = std::thread([this, realtime_threads] {
      if (MakeRealtime()) ++*realtime_threads;
      SendLoop();
    });
  }

  Counts counts() const { return {passed_.load(), dropped_.load()}; }

  std::vector<UdpFlow> flows() const {
    absl::MutexLock lock(&flows_mu_);
    std::vector<UdpFlow> out;
    for (const auto& [key, f] : flows_) out.push_back(f.flow);
    return out;
  }

 private:
  struct Held {
    Clock::time_point due;
    uint64_t seq = 0;  // keeps frames of the same due time in arrival order
    std::string frame;
    bool operator>(const Held& other) const {
      return due != other.due ? due > other.due : seq > other.seq;
    }
  };

  bool Stopping() {
    absl::MutexLock lock(&mu_);
    return stop_;
  }

  void ReadLoop() {
    // A virtio-net header, then the frame (a GSO super-frame may be near 64 KiB).
    std::string buffer(sizeof(VnetHeader) + 70000, '\0');
    std::uniform_real_distribution<double> unit(0, 1);
    uint64_t seq = 0;
    while (!Stopping()) {
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = recv(from_, buffer.data(), buffer.size(), MSG_DONTWAIT);
      if (n <= static_cast<ssize_t>(sizeof(VnetHeader))) continue;
      // "Checksum verified" describes the receive side only; the sent frame is checked again.
      reinterpret_cast<VnetHeader*>(buffer.data())->flags &= static_cast<uint8_t>(~kVnetDataValid);
      if (impairment_.loss > 0 && unit(rng_) < impairment_.loss) {
        ++dropped_;
        continue;
      }
      if (impairment_.delay.count() == 0) {
        Send(buffer.data(), static_cast<size_t>(n));
        continue;
      }
      const double spread = (2 * unit(rng_) - 1) * static_cast<double>(impairment_.jitter.count());
      const auto delay = std::chrono::microseconds(
          static_cast<int64_t>(static_cast<double>(impairment_.delay.count()) + spread));
      absl::MutexLock lock(&mu_);
      queue_.push(Held{Clock::now() + delay, seq++, buffer.substr(0, static_cast<size_t>(n))});
      cv_.Signal();
    }
  }

  void SendLoop() {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      if (queue_.empty()) {
        cv_.Wait(&mu_);
        continue;
      }
      const auto wait = queue_.top().due - Clock::now();
      if (wait > Clock::duration::zero()) {
        cv_.WaitWithTimeout(&mu_, absl::FromChrono(wait));
        continue;
      }
      Held held = queue_.top();
      queue_.pop();
      mu_.Unlock();
      Send(held.frame.data(), held.frame.size());
      mu_.Lock();
    }
  }

  void Send(const char* data, size_t size) {
    // A cut link (the interface down) refuses frames: they are lost, as on a cable.
    if (send(to_, data, size, MSG_DONTWAIT) != static_cast<ssize_t>(size)) return;
    ++passed_;
    if (track_udp_)
      Track(reinterpret_cast<const uint8_t*>(data) + sizeof(VnetHeader), size - sizeof(VnetHeader));
  }

  // An IPv4 UDP frame: its flow's frame count and longest gap.
  void Track(const uint8_t* f, size_t n) {
    constexpr size_t kEth = 14;
    if (n < kEth + 20 || f[12] != 0x08 || f[13] != 0x00) return;
    const uint8_t* ip = f + kEth;
    const size_t ihl = static_cast<size_t>(ip[0] & 0x0f) * 4;
    if (ip[9] != 17 || n < kEth + ihl + 8) return;
    const uint8_t* udp = ip + ihl;
    auto addr = [](const uint8_t* a, const uint8_t* port) {
      return absl::StrCat(a[0], ".", a[1], ".", a[2], ".", a[3], ":", (port[0] << 8) | port[1]);
    };
    const std::string from = addr(ip + 12, udp), to = addr(ip + 16, udp + 2);
    const Clock::time_point now = Clock::now();
    absl::MutexLock lock(&flows_mu_);
    Flow& flow = flows_[from + ">" + to];
    if (flow.flow.frames++ == 0) {
      flow.flow.from = from;
      flow.flow.to = to;
    } else {
      flow.flow.longest_gap =
          std::max(flow.flow.longest_gap,
                   std::chrono::duration_cast<std::chrono::microseconds>(now - flow.last));
    }
    flow.last = now;
  }

  const int from_, to_;
  const LinkImpairment impairment_;
  std::mt19937_64 rng_;  // the reader's only
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::priority_queue<Held, std::vector<Held>, std::greater<Held>> queue_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> passed_{0}, dropped_{0};
  const bool track_udp_;
  struct Flow {
    UdpFlow flow;
    Clock::time_point last;
  };
  mutable absl::Mutex flows_mu_;
  std::map<std::string, Flow> flows_ ABSL_GUARDED_BY(flows_mu_);
  std::thread reader_, sender_;
};

absl::StatusOr<std::unique_ptr<FrameRelay>> FrameRelay::Start(
    const std::string& netns_path, const std::string& a, const std::string& b,
    LinkImpairment a_to_b, LinkImpairment b_to_a, uint64_t seed) {
  absl::StatusOr<int> fa = PacketSocketIn(netns_path, a);
  if (!fa.ok()) return fa.status();
  absl::StatusOr<int> fb = PacketSocketIn(netns_path, b);
  if (!fb.ok()) {
    close(*fa);
    return fb.status();
  }
  std::unique_ptr<FrameRelay> relay(new FrameRelay());
  relay->fds_[0] = *fa;
  relay->fds_[1] = *fb;
  relay->forward_ = std::make_unique<Direction>(*fa, *fb, a_to_b, seed, /*track_udp=*/false);
  relay->backward_ = std::make_unique<Direction>(*fb, *fa, b_to_a, seed ^ 0x9e3779b97f4a7c15ULL,
                                                 /*track_udp=*/true);
  relay->forward_->Start(&relay->realtime_threads_);
  relay->backward_->Start(&relay->realtime_threads_);
  return relay;
}

FrameRelay::~FrameRelay() {
  forward_.reset();
  backward_.reset();
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

FrameRelay::Counts FrameRelay::a_to_b() const { return forward_->counts(); }
FrameRelay::Counts FrameRelay::b_to_a() const { return backward_->counts(); }
std::vector<FrameRelay::UdpFlow> FrameRelay::UdpFlowsToA() const { return backward_->flows(); }

}  // namespace ddprun::testing
