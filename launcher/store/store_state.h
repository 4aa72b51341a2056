// The contents of a c10d TCPStore and the semantics of its commands: keys and values, queues,
// and the connections blocked in WAIT. Pure: requests in, replies out (as bytes, addressed to a
// connection: a SET may wake other connections' waits). The semantics follow torch 2.11's libuv
// server, which its classic server shares except where noted in the .cc.
//
// Thread-compatible: one thread (the store server's) owns it.
#ifndef DDPRUN_LAUNCHER_STORE_STORE_STATE_H_
#define DDPRUN_LAUNCHER_STORE_STORE_STATE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "launcher/store/store_protocol.h"

namespace ddprun::launcher::store {

class StoreState {
 public:
  using ConnectionId = uint64_t;
  struct Reply {
    ConnectionId to = 0;
    std::string bytes;
  };

  // Serves `request` from connection `from`; appends the replies it causes to `replies`.
  // kInvalidArgument when it cannot be served (an ADD to a value that is not an integer): the
  // connection must be closed, as torch's servers do.
  absl::Status Apply(ConnectionId from, const Request& request, std::vector<Reply>* replies);
  // The connection is gone: its wait, if any, with it.
  void Forget(ConnectionId connection);
  // Every key and queue goes (a fresh store for a new round); blocked waits stay blocked.
  void Clear();

  size_t num_keys() const { return data_.size(); }
  size_t num_waiting() const { return awaited_.size(); }

 private:
  bool Present(const std::string& key) const;
  void Wake(const std::string& key, bool just_one, std::vector<Reply>* replies);
  void Wait(ConnectionId from, const std::vector<std::string>& keys, std::vector<Reply>* replies);

  // The commands with more than a line of work; each returns its reply's bytes.
  std::string CompareSet(const std::string& key, const std::string& expected,
                         const std::string& desired);
  std::string MultiGet(const std::vector<std::string>& keys) const;
  absl::StatusOr<std::string> Add(const std::string& key, int64_t amount);
  std::string QueuePop(const std::string& key);
  std::string ListKeys() const;

  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::unordered_map<std::string, std::vector<ConnectionId>> waiting_;  // key -> waiters
  std::map<ConnectionId, size_t> awaited_;  // waiter -> keys it still waits for
};

}  // namespace ddprun::launcher::store

#endif  // DDPRUN_LAUNCHER_STORE_STORE_STATE_H_
