#include "rendezvous/liveness/liveness_sender.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <random>
#include <utility>

#include "rendezvous/liveness/thread_priority.h"

namespace ddprun::rendezvous {
namespace {

uint64_t RandomU64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// How often the server's detector is judged: often enough not to add to the detection delay,
// never more often than the heartbeats.
Duration EvaluationPeriod(Duration interval) {
  return std::min<Duration>(interval, std::chrono::milliseconds(10));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LivenessSender>> LivenessSender::Start(SenderOptions options) {
  absl::StatusOr<UdpSocket> socket = ConnectUdp(options.host, options.port);
  if (!socket.ok()) return socket.status();
  std::unique_ptr<LivenessSender> s(new LivenessSender(std::move(options), *std::move(socket)));
  s->thread_ = std::thread([p = s.get()] { p->Run(); });
  return s;
}

LivenessSender::LivenessSender(SenderOptions options, UdpSocket socket)
    : options_(std::move(options)),
      socket_(std::move(socket)),
      incarnation_(RandomU64()),
      mac_(options_.key),
      detector_(options_.detector) {}

LivenessSender::~LivenessSender() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

LivenessSender::Counters LivenessSender::counters() const {
  return {sent_.load(), acks_.load(), refused_.load()};
}

void LivenessSender::Run() {
  // Refused without CAP_SYS_NICE: the thread keeps its priority (docs/design.md §3a, risks).
  RaiseToRealtimePriority();
  const Duration evaluate_every = EvaluationPeriod(options_.interval);
  next_send_ = std::chrono::steady_clock::now();
  TimePoint next_evaluation = next_send_ + evaluate_every;
  while (!stop_.load(std::memory_order_relaxed)) {
    TimePoint now = std::chrono::steady_clock::now();
    if (now >= next_send_) {
      LivenessPacket p;
      p.kind = PacketKind::kHeartbeat;
      p.node_index = options_.node_index;
      p.incarnation = incarnation_;
      p.seq = ++seq_;
      p.echo = last_ack_seq_;
      p.verdict = verdict_;
      const PacketBytes bytes = EncodePacket(p, mac_);
      // Errors (an ICMP refusal reported on the connected socket, a full buffer) are a lost
      // heartbeat: the server's detector allows for those, and nothing here can do better.
      sent_at_[p.seq % kSentKept] = {p.seq, now};
      if (send(socket_.fd(), bytes.data(), bytes.size(), MSG_DONTWAIT) > 0) ++sent_;
      next_send_ += Interval();
      if (next_send_ <= now) next_send_ = now + Interval();  // woke late: no burst
    }
    if (now >= next_evaluation) {
      const Suspicion s = detector_.Evaluate(now);
      // Only a server that may give this node up on silence is fenced from on silence: under
      // the lease's verdict, a short silence of the server is ridden out as before.
      if (s.suspected && !reported_ && options_.on_silent &&
          verdict_ == SilenceVerdict::kBySilence) {
        options_.on_silent(s.silence);
      }
      reported_ = s.suspected;
      next_evaluation = now + evaluate_every;
    }
    const TimePoint wake = std::min(next_send_, next_evaluation);
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(
        std::max<Duration>(wake - now, Duration::zero()));
    pollfd pfd{socket_.fd(), POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(wait.count())) > 0) {
      Receive(std::chrono::steady_clock::now());
    }
  }
}

Duration LivenessSender::Interval() const {
  return verdict_ == SilenceVerdict::kBySilence
             ? options_.interval
             : std::max<Duration>(options_.interval, kLeaseVerdictInterval);
}

void LivenessSender::Receive(TimePoint now) {
  uint8_t buf[kPacketBytes + 1];
  for (;;) {
    const ssize_t n = recv(socket_.fd(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) return;  // drained, or an ICMP error (counted as nothing: the ack is missing)
    absl::StatusOr<LivenessPacket> p =
        DecodePacket(buf, static_cast<size_t>(n), mac_, PacketKind::kAck);
    if (!p.ok() || p->node_index != options_.node_index || p->echo > seq_ ||
        !guard_.Accept(p->incarnation, p->seq)) {
      ++refused_;
      continue;
    }
    ++acks_;
    last_ack_seq_ = p->seq;
    detector_.Heartbeat(now, p->incarnation);
    const Sent& answered = sent_at_[p->echo % kSentKept];
    if (answered.seq != p->echo || p->echo == 0) continue;  // too old to date: renews nothing
    if (options_.on_ack) options_.on_ack(answered.at, p->verdict);
    // Only after the lease took the verdict do the heartbeats say they follow it.
    if (std::exchange(verdict_, p->verdict) != SilenceVerdict::kBySilence &&
        verdict_ == SilenceVerdict::kBySilence) {
      // Judged from now on: say so at once, at the run's rate, and judge the server's acks
      // afresh (the window learnt the slower rate).
      next_send_ = now;
      detector_ = PhiAccrualDetector(options_.detector);
    }
  }
}

}  // namespace ddprun::rendezvous
