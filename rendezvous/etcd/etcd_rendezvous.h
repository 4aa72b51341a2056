// EtcdRendezvous: the agent's rendezvous over an etcd v3 cluster (--rdzv-backend=etcd), with the
// semantics of the built-in server because it runs the same RunState (etcd_coordinator.h).
//
// Every agent: grants a lease of the run's lease time and keeps it alive every
// keep_alive_interval; puts its join under nodes/<node_id> with that lease; watches the run's
// keys from the revision of that put (resumed after reconnects: etcd_watcher.h); reads its
// messages from inbox/<node_id>; writes group status and leave to status/<node_id>. One agent at
// a time is the coordinator: the one whose transaction created the coordinator key (under its
// lease); when that key goes (the coordinator left or died), the others race to create it again
// and the winner rebuilds the run from etcd. Keys: etcd_keys.h.
//
// Failures: no etcd member reachable within read_timeout at join, or the lease not renewed for
// its whole TTL later (the cluster is gone, or this agent was cut off), close the rendezvous
// with kUnavailable naming the endpoints; a member dying is not a failure (failover).
//
// Threading: an internal LoopThread owns all state and makes the (blocking, bounded) etcd calls;
// a second one renews the lease so that slow calls never delay it; the watcher has its own
// thread. Events reach the agent on its Executor. After Leave() returns no event follows.
#ifndef DDPRUN_RENDEZVOUS_ETCD_ETCD_RENDEZVOUS_H_
#define DDPRUN_RENDEZVOUS_ETCD_ETCD_RENDEZVOUS_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/executor.h"
#include "proto/etcd/kv.pb.h"
#include "rendezvous/api/event_delivery.h"
#include "rendezvous/api/rendezvous.h"
#include "rendezvous/api/run_config.h"
#include "rendezvous/etcd/etcd_client.h"
#include "rendezvous/etcd/etcd_keys.h"

namespace ddprun {
class LoopThread;
}  // namespace ddprun

namespace ddprun::rendezvous {

class EtcdCoordinator;
class EtcdWatcher;

struct EtcdRendezvousOptions {
  EtcdOptions etcd;
  std::string prefix = "/ddprun";                 // keys live under <prefix>/<run_id>/
  RunTimeouts timeouts;                           // the first agent's become the run's
  std::chrono::milliseconds read_timeout{60000};  // how long to try reaching etcd at join
  std::chrono::milliseconds close_timeout{3000};  // bounds Leave()'s writes
};

class EtcdRendezvous final : public Rendezvous {
 public:
  static absl::StatusOr<std::unique_ptr<EtcdRendezvous>> Create(EtcdRendezvousOptions options,
                                                                Executor* executor);
  ~EtcdRendezvous() override;  // without Leave(): stops, and the lease expires (as a crash)

  void Join(const NodeInfo& node, RendezvousEvents* events) override;
  void ReportGroupState(int64_t round, GroupState state,
                        const std::optional<WorkerFailure>& failure) override;
  void ReportProgress(const std::vector<RankProgress>& progress, bool urgent) override;
  void Leave(const std::string& reason) override;
  // Withdraws as Leave does (the leave applied, the lease revoked), but keeps the client: StepIn
  // registers again as a new node within join_timeout, as after a lost lease.
  void StepOut(const std::string& reason) override;
  void StepIn() override;

 private:
  EtcdRendezvous(EtcdRendezvousOptions options, std::unique_ptr<EtcdClient> client,
                 Executor* executor);
  // Internal loop only.
  void Start();
  // Grants a lease, writes this node's key under it, starts the keep-alive and the watch, and
  // runs for coordinator; `budget` bounds the calls.
  absl::Status Register(Duration budget);
  // The lease is gone: the run has given this node up. A fixed world closes (exit 3); an elastic
  // one stops its workers and registers again as a new node until join_timeout.
  void LoseLease(const absl::Status& why);
  void TryRejoin();
  void TryElect();
  void BecomeCoordinator(int64_t revision);
  void OnEvents(const std::vector<mvccpb::Event>& events);
  void OnInbox(const std::string& value);
  // Writes what the coordinator has pending; the error when etcd did not take it (kept pending).
  absl::Status Flush(std::optional<Duration> budget = std::nullopt);
  void LeaveNow(const std::string& reason);
  // This node's leave where the run sees it (applied by the coordinator, or put for it), then
  // its keys gone with its lease; the calls bounded by `deadline`.
  void Withdraw(const std::string& reason, TimePoint deadline);
  // Left, or stepped out: nothing the run says concerns this node.
  bool Out() const { return left_ || stepped_out_; }
  void ScheduleTick();
  void StopBackground();
  // Keep-alive loop only. One chain per lease: a chain whose lease was replaced (a rejoin)
  // ends instead of renewing, or losing, the new one.
  void KeepAlive(int64_t lease);

  const EtcdRendezvousOptions options_;
  std::unique_ptr<EtcdClient> client_;
  // Internal loop only, but for Silence() (Leave, the destructor: on the caller's thread).
  EventDelivery events_;
  std::unique_ptr<LoopThread> loop_;
  std::unique_ptr<LoopThread> keepalive_loop_;

  // Internal loop only.
  std::optional<EtcdKeys> keys_;
  NodeInfo node_;
  int64_t lease_ = 0;
  int64_t ttl_seconds_ = 0;
  std::unique_ptr<EtcdWatcher> watcher_;
  std::unique_ptr<EtcdCoordinator> coordinator_;
  TimePoint last_progress_put_{};
  bool left_ = false;
  bool stepped_out_ = false;  // between StepOut and StepIn
  bool lease_lost_ = false;
  uint64_t tick_timer_ = 0;
  std::string inbox_epoch_;
  int64_t inbox_next_seq_ = 0;
  TimePoint rejoin_deadline_{};

  // Keep-alive loop only.
  TimePoint last_renewed_;
  int64_t keepalive_lease_ = 0;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_ETCD_ETCD_RENDEZVOUS_H_
