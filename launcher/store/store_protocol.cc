#include "launcher/store/store_protocol.h"

#include <array>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ddprun::launcher::store {
namespace {

constexpr uint8_t kUnsupported = 0xff;

// Command byte -> Command, per dialect; kUnsupported where the byte means nothing served here.
constexpr std::array<Command, 17> kValidatedCommands = {
    Command::kSet,     Command::kCompareSet, Command::kGet,      Command::kAdd,
    Command::kCheck,   Command::kWait,       Command::kNumKeys,  Command::kDeleteKey,
    Command::kAppend,  Command::kMultiGet,   Command::kMultiSet, Command::kCancelWait,
    Command::kPing,    Command::kQueuePush,  Command::kQueuePop, Command::kQueueLen,
    Command::kListKeys};  // bytes 1..17 (0 is VALIDATE)

// torch <= 2.1: bytes 0..12, 7 being WATCH_KEY.
std::optional<Command> UnvalidatedCommand(uint8_t byte) {
  static constexpr std::array<Command, 13> kTable = {
      Command::kSet,       Command::kCompareSet, Command::kGet,      Command::kAdd,
      Command::kCheck,     Command::kWait,       Command::kNumKeys,  Command::kSet /*WATCH_KEY*/,
      Command::kDeleteKey, Command::kAppend,     Command::kMultiGet, Command::kMultiSet,
      Command::kCancelWait};
  if (byte >= kTable.size() || byte == 7) return std::nullopt;
  return kTable[byte];
}

std::optional<Command> ValidatedCommand(uint8_t byte) {
  if (byte == 0 || byte > kValidatedCommands.size()) return std::nullopt;
  return kValidatedCommands[byte - 1];
}

uint8_t CommandByte(Dialect dialect, Command c) {
  if (dialect == Dialect::kUnvalidated) {
    for (uint8_t b = 0; b < 13; ++b) {
      if (UnvalidatedCommand(b) == c) return b;
    }
    return kUnsupported;
  }
  for (size_t i = 0; i < kValidatedCommands.size(); ++i) {
    if (kValidatedCommands[i] == c) return static_cast<uint8_t>(i + 1);
  }
  return kUnsupported;
}

template <typename T>
void AppendRaw(std::string* out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out->append(bytes, sizeof(T));
}

}  // namespace

