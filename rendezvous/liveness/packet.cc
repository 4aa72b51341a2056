#include "rendezvous/liveness/packet.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace ddprun::rendezvous {
namespace {

constexpr uint8_t kMagic[4] = {'D', 'D', 'P', 'L'};
constexpr size_t kSignedBytes = kPacketBytes - kPacketMacBytes;

void PutLe(uint8_t* at, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) at[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint64_t GetLe(const uint8_t* at, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(at[i]) << (8 * i);
  return value;
}

void Hmac(const uint8_t* key, size_t key_len, const uint8_t* data, size_t len,
          uint8_t out[EVP_MAX_MD_SIZE]) {
  unsigned int out_len = 0;
  HMAC(EVP_sha256(), key, static_cast<int>(key_len), data, len, out, &out_len);
}

bool HasHeader(const uint8_t* data, size_t size) {
  return size == kPacketBytes && std::memcmp(data, kMagic, sizeof(kMagic)) == 0 &&
         data[4] == kPacketVersion;
}

}  // namespace

LivenessKey DeriveLivenessKey(std::string_view member_key, std::string_view salt,
                              uint32_t node_index) {
  std::string message;
  const std::string index = std::to_string(node_index);
  for (std::string_view part :
       {std::string_view("ddprun-liveness-v1"), salt, std::string_view(index)}) {
    uint8_t length[8];
    PutLe(length, part.size(), sizeof(length));
    message.append(reinterpret_cast<const char*>(length), sizeof(length));
    message.append(part);
  }
  uint8_t mac[EVP_MAX_MD_SIZE];
  Hmac(reinterpret_cast<const uint8_t*>(member_key.data()), member_key.size(),
       reinterpret_cast<const uint8_t*>(message.data()), message.size(), mac);
  LivenessKey key;
  std::memcpy(key.data(), mac, key.size());
  return key;
}

PacketBytes EncodePacket(const LivenessPacket& packet, const LivenessKey& key) {
  PacketBytes b{};
  std::memcpy(b.data(), kMagic, sizeof(kMagic));
  b[4] = kPacketVersion;
  b[5] = static_cast<uint8_t>(packet.kind);
  PutLe(&b[8], packet.node_index, 4);
  PutLe(&b[12], packet.incarnation, 8);
  PutLe(&b[20], packet.seq, 8);
  PutLe(&b[28], packet.echo, 8);
  uint8_t mac[EVP_MAX_MD_SIZE];
  Hmac(key.data(), key.size(), b.data(), kSignedBytes, mac);
  std::memcpy(&b[kSignedBytes], mac, kPacketMacBytes);
  return b;
}

std::optional<uint32_t> PeekNodeIndex(const uint8_t* data, size_t size) {
  if (!HasHeader(data, size)) return std::nullopt;
  return static_cast<uint32_t>(GetLe(&data[8], 4));
}

absl::StatusOr<LivenessPacket> DecodePacket(const uint8_t* data, size_t size,
                                            const LivenessKey& key, PacketKind expected) {
  if (size != kPacketBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("liveness packet of ", size, " bytes (", kPacketBytes, " expected)"));
  }
  if (std::memcmp(data, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("not a liveness packet (magic)");
  }
  if (data[4] != kPacketVersion) {
    return absl::InvalidArgumentError(absl::StrCat("liveness packet version ", data[4]));
  }
  uint8_t mac[EVP_MAX_MD_SIZE];
  Hmac(key.data(), key.size(), data, kSignedBytes, mac);
  unsigned char diff = 0;
  for (size_t i = 0; i < kPacketMacBytes; ++i) diff |= mac[i] ^ data[kSignedBytes + i];
  if (diff != 0) return absl::InvalidArgumentError("liveness packet with a wrong MAC");
  if (data[5] != static_cast<uint8_t>(expected)) {
    return absl::InvalidArgumentError(absl::StrCat("liveness packet of kind ", data[5]));
  }
  LivenessPacket p;
  p.kind = expected;
  p.node_index = static_cast<uint32_t>(GetLe(&data[8], 4));
  p.incarnation = GetLe(&data[12], 8);
  p.seq = GetLe(&data[20], 8);
  p.echo = GetLe(&data[28], 8);
  return p;
}

bool ReplayGuard::Accept(uint64_t incarnation, uint64_t seq) {
  if (incarnation_.has_value() && *incarnation_ != incarnation) return false;
  if (incarnation_.has_value() && seq <= last_seq_) return false;
  incarnation_ = incarnation;
  last_seq_ = seq;
  return true;
}

}  // namespace ddprun::rendezvous
