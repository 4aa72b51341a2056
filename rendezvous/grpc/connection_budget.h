// ConnectionBudget: which accepted connections the rendezvous server keeps, shared fairly among
// source addresses so that one abusive address never locks the others out (docs/design.md §11).
//
// Per source (an IPv4 address, or an IPv6 /64): at most `max_new_per_source` connections kept
// within any `window` (the handshake timeout: it bounds the connections that have not
// authenticated), and at most `max_open_per_source` open at once. Over all sources: at most
// `max_open_total` open (the descriptors the process may use for connections, its limit less a
// headroom); at that bound a source that holds its fair share (max_open_total over the sources
// holding connections) or more is refused, and a source holding less still gets in.
// A refused connection is closed at once by the caller: nothing waits in the listen queue, so an
// address over its budget delays nobody else.
//
// Whether a kept connection is still open is asked of `is_open` (the server hands connections to
// gRPC, which closes them without telling): the accept loop checks that the descriptor still
// refers to the same socket (its inode). A descriptor number handed out again by the kernel
// means the old connection is closed.
//
// Pure apart from `is_open`; not thread-safe (the accept thread owns it).
#ifndef DDPRUN_RENDEZVOUS_GRPC_CONNECTION_BUDGET_H_
#define DDPRUN_RENDEZVOUS_GRPC_CONNECTION_BUDGET_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "common/clock.h"

namespace ddprun::rendezvous {

struct ConnectionBudgetOptions {
  Duration window = std::chrono::seconds(10);
  int max_new_per_source = 1024;
  int max_open_per_source = 32768;
  int max_open_total = 65536;
};

class ConnectionBudget {
 public:
  // Whether descriptor `fd` still holds the socket of inode `inode`.
  using IsOpen = std::function<bool(int fd, uint64_t inode)>;
  enum class Verdict { kKeep, kTooManyNew, kTooManyOpen, kOverFairShare };

  ConnectionBudget(ConnectionBudgetOptions options, IsOpen is_open);

  // A connection from `source` accepted as `fd` (socket inode `inode`): kept (and counted until
  // it is found closed) or refused (not counted: the caller closes it).
  Verdict Offer(const std::string& source, int fd, uint64_t inode, TimePoint now);

  // Connections kept and not yet found closed.
  int open() const { return static_cast<int>(by_fd_.size()); }
  int open_from(const std::string& source) const;
  size_t num_sources() const { return sources_.size(); }

 private:
  struct Kept {
    uint64_t inode = 0;
    std::string source;
  };
  struct Source {
    std::deque<TimePoint> recent;  // kept within the window
    std::unordered_set<int> fds;   // kept and open, as far as known
    TimePoint swept{};
  };
  void Forget(int fd);
  // Drops the source's connections found closed (at most every kSweepInterval per source).
  void Sweep(Source& source, TimePoint now);
  void SweepAll(TimePoint now);
  // Forgets sources with nothing open and nothing recent.
  void Prune(TimePoint now);
  int active_sources() const;

  const ConnectionBudgetOptions options_;
  const IsOpen is_open_;
  std::unordered_map<int, Kept> by_fd_;
  std::unordered_map<std::string, Source> sources_;
  TimePoint swept_all_{};
  uint64_t offers_ = 0;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_CONNECTION_BUDGET_H_
