#include "rendezvous/liveness/liveness_receiver.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "common/strings.h"
#include "rendezvous/liveness/thread_priority.h"

namespace ddprun::rendezvous {
namespace {

// Datagrams taken per recvmmsg: at 10,000 agents x 50/s a batch is ~1 ms of traffic, so one
// system call carries tens of packets instead of one.
constexpr int kBatch = 64;
constexpr std::chrono::microseconds kGatherFor{1000};
constexpr int kReceiveBufferBytes = 16 << 20;

uint64_t RandomU64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LivenessReceiver>> LivenessReceiver::Start(const std::string& host,
                                                                          Callbacks callbacks) {
  absl::StatusOr<UdpSocket> socket = BindUdp(host, 0);
  if (!socket.ok()) return socket.status();
  // Room for a stall: at 10,000 agents a 20 ms pause of this thread is thousands of datagrams,
  // and one dropped here is a heartbeat lost for the detector. Past rmem_max where allowed.
  const int bytes = kReceiveBufferBytes;
  if (setsockopt(socket->fd(), SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    setsockopt(socket->fd(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  }
  std::unique_ptr<LivenessReceiver> r(
      new LivenessReceiver(*std::move(socket), std::move(callbacks)));
  r->thread_ = std::thread([p = r.get()] { p->Run(); });
  return r;
}

LivenessReceiver::LivenessReceiver(UdpSocket socket, Callbacks callbacks)
    : socket_(std::move(socket)),
      port_(LocalPort(socket_)),
      salt_(RandomHex(16)),
      incarnation_(RandomU64()),
      callbacks_(std::move(callbacks)) {}

LivenessReceiver::~LivenessReceiver() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void LivenessReceiver::Watch(uint32_t node_index, uint64_t token, const LivenessKey& key,
                             const AccrualOptions& options, SilenceVerdict offered) {
  absl::MutexLock lock(&mu_);
  nodes_.erase(node_index);
  auto [it, added] = nodes_.emplace(std::piecewise_construct, std::forward_as_tuple(node_index),
                                    std::forward_as_tuple(token, key, options));
  it->second.offered = offered;
}

void LivenessReceiver::Offer(uint32_t node_index, SilenceVerdict offered) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node_index);
  if (it == nodes_.end() || it->second.offered == offered) return;
  Node& node = it->second;
  node.offered = offered;
  node.offered_from_seq = node.ack_seq + 1;
  node.followed = false;
}

void LivenessReceiver::Unwatch(uint32_t node_index) {
  absl::MutexLock lock(&mu_);
  nodes_.erase(node_index);
}

LivenessReceiver::Counters LivenessReceiver::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

size_t LivenessReceiver::watched() const {
  absl::MutexLock lock(&mu_);
  return nodes_.size();
}

void LivenessReceiver::Run() {
  // A receiver starved by busy cores acks nobody, and every agent's detector of the acks would
  // fence its node: it runs at real-time priority where it may (it sleeps in poll between
  // batches; its work is bounded by the packets that arrive).
  RaiseToRealtimePriority();
  // One buffer more than a packet: a longer datagram shows as too long instead of truncated.
  std::vector<std::array<uint8_t, kPacketBytes + 1>> in(kBatch);
  std::vector<sockaddr_storage> from(kBatch);
  std::vector<iovec> in_iov(kBatch);
  std::vector<mmsghdr> in_msgs(kBatch);
  std::vector<PacketBytes> out(kBatch);
  std::vector<iovec> out_iov(kBatch);
  std::vector<mmsghdr> out_msgs(kBatch);
  TimePoint next_evaluation = std::chrono::steady_clock::now();
  while (!stop_.load(std::memory_order_relaxed)) {
    const TimePoint now = std::chrono::steady_clock::now();
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(
        std::clamp<Duration>(next_evaluation - now, Duration::zero(), kEvaluateEvery));
    pollfd p{socket_.fd(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(wait.count())) > 0) {
      // Let a batch gather: at thousands of packets a second, waking per packet would cost
      // four system calls each; a millisecond's wait makes one recvmmsg take dozens, and is
      // nothing next to the 250 ms the detectors judge by.
      std::this_thread::sleep_for(kGatherFor);
    }
    for (;;) {
      for (int i = 0; i < kBatch; ++i) {
        in_iov[i] = {in[i].data(), in[i].size()};
        in_msgs[i] = {};
        in_msgs[i].msg_hdr.msg_iov = &in_iov[i];
        in_msgs[i].msg_hdr.msg_iovlen = 1;
        in_msgs[i].msg_hdr.msg_name = &from[i];
        in_msgs[i].msg_hdr.msg_namelen = sizeof(from[i]);
      }
      const int n = recvmmsg(socket_.fd(), in_msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
      if (n <= 0) break;
      const TimePoint arrived = std::chrono::steady_clock::now();
      int acks = 0;
      {
        absl::MutexLock lock(&mu_);
        for (int i = 0; i < n; ++i) {
          if (!Handle(in[i].data(), in_msgs[i].msg_len, arrived, &out[acks])) continue;
          out_iov[acks] = {out[acks].data(), out[acks].size()};
          out_msgs[acks] = {};
          out_msgs[acks].msg_hdr.msg_iov = &out_iov[acks];
          out_msgs[acks].msg_hdr.msg_iovlen = 1;
          out_msgs[acks].msg_hdr.msg_name = &from[i];
          out_msgs[acks].msg_hdr.msg_namelen = in_msgs[i].msg_hdr.msg_namelen;
          ++acks;
        }
        counters_.acks += acks;
      }
      // An ack that cannot be sent now (a full buffer) is just lost: the agent's detector
      // allows for lost packets, and a retry would only be later.
      if (acks > 0) sendmmsg(socket_.fd(), out_msgs.data(), acks, MSG_DONTWAIT);
      if (n < kBatch) break;
    }
    const TimePoint after = std::chrono::steady_clock::now();
    if (after >= next_evaluation) {
      Evaluate(after);
      next_evaluation = after + kEvaluateEvery;
    }
  }
}

bool LivenessReceiver::Handle(const uint8_t* data, size_t size, TimePoint now, PacketBytes* ack) {
  std::optional<uint32_t> index = PeekNodeIndex(data, size);
  auto it = index ? nodes_.find(*index) : nodes_.end();
  if (it == nodes_.end()) {
    ++counters_.refused;
    return false;
  }
  Node& node = it->second;
  absl::StatusOr<LivenessPacket> p = DecodePacket(data, size, node.mac, PacketKind::kHeartbeat);
  if (!p.ok() || !node.guard.Accept(p->incarnation, p->seq)) {
    ++counters_.refused;
    return false;
  }
  ++counters_.heartbeats;
  // Its lease follows the silence verdict, and it heard so from an ack of the current offer
  // (an echo of an older one may predate a withdrawal: its lease may be the stream's again).
  if (!node.followed && node.offered == SilenceVerdict::kBySilence &&
      p->verdict == SilenceVerdict::kBySilence && p->echo >= node.offered_from_seq) {
    node.followed = true;
    // Judged from now on, at the run's rate: a window that learnt the slower heartbeats of the
    // lease's verdict (LivenessSender's kLeaseVerdictInterval) would suspect it late.
    node.detector = PhiAccrualDetector(node.options);
  }
  node.detector.Heartbeat(now, p->incarnation);
  LivenessPacket answer;
  answer.kind = PacketKind::kAck;
  answer.verdict = node.offered;
  answer.node_index = *index;
  answer.incarnation = incarnation_;
  answer.seq = ++node.ack_seq;
  answer.echo = p->seq;
  *ack = EncodePacket(answer, node.mac);
  return true;
}

void LivenessReceiver::Evaluate(TimePoint now) {
  std::vector<std::pair<uint64_t, Duration>> silent;
  std::vector<uint64_t> heard;
  size_t suspected = 0, watched = 0;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [index, node] : nodes_) {
      if (!node.judged()) {
        if (std::exchange(node.reported, false)) heard.push_back(node.token);
        continue;
      }
      ++watched;
      const Suspicion s = node.detector.Evaluate(now);
      if (s.suspected) ++suspected;
      if (s.suspected && !node.reported) {
        node.reported = true;
        silent.emplace_back(node.token, s.silence);
      } else if (!s.suspected && node.reported) {
        node.reported = false;
        heard.push_back(node.token);
      }
    }
  }
  for (const auto& [token, silence] : silent) {
    callbacks_.on_silent(token, silence, suspected, watched);
  }
  for (uint64_t token : heard) {
    if (callbacks_.on_heard) callbacks_.on_heard(token);
  }
}

}  // namespace ddprun::rendezvous
