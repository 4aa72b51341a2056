// The liveness datagram (issue 40, docs/design.md §3a): what an agent's heartbeat and the
// server's answer to it look like on the wire, and the checks a receiver makes before a packet
// counts as a sign of life. Fixed layout, little-endian, kPacketBytes:
//
//   offset size  field
//        0    4  magic "DDPL"
//        4    1  version (kPacketVersion)
//        5    1  kind: 1 heartbeat (agent -> server), 2 ack (server -> agent)
//        6    1  verdict (SilenceVerdict, run_config.h): in an ack, who the server lets decide
//                this node's loss when it falls silent; in a heartbeat, what the agent's local
//                lease follows (kBySilence: it ends before the detector may suspect the node)
//        7    1  zero
//        8    4  node index (Joined.liveness_node_index: the server's short id of the stream)
//       12    8  incarnation (random per sender: a restarted sender is a new one)
//       20    8  seq (the sender's counter, from 1)
//       28    8  echo (the last seq the sender heard from the other side; 0: none)
//       36   16  HMAC-SHA256 of bytes 0..35 under the node's liveness key, truncated
//
// The key (DeriveLivenessKey) is the node's member key (member_keys.h), which only the server
// and that agent know, bound to the server's liveness salt and the node index: a packet cannot
// be forged, moved to another node, or carried over from an earlier server or stream. A replay
// within one stream is refused by ReplayGuard (seq only grows). The kind is under the MAC, so a
// heartbeat reflected back to its agent is no ack.
//
// Pure functions and a small value class; thread-compatible.
#ifndef DDPRUN_RENDEZVOUS_LIVENESS_PACKET_H_
#define DDPRUN_RENDEZVOUS_LIVENESS_PACKET_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "rendezvous/api/run_config.h"

struct evp_mac_ctx_st;  // OpenSSL's EVP_MAC_CTX, kept out of this header

namespace ddprun::rendezvous {

inline constexpr size_t kPacketBytes = 52;
inline constexpr size_t kPacketMacBytes = 16;
// 2: the verdict byte. A peer of another version is not heard at all (both fall back to the
// lease), never misread.
inline constexpr uint8_t kPacketVersion = 2;
inline constexpr size_t kLivenessKeyBytes = 32;

enum class PacketKind : uint8_t { kHeartbeat = 1, kAck = 2 };

struct LivenessPacket {
  PacketKind kind = PacketKind::kHeartbeat;
  uint32_t node_index = 0;
  uint64_t incarnation = 0;
  uint64_t seq = 0;
  uint64_t echo = 0;
  SilenceVerdict verdict = SilenceVerdict::kByLease;
};

using LivenessKey = std::array<uint8_t, kLivenessKeyBytes>;
using PacketBytes = std::array<uint8_t, kPacketBytes>;

// HMAC-SHA256(member_key, "ddprun-liveness-v1" | salt | node_index), each part length-prefixed.
// `salt`: the server's (Joined.liveness_salt, random per server process).
LivenessKey DeriveLivenessKey(std::string_view member_key, std::string_view salt,
                              uint32_t node_index);

// HMAC-SHA256 under one node's key, keyed once: the key schedule is most of what one HMAC of a
// 36-byte message costs (OpenSSL's one-shot HMAC() redoes it, and fetches the digest, every
// call: 8 us a packet at the server, measured, against under 1 us this way). Movable, not
// copyable; not thread-safe (one per node, used by one thread at a time).
class PacketMac {
 public:
  explicit PacketMac(const LivenessKey& key);
  ~PacketMac();
  PacketMac(PacketMac&& other) noexcept;
  PacketMac& operator=(PacketMac&& other) noexcept;
  PacketMac(const PacketMac&) = delete;
  PacketMac& operator=(const PacketMac&) = delete;

  // The first kPacketMacBytes of HMAC-SHA256(key, data[0..size)).
  void Compute(const uint8_t* data, size_t size, uint8_t out[kPacketMacBytes]);

 private:
  ::evp_mac_ctx_st* ctx_ = nullptr;  // EVP_MAC_CTX
};

PacketBytes EncodePacket(const LivenessPacket& packet, PacketMac& mac);

// The node index of a datagram that has the size, magic and version of a liveness packet (to
// find the key); nullopt for anything else. Says nothing about authenticity.
std::optional<uint32_t> PeekNodeIndex(const uint8_t* data, size_t size);

// The packet, if `data` is one of kind `expected` made with `key`: kInvalidArgument naming what
// is wrong (size, magic, version, kind, MAC) otherwise. The MAC is compared in constant time.
absl::StatusOr<LivenessPacket> DecodePacket(const uint8_t* data, size_t size, PacketMac& mac,
                                            PacketKind expected);

// Refuses replays on one node index: the first authentic packet fixes the incarnation (a node
// index belongs to one stream, whose sender keeps one incarnation), and after that only packets
// of that incarnation with a higher seq than any accepted before count.
class ReplayGuard {
 public:
  // True (and remembered) when (incarnation, seq) is new; false for a replay or a packet of
  // another incarnation.
  bool Accept(uint64_t incarnation, uint64_t seq);
  uint64_t last_seq() const { return last_seq_; }

 private:
  std::optional<uint64_t> incarnation_;
  uint64_t last_seq_ = 0;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_LIVENESS_PACKET_H_
