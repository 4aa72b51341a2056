// A LivenessSender and a LivenessReceiver on loopback, with their real threads and sockets: the
// heartbeats are answered, a sender that stops is suspected in a few hundred ms, a server that
// stops answering is suspected by the sender, and datagrams that are not authentic count for
// nothing. Both sides judge only under the silence verdict, once the sender follows the offer.
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "rendezvous/liveness/liveness_receiver.h"
#include "rendezvous/liveness/liveness_sender.h"
#include "rendezvous/liveness/packet.h"
#include "rendezvous/liveness/udp_socket.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;

// One-off MACs: the tests use a key once or twice.
PacketBytes Encode(const LivenessPacket& p, const LivenessKey& key) {
  PacketMac mac(key);
  return EncodePacket(p, mac);
}

class LivenessPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LivenessReceiver::Callbacks callbacks;
    callbacks.on_silent = [this](uint64_t token, Duration silence, size_t, size_t) {
      absl::MutexLock lock(&mu_);
      if (silent_token_ != 0) return;
      silent_token_ = token;
      silent_at_ = std::chrono::steady_clock::now();
      reported_silence_ = silence;
    };
    auto receiver = LivenessReceiver::Start("127.0.0.1", callbacks);
    ASSERT_TRUE(receiver.ok()) << receiver.status();
    receiver_ = *std::move(receiver);
    ASSERT_GT(receiver_->port(), 0);
    key_ = DeriveLivenessKey("member-key", receiver_->salt(), kIndex);
    receiver_->Watch(kIndex, /*token=*/99, key_, AccrualOptions{}, SilenceVerdict::kBySilence);
  }

  std::unique_ptr<LivenessSender> StartSender() {
    SenderOptions o;
    o.host = "127.0.0.1";
    o.port = receiver_->port();
    o.node_index = kIndex;
    o.key = key_;
    o.on_ack = [this](TimePoint, SilenceVerdict offered) {
      acks_.fetch_add(1);
      last_offer_ = offered;
    };
    o.on_silent = [this](Duration) { server_silent_.Notify(); };
    auto sender = LivenessSender::Start(o);
    EXPECT_TRUE(sender.ok()) << sender.status();
    return sender.ok() ? *std::move(sender) : nullptr;
  }

  uint64_t SilentToken() {
    absl::MutexLock lock(&mu_);
    return silent_token_;
  }
  // Waits (2 s at most) for `predicate`; returns it.
  template <typename Predicate>
  static bool Within2s(Predicate predicate) {
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(2000);
    while (!predicate() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    return predicate();
  }
  bool Acks(int n) {
    return Within2s([this, n] { return acks_.load() >= n; });
  }
  bool Suspected() {
    return Within2s([this] { return SilentToken() != 0; });
  }

  static constexpr uint32_t kIndex = 12;
  std::unique_ptr<LivenessReceiver> receiver_;
  LivenessKey key_{};
  std::atomic<int> acks_{0};
  std::atomic<SilenceVerdict> last_offer_{SilenceVerdict::kByLease};
  absl::Notification server_silent_;
  absl::Mutex mu_;
  uint64_t silent_token_ = 0;
  TimePoint silent_at_{};
  Duration reported_silence_{};
};

TEST_F(LivenessPathTest, AStoppedSenderIsSuspectedInAFewHundredMilliseconds) {
  std::unique_ptr<LivenessSender> sender = StartSender();
  ASSERT_NE(sender, nullptr);
  // A second of heartbeats: every one answered, nobody suspected.
  const auto beating_until = std::chrono::steady_clock::now() + milliseconds(1000);
  while (std::chrono::steady_clock::now() < beating_until) {
    std::this_thread::sleep_for(milliseconds(10));
    ASSERT_EQ(SilentToken(), 0u) << "a beating sender was suspected";
  }
  EXPECT_GE(acks_.load(), 30);
  EXPECT_GE(receiver_->counters().heartbeats, 30u);
  EXPECT_EQ(receiver_->counters().refused, 0u);
  EXPECT_FALSE(server_silent_.HasBeenNotified());

  const TimePoint stopped = std::chrono::steady_clock::now();
  sender.reset();
  Suspected();
  ASSERT_EQ(SilentToken(), 99u);
  const auto detection = std::chrono::duration_cast<milliseconds>(silent_at_ - stopped);
  std::printf("receiver suspected the stopped sender after %lld ms (silence %lld ms)\n",
              static_cast<long long>(detection.count()),
              static_cast<long long>(ToMillis(reported_silence_)));
  EXPECT_LE(detection, milliseconds(400));
  EXPECT_GE(detection, milliseconds(150));  // not before the acceptable pause
}