// Reads fields from the unconsumed bytes; every read says whether the bytes were there.
class ByteReader {
 public:
  explicit ByteReader(absl::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  bool Read(T* value) {
    if (bytes_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  // A length-prefixed string of at most `limit` bytes: false when incomplete; sets *too_long
  // (and returns false) when its length is over the limit.
  bool ReadBytes(size_t limit, std::string* value, bool* too_long) {
    uint64_t n = 0;
    const size_t start = pos_;
    if (!Read(&n)) return false;
    if (n > limit) {
      *too_long = true;
      return false;
    }
    if (bytes_.size() - pos_ < n) {
      pos_ = start;
      return false;
    }
    value->assign(bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  absl::string_view bytes_;
  size_t pos_ = 0;
};

void RequestDecoder::Append(absl::string_view bytes) {
  // Drop what was parsed before growing, so the buffer holds at most one request and one read.
  if (consumed_ > 0 && consumed_ >= buffer_.size() / 2) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  buffer_.append(bytes.data(), bytes.size());
}

absl::StatusOr<std::optional<Request>> RequestDecoder::Next() {
  absl::string_view rest(buffer_);
  rest.remove_prefix(consumed_);
  if (dialect_ == Dialect::kUndecided) {
    if (rest.empty()) return std::nullopt;
    // torch >= 2.2 opens with VALIDATE (0) and the magic; torch <= 2.1 with a command, whose
    // byte 0 (SET) is followed by a key length that is never the magic's 4 bytes and 4 zeros
    // within the limits.
    if (rest[0] == 0) {
      if (rest.size() < 5) return std::nullopt;
      uint32_t magic = 0;
      std::memcpy(&magic, rest.data() + 1, sizeof(magic));
      if (magic == kValidationMagic) {
        dialect_ = Dialect::kValidated;
        consumed_ += 5;
        return Next();
      }
    }
    dialect_ = Dialect::kUnvalidated;
  }
  ByteReader in(rest);
  absl::StatusOr<std::optional<Request>> r = Parse(in);
  if (r.ok() && r->has_value()) {
    consumed_ += in.pos();
  } else if (r.ok() && rest.size() > limits_.max_request_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a request over ", limits_.max_request_bytes, " bytes"));
  }
  return r;
}

absl::StatusOr<std::optional<Request>> RequestDecoder::Parse(ByteReader& in) {
  uint8_t byte = 0;
  if (!in.Read(&byte)) return std::nullopt;
  std::optional<Command> command =
      dialect_ == Dialect::kValidated ? ValidatedCommand(byte) : UnvalidatedCommand(byte);
  if (!command.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown or unsupported command ", static_cast<int>(byte),
                     dialect_ == Dialect::kValidated ? " (torch >= 2.2 numbering)"
                                                     : " (torch <= 2.1 numbering)"));
  }
  Request r;
  r.command = *command;
  bool too_long = false;
  auto key = [&](std::vector<std::string>* keys) {
    keys->emplace_back();
    return in.ReadBytes(limits_.max_key_bytes, &keys->back(), &too_long);
  };
  auto value = [&] {
    r.values.emplace_back();
    return in.ReadBytes(limits_.max_value_bytes, &r.values.back(), &too_long);
  };
  auto count = [&](uint64_t* n) { return in.Read(n); };
  bool complete = true;
  uint64_t n = 0;
  switch (r.command) {
    case Command::kSet:
    case Command::kAppend:
    case Command::kQueuePush:
      complete = key(&r.keys) && value();
      break;
    case Command::kCompareSet:
      complete = key(&r.keys) && value() && value();
      break;
    case Command::kGet:
    case Command::kDeleteKey:
    case Command::kQueuePop:
    case Command::kQueueLen:
      complete = key(&r.keys);
      break;
    case Command::kAdd:
      complete = key(&r.keys) && in.Read(&r.amount);
      break;
    case Command::kPing:
      complete = in.Read(&r.nonce);
      break;
    case Command::kNumKeys:
    case Command::kCancelWait:
    case Command::kListKeys:
      break;
    case Command::kCheck:
    case Command::kWait:
    case Command::kMultiGet:
    case Command::kMultiSet:
      complete = count(&n);
      if (complete && n > limits_.max_keys) {
        return absl::InvalidArgumentError(
            absl::StrCat("a request naming ", n, " keys (at most ", limits_.max_keys, ")"));
      }
      for (uint64_t i = 0; complete && i < n; ++i) {
        complete = key(&r.keys) && (r.command != Command::kMultiSet || value());
      }
      break;
  }
  if (too_long) {
    return absl::InvalidArgumentError(absl::StrCat("a key over ", limits_.max_key_bytes,
                                                   " bytes or a value over ",
                                                   limits_.max_value_bytes, " bytes"));
  }
  if (!complete) return std::nullopt;
  return std::optional<Request>(std::move(r));
}

std::string EncodeBytes(absl::string_view value) {
  std::string out;
  AppendRaw<uint64_t>(&out, value.size());
  out.append(value.data(), value.size());
  return out;
}

std::string EncodeInt64(int64_t value) {
  std::string out;
  AppendRaw(&out, value);
  return out;
}

std::string EncodeUint32(uint32_t value) {
  std::string out;
  AppendRaw(&out, value);
  return out;
}

std::string EncodeCheck(bool ready) { return std::string(1, ready ? '\0' : '\1'); }
std::string EncodeStopWaiting() { return std::string(1, '\0'); }
std::string EncodeWaitCanceled() { return std::string(1, '\1'); }

std::string EncodeValidation() {
  std::string out(1, '\0');
  AppendRaw(&out, kValidationMagic);
  return out;
}

std::string EncodeRequest(Dialect dialect, const Request& r) {
  std::string out(1, static_cast<char>(CommandByte(dialect, r.command)));
  auto bytes = [&out](const std::string& s) { out += EncodeBytes(s); };
  switch (r.command) {
    case Command::kAdd:
      bytes(r.keys.at(0));
      AppendRaw(&out, r.amount);
      break;
    case Command::kPing:
      AppendRaw(&out, r.nonce);
      break;
    case Command::kCheck:
    case Command::kWait:
    case Command::kMultiGet:
    case Command::kMultiSet:
      AppendRaw<uint64_t>(&out, r.keys.size());
      for (size_t i = 0; i < r.keys.size(); ++i) {
        bytes(r.keys[i]);
        if (r.command == Command::kMultiSet) bytes(r.values.at(i));
      }
      break;
    default:
      for (const std::string& k : r.keys) bytes(k);
      for (const std::string& v : r.values) bytes(v);
  }
  return out;
}

}  // namespace ddprun::launcher::store
