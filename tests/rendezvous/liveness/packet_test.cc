// The liveness datagram: a round trip, and every packet a receiver must not count as a sign of
// life (forged, moved to another node, reflected, truncated, replayed, from an earlier server).
#include "rendezvous/liveness/packet.h"

#include <cstring>

#include "gtest/gtest.h"

namespace ddprun::rendezvous {
namespace {

// One-off MACs: the tests use a key once or twice.
PacketBytes Encode(const LivenessPacket& p, const LivenessKey& key) {
  PacketMac mac(key);
  return EncodePacket(p, mac);
}
absl::StatusOr<LivenessPacket> Decode(const uint8_t* data, size_t size, const LivenessKey& key,
                                      PacketKind kind) {
  PacketMac mac(key);
  return DecodePacket(data, size, mac, kind);
}

LivenessPacket Heartbeat(uint64_t seq) {
  LivenessPacket p;
  p.kind = PacketKind::kHeartbeat;
  p.node_index = 7;
  p.incarnation = 0x1122334455667788ULL;
  p.seq = seq;
  p.echo = seq - 1;
  return p;
}

const LivenessKey& Key() {
  static const LivenessKey key = DeriveLivenessKey("member-key-of-n7", "salt-1", 7);
  return key;
}

TEST(LivenessPacketTest, RoundTripsEveryFieldInAFixedLittleEndianLayout) {
  LivenessPacket sent = Heartbeat(5);
  sent.verdict = SilenceVerdict::kBySilence;
  const PacketBytes b = Encode(sent, Key());
  ASSERT_EQ(b.size(), 52u);
  EXPECT_EQ(std::memcmp(b.data(), "DDPL", 4), 0);
  EXPECT_EQ(b[4], kPacketVersion);
  EXPECT_EQ(b[6], 1);  // the verdict
  EXPECT_EQ(b[7], 0);
  EXPECT_EQ(b[8], 7);      // node index, little-endian
  EXPECT_EQ(b[12], 0x88);  // incarnation's low byte first
  EXPECT_EQ(b[20], 5);     // seq
  absl::StatusOr<LivenessPacket> p = Decode(b.data(), b.size(), Key(), PacketKind::kHeartbeat);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->node_index, 7u);
  EXPECT_EQ(p->incarnation, 0x1122334455667788ULL);
  EXPECT_EQ(p->seq, 5u);
  EXPECT_EQ(p->echo, 4u);
  EXPECT_EQ(p->verdict, SilenceVerdict::kBySilence);
  EXPECT_EQ(PeekNodeIndex(b.data(), b.size()), 7u);
}

TEST(LivenessPacketTest, AnyFlippedBitIsRefused) {
  const PacketBytes good = Encode(Heartbeat(5), Key());
  for (size_t byte = 0; byte < good.size(); ++byte) {
    PacketBytes bad = good;
    bad[byte] ^= 0x01;
    EXPECT_FALSE(Decode(bad.data(), bad.size(), Key(), PacketKind::kHeartbeat).ok())
        << "byte " << byte;
  }
}

TEST(LivenessPacketTest, AnotherKeyIsRefused) {
  // Another node's key, the same node under another server's salt, another member key.
  for (const LivenessKey& other : {DeriveLivenessKey("member-key-of-n7", "salt-1", 8),
                                   DeriveLivenessKey("member-key-of-n7", "salt-2", 7),
                                   DeriveLivenessKey("member-key-of-n8", "salt-1", 7)}) {
    const PacketBytes forged = Encode(Heartbeat(5), other);
    absl::StatusOr<LivenessPacket> p =
        Decode(forged.data(), forged.size(), Key(), PacketKind::kHeartbeat);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().message(), "liveness packet with a wrong MAC");
  }
}

TEST(LivenessPacketTest, AHeartbeatReflectedAsAnAckIsRefused) {
  const PacketBytes b = Encode(Heartbeat(5), Key());
  EXPECT_FALSE(Decode(b.data(), b.size(), Key(), PacketKind::kAck).ok());
}

TEST(LivenessPacketTest, TruncatedOrLongerDatagramsAreRefused) {
  const PacketBytes b = Encode(Heartbeat(5), Key());
  for (size_t size : {size_t{0}, size_t{4}, size_t{36}, kPacketBytes - 1}) {
    EXPECT_FALSE(Decode(b.data(), size, Key(), PacketKind::kHeartbeat).ok()) << size;
    EXPECT_FALSE(PeekNodeIndex(b.data(), size).has_value()) << size;
  }
  uint8_t longer[kPacketBytes + 1] = {};
  std::memcpy(longer, b.data(), b.size());
  EXPECT_FALSE(Decode(longer, sizeof(longer), Key(), PacketKind::kHeartbeat).ok());
}

TEST(LivenessPacketTest, ReplayGuardRefusesOldSeqsAndOtherIncarnations) {
  ReplayGuard guard;
  EXPECT_TRUE(guard.Accept(42, 1));
  EXPECT_TRUE(guard.Accept(42, 3));   // 2 was lost: fine
  EXPECT_FALSE(guard.Accept(42, 3));  // the same packet again
  EXPECT_FALSE(guard.Accept(42, 2));  // late or replayed
  EXPECT_FALSE(guard.Accept(43, 4));  // another incarnation on this node index
  EXPECT_TRUE(guard.Accept(42, 4));
  EXPECT_EQ(guard.last_seq(), 4u);
}

}  // namespace
}  // namespace ddprun::rendezvous
