// The wire protocol of c10d's TCPStore, as its clients speak it (torch 1.x to 2.11): requests
// decoded from a connection's bytes, and the replies' encodings. Pure: no sockets, no clock.
//
// A request is one command byte and its arguments: keys and values as a uint64 length and the
// bytes, counts and integers as raw host-order values (what torch's tcputil sends). The command
// numbers differ between two dialects, told apart by a connection's first bytes:
//   kValidated    torch >= 2.2: the client first sends VALIDATE (0) and the magic 0x3C85F7CE;
//                 then SET 1, COMPARE_SET 2, GET 3, ADD 4, CHECK 5, WAIT 6, GETNUMKEYS 7,
//                 DELETE_KEY 8, APPEND 9, MULTI_GET 10, MULTI_SET 11, CANCEL_WAIT 12, PING 13,
//                 QUEUE_PUSH 14, QUEUE_POP 15, QUEUE_LEN 16, LIST_KEYS 17.
//   kUnvalidated  torch <= 2.1 (1.13 included): no handshake; SET 0, COMPARE_SET 1, GET 2,
//                 ADD 3, CHECK 4, WAIT 5, GETNUMKEYS 6, WATCH_KEY 7 (refused: see below),
//                 DELETE_KEY 8, and from 2.0 APPEND 9, MULTI_GET 10, MULTI_SET 11, CANCEL_WAIT 12.
// WATCH_KEY (torch <= 2.0's watch_key callbacks, which nothing in torch's launch path uses) is
// refused: the connection is closed.
//
// Thread-compatible: a RequestDecoder belongs to one connection.
#ifndef DDPRUN_LAUNCHER_STORE_STORE_PROTOCOL_H_
#define DDPRUN_LAUNCHER_STORE_STORE_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddprun::launcher::store {

inline constexpr uint32_t kValidationMagic = 0x3C85F7CE;

enum class Dialect { kUndecided, kUnvalidated, kValidated };

enum class Command {
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kNumKeys,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kQueuePush,
  kQueuePop,
  kQueueLen,
  kListKeys,
};

struct Request {
  Command command = Command::kSet;
  std::vector<std::string> keys;
  // kSet, kAppend, kQueuePush: one; kCompareSet: the expected and the desired value; kMultiSet:
  // one per key.
  std::vector<std::string> values;
  int64_t amount = 0;  // kAdd
  uint32_t nonce = 0;  // kPing
};

// What one connection may send: a request beyond them closes the connection, so a connection's
// buffered input never exceeds max_request_bytes (plus one read).
struct ProtocolLimits {
  size_t max_key_bytes = 64 * 1024;
  size_t max_value_bytes = 64 * 1024 * 1024;
  size_t max_keys = 128 * 1024;  // in one CHECK, WAIT, MULTI_GET or MULTI_SET
  size_t max_request_bytes = 128 * 1024 * 1024;
};

class RequestDecoder {
 public:
  explicit RequestDecoder(ProtocolLimits limits = {}) : limits_(limits) {}

  // Bytes received on the connection, in order.
  void Append(absl::string_view bytes);
  // The next whole request; nullopt when more bytes are needed. kInvalidArgument when the bytes
  // are not the protocol (or break a limit): the connection must be closed.
  absl::StatusOr<std::optional<Request>> Next();

  Dialect dialect() const { return dialect_; }
  size_t buffered() const { return buffer_.size() - consumed_; }

 private:
  absl::StatusOr<std::optional<Request>> Parse(class ByteReader& in);

  ProtocolLimits limits_;
  Dialect dialect_ = Dialect::kUndecided;
  std::string buffer_;
  size_t consumed_ = 0;
};

// Reply encodings (identical in both dialects).
std::string EncodeBytes(absl::string_view value);  // uint64 length, then the bytes
std::string EncodeInt64(int64_t value);
std::string EncodeUint32(uint32_t value);
std::string EncodeCheck(bool ready);  // READY 0, NOT_READY 1
std::string EncodeStopWaiting();      // STOP_WAITING 0
std::string EncodeWaitCanceled();     // WAIT_CANCELED 1

// What a client sends, for the tests: the request `r` in `dialect` (kUndecided: kValidated's
// numbering without the handshake).
std::string EncodeRequest(Dialect dialect, const Request& r);
std::string EncodeValidation();

}  // namespace ddprun::launcher::store

#endif  // DDPRUN_LAUNCHER_STORE_STORE_PROTOCOL_H_
