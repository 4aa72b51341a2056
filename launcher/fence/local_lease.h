// LocalLease: the agent's side of the local lease (docs/design.md, "Fencing"). A memfd page
// (common/lease_page.h) holding valid_until, CLOCK_MONOTONIC ns, which the agent moves to
// `heard_from + length` each time the rendezvous server vouches for this node: `heard_from`
// is when the agent sent the heartbeat an ack answers (or when a Joined arrived), so a stale
// answer read after a freeze extends nothing. Workers map the page read-only through
// worker_fd() (DDPRUN_LEASE_FD) and commit nothing once now >= valid_until.
//
// Two paths vouch for the node: the gRPC stream's answers, and, with the liveness path on, its
// acks every liveness interval. Each ack says who the server lets decide the node's loss when it
// falls silent (rendezvous::SilenceVerdict). The lease follows the stream, with its length,
// until an ack offers kBySilence; from then on only liveness acks renew it, with the short
// length (the stream's would mask it, since a renewal keeps the latest end), until an ack says
// kByLease again (no spare is left to take the node's place): then it follows the stream again
// from its latest answer. So an agent whose liveness datagrams never get through (an older
// server, UDP filtered), or whose server keeps the lease's verdict, keeps the stream's lease
// instead of one that lapses between heartbeats.
//
// Nothing revokes it: a node given up has heard nothing for the server's lease, longer than
// this one, so by then it has run out by itself.
//
// The length is below the server's own lease of this node (keep_alive_interval x
// keep_alive_max_attempt): the workers stop committing before the server may give the node
// up and hand its ranks to others (LeaseLength).
//
// Thread-safe: the reads are single atomic operations on the page; Renew takes mu_ (the
// rendezvous client's loop and the liveness sender's thread both renew). Owns the memfd, the
// read-only descriptor and the mapping.
#ifndef DDPRUN_LAUNCHER_FENCE_LOCAL_LEASE_H_
#define DDPRUN_LAUNCHER_FENCE_LOCAL_LEASE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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
// The first of them: the lease while only the stream vouches for the node.
Duration StreamLeaseLength(const rendezvous::RunTimeouts& timeouts);

// Which sign of life of the server renews the lease.
enum class Voucher {
  kStream,             // an answer on the gRPC stream (a heartbeat's ack, a Joined)
  kLivenessBySilence,  // a liveness ack offering kBySilence: the server's detector may decide
  kLivenessByLease,    // a liveness ack offering kByLease: the server's lease decides
};

class LocalLease {
 public:
  // A new page, never valid until the first Renew. `liveness_length`: the length once liveness
  // acks vouch (unset: no liveness path, `stream_length` throughout).
  static absl::StatusOr<std::unique_ptr<LocalLease>> Create(
      Duration stream_length, std::optional<Duration> liveness_length = std::nullopt);
  ~LocalLease();
  LocalLease(const LocalLease&) = delete;
  LocalLease& operator=(const LocalLease&) = delete;

  // The server vouched for this node at or after `heard_from`, through `by`: valid until
  // heard_from + that path's length, never earlier than already (answers may come out of order
  // across calls), except at the switch to the liveness acks, which replaces the stream's
  // longer end. A stream answer while the liveness acks rule renews nothing (it is remembered
  // for the switch back); a kByLease ack renews nothing but switches back.
  void Renew(TimePoint heard_from, Voucher by = Voucher::kStream) ABSL_LOCKS_EXCLUDED(mu_);
  bool ValidAt(TimePoint now) const;
  int64_t valid_until_ns() const;

  // A read-only descriptor of the page, inherited by children (no close-on-exec): its number
  // goes into DDPRUN_LEASE_FD.
  int worker_fd() const { return read_fd_; }

 private:
  LocalLease(int fd, int read_fd, void* page, Duration stream_length,
             std::optional<Duration> liveness_length)
      : fd_(fd),
        read_fd_(read_fd),
        page_(page),
        stream_length_(stream_length),
        liveness_length_(liveness_length) {}
  int64_t* word() const;
  // valid_until := `next` if later (or always, with `replace`). Under mu_: the two paths renew
  // from different threads, and the switch between them must not interleave with a renewal.
  void MoveEnd(int64_t next, bool replace) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  int fd_;
  int read_fd_;
  void* page_;
  const Duration stream_length_;
  const std::optional<Duration> liveness_length_;
  absl::Mutex mu_;
  enum class Follows { kStream, kLiveness };
  Follows follows_ ABSL_GUARDED_BY(mu_) = Follows::kStream;
  std::optional<TimePoint> stream_heard_ ABSL_GUARDED_BY(mu_);  // the latest stream answer
};

}  // namespace ddprun::launcher::fence

#endif  // DDPRUN_LAUNCHER_FENCE_LOCAL_LEASE_H_
