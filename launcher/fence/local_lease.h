// LocalLease: the agent's side of the local lease (docs/design.md, "Fencing"). A memfd page
// (common/lease_page.h) holding valid_until, CLOCK_MONOTONIC ns, which the agent moves to
// `heard_from + length` each time the rendezvous server vouches for this node: `heard_from`
// is when the agent sent the heartbeat an ack answers (or when a Joined arrived), so a stale
// answer read after a freeze extends nothing. Workers map the page read-only through
// worker_fd() (DDPRUN_LEASE_FD) and commit nothing once now >= valid_until.
//
// Nothing revokes it: a node given up has heard nothing for the server's lease, longer than
// this one, so by then it has run out by itself.
//
// The length is below the server's own lease of this node (keep_alive_interval x
// keep_alive_max_attempt): the workers stop committing before the server may give the node
// up and hand its ranks to others (LeaseLength).
//
// Thread-safe: Renew and the reads are single atomic operations on the page (the
// rendezvous client renews from its own thread). Owns the memfd, the read-only descriptor and
// the mapping.
#ifndef DDPRUN_LAUNCHER_FENCE_LOCAL_LEASE_H_
#define DDPRUN_LAUNCHER_FENCE_LOCAL_LEASE_H_

#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "rendezvous/api/run_config.h"

namespace ddprun::launcher::fence {

// The local lease for the server's lease of `timeouts` (interval I, max_attempt A):
// I x A - I / 2, so that an answer every I keeps it valid with I / 2 to spare for the round trip,
// and it ends I / 2 before the server may give the node up. A = 1 has no room for both: I x 1.5
// (the workers never stall between heartbeats; the server may give the node up up to I / 2
// before they notice, so fencing needs keep_alive_max_attempt >= 2).
// With the liveness path on (timeouts.liveness), renewed by its acks every liveness interval:
// the earliest silence at which the server's detector may suspect the node
// (rendezvous::EarliestSuspicion: 232 ms at the defaults), so that it ends before the server's
// verdict, measured from the heartbeat's send time.
Duration LeaseLength(const rendezvous::RunTimeouts& timeouts);

class LocalLease {
 public:
  // A new page, never valid until the first Renew.
  static absl::StatusOr<std::unique_ptr<LocalLease>> Create(Duration length);
  ~LocalLease();
  LocalLease(const LocalLease&) = delete;
  LocalLease& operator=(const LocalLease&) = delete;

  // The server vouched for this node at or after `heard_from`: valid until heard_from + length,
  // never earlier than already (answers may come out of order across calls).
  void Renew(TimePoint heard_from);
  bool ValidAt(TimePoint now) const;
  int64_t valid_until_ns() const;

  // A read-only descriptor of the page, inherited by children (no close-on-exec): its number
  // goes into DDPRUN_LEASE_FD.
  int worker_fd() const { return read_fd_; }

 private:
  LocalLease(int fd, int read_fd, void* page, Duration length)
      : fd_(fd), read_fd_(read_fd), page_(page), length_(length) {}
  int64_t* word() const;

  int fd_;
  int read_fd_;
  void* page_;
  Duration length_;
};

}  // namespace ddprun::launcher::fence

#endif  // DDPRUN_LAUNCHER_FENCE_LOCAL_LEASE_H_
