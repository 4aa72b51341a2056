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
// The liveness path (docs/design.md §3a, "etcd"): the coordinator serves a LivenessReceiver on
// the address it reaches etcd from and publishes it at the liveness key (LivenessRecord, under
// its lease); every other agent heartbeats there (LivenessSender), its node index the create
// revision of its nodes/ key. The coordinator loses a node its receiver finds silent by the same
// rule as the built-in server (SilenceDecision, RunState::Silent); its own silence is found by
// its lease. A new coordinator serves and publishes its own; the agents follow the key.
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
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/executor.h"
#include "proto/etcd/kv.pb.h"
#include "proto/rendezvous.pb.h"
#include "rendezvous/api/event_delivery.h"
#include "rendezvous/api/rendezvous.h"
#include "rendezvous/api/run_config.h"
#include "rendezvous/core/outgoing.h"
#include "rendezvous/etcd/etcd_client.h"
#include "rendezvous/etcd/etcd_keys.h"
#include "rendezvous/liveness/silence_decision.h"

namespace ddprun {
class LoopThread;
}  // namespace ddprun

namespace ddprun::rendezvous {

class EtcdCoordinator;
class EtcdWatcher;
class LivenessReceiver;
class LivenessSender;

struct EtcdRendezvousOptions {
  EtcdOptions etcd;
  std::string prefix = "/ddprun";                 // keys live under <prefix>/<run_id>/
  RunTimeouts timeouts;                           // the first agent's become the run's
  std::chrono::milliseconds read_timeout{60000};  // how long to try reaching etcd at join
  std::chrono::milliseconds close_timeout{3000};  // bounds Leave()'s writes
  // What the local lease renews from (launcher/fence/local_lease.h); unset: nobody listens.
  // Each renewal of this agent's etcd lease, with when it was asked for (on the keep-alive
  // thread); and each liveness ack, as C10dSettings::on_liveness_ack (on the sender's thread).
  std::function<void(TimePoint heard_from)> on_server_heard;
  std::function<void(TimePoint heard_from, SilenceVerdict offered)> on_liveness_ack;
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
  // The slow-node judge's and the checkpoint advice's figures (an agent sends them every 5 s):
  // one put of this node's figures/ key, which the coordinator watches.
  void ReportFigures(const NodeFigures& figures) override;
  // What this node measured in the preflight: a put of its preflight/ key.
  void ReportPreflight(const PreflightReport& report) override;
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
  // A put of the advice key: the run's checkpoint interval, delivered when it changed.
  void OnAdvice(const std::string& value);
  // Puts `value` at `key` (one of this node's) under its lease, unless it is out.
  void PutUnderLease(const std::string& key, const std::string& value);
  // After the coordinator's state changed: serve and publish the liveness path, make the
  // receiver hear whom the run says, write what is pending, and schedule the next tick.
  void Coordinate();
  // Coordinator: the receiver once the run's settings are known (and published), its watched
  // nodes and their verdicts brought in line with the run.
  void ServeLiveness();
  void StopServingLiveness();
  // The receiver (of `generation`) found `conn` silent.
  void OnSilent(uint64_t generation, ConnId conn, Duration silent_for, size_t suspected,
                size_t watched);
  // A put of the liveness key (empty `value`: deleted, or none).
  void OnLivenessRecord(const std::string& value);
  // (Re)starts the sender to the published receiver, or stops it where this agent has none to
  // send to (it coordinates, is out, or nothing is published).
  void FollowLiveness();
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
  double advice_s_ = 0;  // the checkpoint interval delivered last
  TimePoint rejoin_deadline_{};
  std::string peer_host_;  // the address this agent reaches etcd from
  // The liveness path. As coordinator: the receiver and whom it hears (index -> conn, verdict).
  std::unique_ptr<LivenessReceiver> receiver_;
  uint64_t receiver_generation_ = 0;  // of its callbacks: a stopped receiver's are ignored
  std::string liveness_secret_;
  struct Heard {
    ConnId conn = 0;
    SilenceVerdict verdict = SilenceVerdict::kByLease;
  };
  std::map<uint32_t, Heard> watching_;
  bool liveness_refused_ = false;  // the receiver could not start this coordinatorship
  SilenceDecision silence_;
  // As any other agent: the published record, this node's index, the sender.
  std::string liveness_record_;  // serialized LivenessRecord; empty: none
  uint32_t liveness_index_ = 0;
  std::string sending_to_;  // the record the sender was started for
  std::unique_ptr<LivenessSender> sender_;

  // Keep-alive loop only.
  TimePoint last_renewed_;
  int64_t keepalive_lease_ = 0;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_ETCD_ETCD_RENDEZVOUS_H_
