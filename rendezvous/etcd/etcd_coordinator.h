// EtcdCoordinator: the run's RunState driven by what etcd holds, on the one agent that won the
// election for the run's coordinator key. It turns etcd watch events into state-machine inputs
// (a node key created: Join; deleted, i.e. its lease expired or was revoked: StreamBroken; a
// status key: GroupStatus or Leave; time: Tick) and the state machine's outbox into one etcd
// transaction writing the agents' inboxes and the run's durable state, guarded by this agent
// still holding the coordinator key.
//
// A coordinator that takes over rebuilds the RunState from a range read of the run's keys (the
// durable state plus the nodes alive) and applies the status records written after the old
// coordinator's last state, so the run continues where it stopped. A state none of whose nodes
// is alive any more is an earlier job's (all its agents died): it is ignored.
//
// No I/O of its own (the etcd rendezvous does the reads and writes); not thread-safe.
#ifndef DDPRUN_RENDEZVOUS_ETCD_ETCD_COORDINATOR_H_
#define DDPRUN_RENDEZVOUS_ETCD_ETCD_COORDINATOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "proto/etcd/kv.pb.h"
#include "proto/etcd/records.pb.h"
#include "proto/etcd/rpc.pb.h"
#include "rendezvous/core/run_state.h"
#include "rendezvous/etcd/etcd_keys.h"

namespace ddprun::rendezvous {

class EtcdCoordinator {
 public:
  // `epoch` names this coordinatorship (node id and lease) in the inbox records it writes;
  // `lease` is that lease, under which the judges' report is written.
  EtcdCoordinator(EtcdKeys keys, std::string self_node_id, std::string epoch, int64_t lease);

  // Builds the run from every key of the run as read at `revision`.
  void Rebuild(const std::vector<mvccpb::KeyValue>& kvs, int64_t revision, TimePoint now);
  // A watch event of the run's keys; events at or before the rebuild revision are ignored.
  void OnEvent(const mvccpb::Event& event, TimePoint now);
  // This agent leaves: applied directly, since its leave record goes with its lease.
  void LocalLeave(const std::string& reason, TimePoint now);
  // The run's timers, and the judges' report when one is due.
  void Tick(TimePoint now);
  std::optional<TimePoint> NextDeadline() const;

  // The transaction that writes what changed since the last confirmed write; nullopt when
  // nothing did. WriteConfirmed() once etcd applied it; when the transaction's compare failed,
  // this agent is no longer the coordinator.
  std::optional<etcdserverpb::TxnRequest> PendingWrite() const;
  void WriteConfirmed();
  bool run_closed() const { return run_ != nullptr && run_->phase() == RunPhase::kClosed; }

  // The liveness path (docs/design.md §3a, "etcd"): this agent serves the receiver while it
  // coordinates. A node the receiver is to hear:
  struct WatchedNode {
    uint32_t index = 0;  // its nodes/ key's create revision, low 32 bits (the packet's node index)
    ConnId conn = 0;     // the receiver's token for it
    SilenceVerdict verdict = SilenceVerdict::kByLease;  // who the run lets decide its loss
  };
  // The run's liveness settings when its path is on; nullopt before any join, or when off.
  std::optional<LivenessSettings> liveness() const;
  // Every node of the run but this agent's own (its silence is for its lease to find: nobody
  // else would hear it), with the verdict the run offers it now.
  std::vector<WatchedNode> LivenessWatches() const;
  SilenceVerdict SilenceVerdictOf(ConnId conn) const;
  // The receiver's suspicion of `conn`, confirmed (SilenceDecision): its node is lost at once
  // (RunState::Silent) and told so in its inbox. Returns the node's id ("" if unknown).
  std::string Silent(ConnId conn, Duration silent_for, TimePoint now);
  // Puts `record` (a LivenessRecord) at the liveness key under `lease` with the next write.
  void PublishLiveness(std::string record, int64_t lease);

  // What the run has to say in the coordinator's log since the last call: the slow-node judge's
  // verdicts and the preflight's (as the gRPC server logs them).
  struct LogLine {
    bool warning = false;
    std::string text;
  };
  std::vector<LogLine> TakeLog();

 private:
  void Join(const mvccpb::KeyValue& kv, TimePoint now, Outbox* out);
  void ApplyAgentRecord(const std::string& node_id, const std::string& value, TimePoint now,
                        Outbox* out);
  // A figures/ key: compute times to the slow-node judge (which may evict the node: `out`),
  // checkpoint costs to the advice.
  void ApplyFigures(ConnId conn, const std::string& value, TimePoint now, Outbox* out);
  // The advice key is to be written when the run's advised interval moved by 5 % or more.
  void NoteAdvice();
  // When a report is due and kReportInterval passed since the last: the report key is to be
  // written if the judges' report changed. Every node's figures arrive every 5 s: the report is
  // built once for all of them (from Tick, which NextDeadline brings).
  void NoteReport(TimePoint now);
  void Apply(const Outbox& out);

  const EtcdKeys keys_;
  const std::string self_;
  const std::string epoch_;
  const int64_t lease_;
  std::unique_ptr<RunState> run_;
  ddprun::proto::Join first_;  // the run's creator
  int64_t rebuilt_at_ = 0;
  int64_t applied_revision_ = 0;
  ConnId next_conn_ = 1;
  std::map<std::string, ConnId> conn_by_node_;
  std::map<ConnId, std::string> node_by_conn_;
  std::map<ConnId, uint32_t> liveness_index_;  // WatchedNode::index of each conn
  std::set<std::string> closed_nodes_;
  struct Inbox {
    int64_t next_seq = 0;                               // of the next message
    std::vector<ddprun::proto::ServerMessage> pending;  // not yet confirmed written
  };
  std::map<std::string, Inbox> inboxes_;
  bool dirty_ = false;             // the state changed since the last confirmed write
  bool drop_closed_mark_ = false;  // a stale run's `closed` key is to be deleted
  struct Publication {
    std::string record;
    int64_t lease = 0;
  };
  std::optional<Publication> liveness_record_;  // not yet confirmed written
  double advice_written_s_ = 0;                 // the interval the advice key holds (0: none)
  std::optional<double> advice_pending_s_;      // to write; not yet confirmed
  std::string report_written_;                  // the JudgesReport the report key holds
  std::optional<std::string> report_pending_;   // to write; not yet confirmed
  bool report_due_ = false;  // figures arrived, or the run changed, since the last NoteReport
  TimePoint report_noted_at_{};
  std::vector<LogLine> log_;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_ETCD_ETCD_COORDINATOR_H_
