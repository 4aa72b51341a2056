// The agent's c10d store: a TCPStore server (store_protocol.h) that the agent hosts for its
// workers, as torchrun 2.x's agent does (TORCHELASTIC_USE_AGENT_STORE=True), so the store
// outlives every worker of a round and ranks may exit in any order.
//
// Start() binds and listens before it returns: the port is this process's from then on (no
// other user can bind a port a socket listens on, SO_REUSEADDR or not), and workers started
// after it find the store there. Dual-stack (the IPv6 wildcard, which takes IPv4 too) where
// the host has IPv6, else the IPv4 wildcard.
//
// Threading: the server owns one thread, which runs its EventLoop and owns every connection and
// the StoreState. The public methods may be called from any thread. Memory: per connection at
// most one request being received (ProtocolLimits) and, before the connection stops being read,
// max_pending_reply bytes of replies it has not taken yet.
#ifndef DDPRUN_LAUNCHER_STORE_STORE_SERVER_H_
#define DDPRUN_LAUNCHER_STORE_STORE_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/event_loop.h"
#include "launcher/store/store_protocol.h"
#include "launcher/store/store_state.h"

namespace ddprun::launcher::store {

struct StoreServerOptions {
  int port = 0;  // 0: any free port
  ProtocolLimits limits;
  size_t max_pending_reply = 64 * 1024 * 1024;
  // Descriptors kept for the agent's own use (its workers' pipes and terminals, control
  // connections, log files): connections beyond the descriptor limit less this are closed at
  // once, so clients that hold connections open cannot starve the agent of descriptors.
  int reserved_descriptors = 512;
};

class StoreServer {
 public:
  // kUnavailable naming the port when it cannot be bound (in use); kInternal otherwise.
  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(const StoreServerOptions& options);
  // Stops the thread, then closes every connection and the listening socket.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }
  // Empties the store (a new round's workers must not read the last round's keys); returns once
  // done, so that a worker started afterwards sees it empty.
  void Clear();

 private:
  struct Connection;
  StoreServer(int listen_fd, int port, const StoreServerOptions& options);
  void Accept();
  void OnEvents(StoreState::ConnectionId id, uint32_t events);
  // Decodes and serves what `c` sent, until its replies pile up; false: close it.
  bool Serve(Connection* c);
  bool Flush(Connection* c);
  void Watch(Connection* c);
  void Close(StoreState::ConnectionId id, const std::string& why);

  const StoreServerOptions options_;
  const int listen_fd_;
  const int port_;
  EventLoop loop_;
  // Owned by the loop's thread.
  StoreState state_;
  std::map<StoreState::ConnectionId, std::unique_ptr<Connection>> connections_;
  StoreState::ConnectionId next_id_ = 1;
  int warnings_left_ = 20;      // bad clients are logged, a few times, not without end
  size_t max_connections_ = 0;  // from the descriptor limit at start, less the reserve
  uint64_t refused_ = 0;        // connections closed at once for want of descriptors
  std::thread thread_;
};

}  // namespace ddprun::launcher::store

#endif  // DDPRUN_LAUNCHER_STORE_STORE_SERVER_H_