TEST_F(LivenessPathTest, ASenderWhoseServerStopsAnsweringSuspectsIt) {
  std::unique_ptr<LivenessSender> sender = StartSender();
  ASSERT_NE(sender, nullptr);
  ASSERT_TRUE(Acks(10));
  const TimePoint unwatched = std::chrono::steady_clock::now();
  receiver_->Unwatch(kIndex);  // the server forgets the node: no more acks
  ASSERT_TRUE(server_silent_.WaitForNotificationWithTimeout(absl::Seconds(2)));
  const auto detection = std::chrono::steady_clock::now() - unwatched;
  EXPECT_LE(detection, milliseconds(400));
  EXPECT_GT(receiver_->counters().refused, 0u);  // its heartbeats, to an unknown index
}

TEST_F(LivenessPathTest, ForgedAndReplayedDatagramsKeepNobodyAlive) {
  absl::StatusOr<UdpSocket> attacker = ConnectUdp("127.0.0.1", receiver_->port());
  ASSERT_TRUE(attacker.ok()) << attacker.status();
  LivenessPacket p;
  p.node_index = kIndex;
  p.incarnation = 1;
  p.seq = 1;
  p.echo = 1;  // "I heard your first ack and follow its verdict": judged from now on
  p.verdict = SilenceVerdict::kBySilence;
  const PacketBytes genuine = Encode(p, key_);
  const PacketBytes forged = Encode(p, DeriveLivenessKey("guess", receiver_->salt(), kIndex));
  ASSERT_EQ(send(attacker->fd(), genuine.data(), genuine.size(), 0), 52);
  // Until the detector has two heartbeats it cannot judge; the genuine one started the clock.
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(2000);
  while (SilentToken() == 0 && std::chrono::steady_clock::now() < deadline) {
    // A replay of the genuine packet and forgeries, every 10 ms: none is a sign of life.
    send(attacker->fd(), genuine.data(), genuine.size(), 0);
    send(attacker->fd(), forged.data(), forged.size(), 0);
    send(attacker->fd(), genuine.data(), 20, 0);
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(SilentToken(), 99u) << "replayed or forged datagrams kept the node alive";
  EXPECT_EQ(receiver_->counters().heartbeats, 1u);
  EXPECT_GT(receiver_->counters().refused, 10u);
}

// Under the lease's verdict neither side judges a silence: the server's receiver reports nobody,
// and the sender does not suspect a server that stops answering.
TEST_F(LivenessPathTest, UnderTheLeasesVerdictNeitherSideJudgesASilence) {
  receiver_->Offer(kIndex, SilenceVerdict::kByLease);
  std::unique_ptr<LivenessSender> sender = StartSender();
  ASSERT_NE(sender, nullptr);
  ASSERT_TRUE(Acks(3));  // at kLeaseVerdictInterval
  EXPECT_EQ(last_offer_.load(), SilenceVerdict::kByLease);
  // At the lease verdict's rate (4 a second), not the run's 50: nothing to judge them by.
  const int before = acks_.load();
  std::this_thread::sleep_for(milliseconds(1000));  // the span counted, not a wait
  EXPECT_LE(acks_.load() - before, 6);
  receiver_->Unwatch(kIndex);  // no more acks: the sender's detector would suspect the server
  EXPECT_FALSE(server_silent_.WaitForNotificationWithTimeout(absl::Milliseconds(1000)));

  receiver_->Watch(kIndex, /*token=*/99, key_, AccrualOptions{}, SilenceVerdict::kByLease);
  sender.reset();  // and a stopped sender under the lease's verdict
  std::this_thread::sleep_for(milliseconds(1000));  // the silence itself: nothing to wait for
  EXPECT_EQ(SilentToken(), 0u) << "a node under the lease's verdict was judged by its silence";
}

// An offer of the silence verdict made while the sender runs: the acks carry it, the sender's
// lease hook sees it, its heartbeats follow it, and from then on a stop is suspected.
TEST_F(LivenessPathTest, TheSenderFollowsAnOfferMadeWhileItRuns) {
  receiver_->Offer(kIndex, SilenceVerdict::kByLease);
  std::unique_ptr<LivenessSender> sender = StartSender();
  ASSERT_NE(sender, nullptr);
  ASSERT_TRUE(Acks(3));  // at kLeaseVerdictInterval
  receiver_->Offer(kIndex, SilenceVerdict::kBySilence);
  ASSERT_TRUE(Within2s([this] { return last_offer_.load() == SilenceVerdict::kBySilence; }));
  // At the run's rate now (20 ms), not the lease verdict's (250 ms): the acks of one second.
  const int before = acks_.load();
  std::this_thread::sleep_for(milliseconds(1000));  // the span counted, not a wait
  EXPECT_GE(acks_.load() - before, 25) << "still at the lease verdict's rate";
  const TimePoint stopped = std::chrono::steady_clock::now();
  sender.reset();
  Suspected();
  ASSERT_EQ(SilentToken(), 99u);
  EXPECT_LE(std::chrono::steady_clock::now() - stopped, milliseconds(600));
}

// The receiver judges a node under a new offer only from a heartbeat that echoes one of the
// offer's acks: a heartbeat that says it follows the silence verdict but echoes an ack from
// before the offer (its lease may have followed an earlier offer, since withdrawn) counts as a
// sign of life and nothing more.
TEST_F(LivenessPathTest, ASilenceIsJudgedOnlyAfterAHeartbeatEchoingTheCurrentOffer) {
  absl::StatusOr<UdpSocket> agent = ConnectUdp("127.0.0.1", receiver_->port());
  ASSERT_TRUE(agent.ok()) << agent.status();
  receiver_->Offer(kIndex, SilenceVerdict::kByLease);
  LivenessPacket p;
  p.node_index = kIndex;
  p.incarnation = 1;
  p.verdict = SilenceVerdict::kBySilence;
  uint64_t acks_read = 0;
  auto beat = [&](uint64_t echo, int times) {
    for (int i = 0; i < times; ++i) {
      ++p.seq;
      p.echo = echo;
      const PacketBytes b = Encode(p, key_);
      ASSERT_EQ(send(agent->fd(), b.data(), b.size(), 0), 52);
      std::this_thread::sleep_for(milliseconds(20));
      uint8_t ack[kPacketBytes];
      while (recv(agent->fd(), ack, sizeof(ack), MSG_DONTWAIT) > 0) ++acks_read;
    }
  };
  beat(0, 10);  // acks 1..10, under the lease's verdict
  ASSERT_EQ(acks_read, 10u);
  receiver_->Offer(kIndex, SilenceVerdict::kBySilence);  // from ack 11 on
  beat(/*echo=*/10, 10);                                 // an echo from before the offer
  std::this_thread::sleep_for(milliseconds(1000));       // the silence itself
  EXPECT_EQ(SilentToken(), 0u) << "judged before the node echoed the offer";
  beat(/*echo=*/11, 10);  // heard the offer's first ack: judged from now on
  Suspected();
  EXPECT_EQ(SilentToken(), 99u);
}

}  // namespace
}  // namespace ddprun::rendezvous
