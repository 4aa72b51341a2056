#include "rendezvous/liveness/packet.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>

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

EVP_MAC* HmacAlgorithm() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  return mac;
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

PacketMac::PacketMac(const LivenessKey& key) : ctx_(EVP_MAC_CTX_new(HmacAlgorithm())) {
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_END};
  EVP_MAC_init(ctx_, key.data(), key.size(), params);
}

PacketMac::~PacketMac() { EVP_MAC_CTX_free(ctx_); }

PacketMac::PacketMac(PacketMac&& other) noexcept : ctx_(other.ctx_) { other.ctx_ = nullptr; }

PacketMac& PacketMac::operator=(PacketMac&& other) noexcept {
  if (this != &other) {
    EVP_MAC_CTX_free(ctx_);
    ctx_ = other.ctx_;
    other.ctx_ = nullptr;
  }
  return *this;
}

void PacketMac::Compute(const uint8_t* data, size_t size, uint8_t out[kPacketMacBytes]) {
  uint8_t full[EVP_MAX_MD_SIZE];
  size_t length = 0;
  // A null key starts a new message under the key set at construction.
  EVP_MAC_init(ctx_, nullptr, 0, nullptr);
  EVP_MAC_update(ctx_, data, size);
  EVP_MAC_final(ctx_, full, &length, sizeof(full));
  std::memcpy(out, full, kPacketMacBytes);
}

PacketBytes EncodePacket(const LivenessPacket& packet, PacketMac& mac) {
  PacketBytes b{};
  std::memcpy(b.data(), kMagic, sizeof(kMagic));
  b[4] = kPacketVersion;
  b[5] = static_cast<uint8_t>(packet.kind);
  b[6] = static_cast<uint8_t>(packet.verdict);
  PutLe(&b[8], packet.node_index, 4);
  PutLe(&b[12], packet.incarnation, 8);
  PutLe(&b[20], packet.seq, 8);
  PutLe(&b[28], packet.echo, 8);
  mac.Compute(b.data(), kSignedBytes, &b[kSignedBytes]);
  return b;
}

std::optional<uint32_t> PeekNodeIndex(const uint8_t* data, size_t size) {
  if (!HasHeader(data, size)) return std::nullopt;
  return static_cast<uint32_t>(GetLe(&data[8], 4));
}

absl::StatusOr<LivenessPacket> DecodePacket(const uint8_t* data, size_t size, PacketMac& mac,
                                            PacketKind expected) {
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
  uint8_t expected_mac[kPacketMacBytes];
  mac.Compute(data, kSignedBytes, expected_mac);
  unsigned char diff = 0;
  for (size_t i = 0; i < kPacketMacBytes; ++i) diff |= expected_mac[i] ^ data[kSignedBytes + i];
  if (diff != 0) return absl::InvalidArgumentError("liveness packet with a wrong MAC");
  if (data[5] != static_cast<uint8_t>(expected)) {
    return absl::InvalidArgumentError(absl::StrCat("liveness packet of kind ", data[5]));
  }
  if (data[6] > static_cast<uint8_t>(SilenceVerdict::kBySilence)) {
    return absl::InvalidArgumentError(absl::StrCat("liveness packet with verdict ", data[6]));
  }
  LivenessPacket p;
  p.kind = expected;
  p.verdict = static_cast<SilenceVerdict>(data[6]);
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
