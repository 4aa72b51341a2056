#include "rendezvous/etcd/etcd_coordinator.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rendezvous/grpc/preflight_convert.h"
#include "rendezvous/grpc/proto_convert.h"

namespace ddprun::rendezvous {
namespace {

// The least relative move of the advised interval that is written to the advice key.
constexpr double kAdviceMove = 0.05;
// How often the judges' report may be rewritten: every node reports its figures every 5 s.
constexpr Duration kReportInterval = std::chrono::seconds(5);

using ddprun::proto::etcd::AgentRecord;
using ddprun::proto::etcd::InboxRecord;
using ddprun::proto::etcd::JudgesReport;
using ddprun::proto::etcd::NodeRecord;
using ddprun::proto::etcd::RunSnapshotRecord;

RunSnapshot FromRecord(const RunSnapshotRecord& r) {
  RunSnapshot s;
  s.round = r.round();
  s.phase = static_cast<RunPhase>(r.phase());
  s.restarts_used = r.restarts_used();
  s.succeeded_in_round = r.succeeded_in_round();
  s.crash_loop_signature = r.crash_loop_signature();
  s.spares_used = r.spares_used();
  for (const auto& m : r.members()) {
    s.members.push_back({m.node_id(), m.group_rank(), m.in_round(), m.spare(), m.set_aside()});
  }
  if (r.has_preflight_median()) {
    const auto& p = r.preflight_median();
    s.preflight_median = PreflightFigures{p.cpu_gflops(), p.send_mbps(), p.recv_mbps(), p.rtt_ms()};
  }
  if (r.has_preflight()) s.preflight = FromProto(r.preflight());
  s.close_status = absl::Status(static_cast<absl::StatusCode>(r.close_code()), r.close_message());
  return s;
}

// True when no node the snapshot knows (member, waiting or closed) still has a live key.
bool IsStale(const RunSnapshotRecord& snapshot, const std::vector<const mvccpb::KeyValue*>& nodes,
             const EtcdKeys& keys) {
  std::set<std::string> alive;
  for (const mvccpb::KeyValue* kv : nodes) {
    std::string id;
    if (keys.Parse(kv->key(), "nodes", &id)) alive.insert(id);
  }
  for (const auto& m : snapshot.members()) {
    if (alive.count(m.node_id()) > 0) return false;
  }
  for (const auto& id : snapshot.closed_nodes()) {
    if (alive.count(id) > 0) return false;
  }
  return true;
}

// The judges' part of the run's status: the members the slow-node judge has figures for, and
// the checkpoint advice.
JudgesReport JudgesReportOf(const RunStatus& s) {
  JudgesReport r;
  for (const MemberStatus& m : s.members) {
    if (m.compute_ms <= 0) continue;
    ddprun::proto::Member* p = r.add_members();
    p->set_node_id(m.node_id);
    p->set_compute_ms(m.compute_ms);
    p->set_compute_ratio(m.compute_ratio);
    p->set_slow(m.slow);
  }
  if (s.checkpoint_advice) *r.mutable_checkpoint_advice() = ToProto(*s.checkpoint_advice);
  return r;
}

}  // namespace

EtcdCoordinator::EtcdCoordinator(EtcdKeys keys, std::string self_node_id, std::string epoch,
                                 int64_t lease)
    : keys_(std::move(keys)),
      self_(std::move(self_node_id)),
      epoch_(std::move(epoch)),
      lease_(lease) {}

void EtcdCoordinator::Rebuild(const std::vector<mvccpb::KeyValue>& kvs, int64_t revision,
                              TimePoint now) {
  rebuilt_at_ = applied_revision_ = revision;
  std::optional<RunSnapshotRecord> snapshot;
  std::vector<const mvccpb::KeyValue*> nodes, statuses;
  for (const mvccpb::KeyValue& kv : kvs) {
    std::string id;
    if (kv.key() == keys_.state()) {
      RunSnapshotRecord r;
      if (r.ParseFromString(kv.value())) snapshot = std::move(r);
    } else if (keys_.Parse(kv.key(), "nodes", &id)) {
      nodes.push_back(&kv);
    } else if (keys_.Parse(kv.key(), "status", &id)) {
      statuses.push_back(&kv);
    }
  }
  std::sort(nodes.begin(), nodes.end(), [](const auto* a, const auto* b) {
    return a->create_revision() < b->create_revision();
  });
  if (snapshot && IsStale(*snapshot, nodes, keys_)) {
    // Left by an earlier job with this run id whose agents all died (nobody cleaned up): no
    // agent of it is alive, so it is over. This job starts afresh rather than inherit its
    // spent budget or its closed state; the first write removes its `closed` mark.
    snapshot.reset();
    drop_closed_mark_ = true;
  }
  if (snapshot) {
    first_ = snapshot->first();
    closed_nodes_.insert(snapshot->closed_nodes().begin(), snapshot->closed_nodes().end());
  } else if (!nodes.empty()) {
    NodeRecord r;
    if (r.ParseFromString(nodes.front()->value())) first_ = r.join();
  }
  if (first_.run_id().empty()) return;  // nobody has joined: the first node key creates it
  run_ = std::make_unique<RunState>(FromProto(first_, RunTimeouts{}, ""), now);
  Outbox out;
  for (const mvccpb::KeyValue* kv : nodes) Join(*kv, now, &out);
  if (!snapshot) {
    Apply(out);  // a fresh run: the joins' messages stand
    dirty_ = true;
    return;
  }
  // The messages of the joins were sent by earlier coordinators, and their lines logged (a
  // preflight the joins started is Restore's to drop); Restore says what changes.
  out.clear();
  run_->TakeLog();
  run_->Restore(FromRecord(*snapshot), now, &out);
  Apply(out);
  // What the agents reported after the old coordinator's last write.
  std::sort(statuses.begin(), statuses.end(),
            [](const auto* a, const auto* b) { return a->mod_revision() < b->mod_revision(); });
  for (const mvccpb::KeyValue* kv : statuses) {
    if (kv->mod_revision() <= snapshot->applied_revision()) continue;
    std::string id;
    keys_.Parse(kv->key(), "status", &id);
    Outbox more;
    ApplyAgentRecord(id, kv->value(), now, &more);
    Apply(more);
  }
  dirty_ = true;
}

void EtcdCoordinator::Join(const mvccpb::KeyValue& kv, TimePoint now, Outbox* out) {
  std::string id;
  keys_.Parse(kv.key(), "nodes", &id);
  if (conn_by_node_.count(id) > 0 || closed_nodes_.count(id) > 0) return;
  NodeRecord r;
  if (!r.ParseFromString(kv.value()) || r.join().node_id() != id) return;  // not ours: ignore
  const JoinRequest request = FromProto(r.join(), RunTimeouts{}, r.peer_host());
  if (run_ == nullptr) {
    first_ = r.join();
    run_ = std::make_unique<RunState>(request, now);
  }
  const ConnId conn = next_conn_++;
  conn_by_node_[id] = conn;
  node_by_conn_[conn] = id;
  liveness_index_[conn] = static_cast<uint32_t>(kv.create_revision());
  run_->Join(conn, request, now, out);
}

void EtcdCoordinator::ApplyAgentRecord(const std::string& node_id, const std::string& value,
                                       TimePoint now, Outbox* out) {
  auto it = conn_by_node_.find(node_id);
  AgentRecord r;
  if (it == conn_by_node_.end() || run_ == nullptr || !r.ParseFromString(value)) return;
  if (r.has_leave()) {
    run_->Leave(it->second, r.leave().reason(), now, out);
  } else if (r.has_group_status()) {
    const auto& g = r.group_status();
    std::optional<WorkerFailure> failure;
    if (g.has_failure()) failure = FromProto(g.failure());
    GroupState state = GroupState::kRunning;
    if (g.state() == ddprun::proto::GroupStatus::SUCCEEDED) state = GroupState::kSucceeded;
    if (g.state() == ddprun::proto::GroupStatus::FAILED) state = GroupState::kFailed;
    // A stale round is kAborted and ignored, as by the built-in server.
    run_->GroupStatus(it->second, g.round(), state, failure, now, out).IgnoreError();
  }
}

void EtcdCoordinator::OnEvent(const mvccpb::Event& event, TimePoint now) {
  const mvccpb::KeyValue& kv = event.kv();
  if (kv.mod_revision() <= rebuilt_at_) return;
  applied_revision_ = std::max(applied_revision_, kv.mod_revision());
  std::string id;
  Outbox out;
  if (keys_.Parse(kv.key(), "nodes", &id)) {
    if (event.type() == mvccpb::Event::PUT) {
      if (kv.version() == 1) Join(kv, now, &out);
    } else if (auto it = conn_by_node_.find(id); it != conn_by_node_.end()) {
      // The node's lease expired or was revoked: its agent is gone.
      if (run_ != nullptr) run_->StreamBroken(it->second, now, &out);
    }
    if (event.type() == mvccpb::Event::DELETE) closed_nodes_.erase(id);
  } else if (keys_.Parse(kv.key(), "status", &id) && event.type() == mvccpb::Event::PUT) {
    ApplyAgentRecord(id, kv.value(), now, &out);
  } else if (keys_.Parse(kv.key(), "figures", &id) && event.type() == mvccpb::Event::PUT) {
    // Not part of the durable state either: the judge and the advice start afresh with a new
    // coordinator, as with a new server.
    auto it = conn_by_node_.find(id);
    if (run_ == nullptr || it == conn_by_node_.end()) return;
    ApplyFigures(it->second, kv.value(), now, &out);
    if (out.empty()) return;
  } else if (keys_.Parse(kv.key(), "preflight", &id) && event.type() == mvccpb::Event::PUT) {
    auto it = conn_by_node_.find(id);
    ddprun::proto::PreflightReport report;
    if (run_ == nullptr || it == conn_by_node_.end() || !report.ParseFromString(kv.value())) return;
    run_->Preflight(it->second, FromProto(report), now, &out);
  } else if (keys_.Parse(kv.key(), "progress", &id) && event.type() == mvccpb::Event::PUT) {
    // Not part of the durable state: a new coordinator hears the next one.
    ddprun::proto::Heartbeat h;
    auto it = conn_by_node_.find(id);
    if (run_ != nullptr && it != conn_by_node_.end() && h.ParseFromString(kv.value())) {
      run_->Progress(it->second, FromProto(h), now);
    }
    return;
  } else {
    return;
  }
  dirty_ = true;
  Apply(out);
}

void EtcdCoordinator::ApplyFigures(ConnId conn, const std::string& value, TimePoint now,
                                   Outbox* out) {
  ddprun::proto::Heartbeat h;
  if (!h.ParseFromString(value)) return;
  if (h.compute_size() > 0) {
    const std::optional<SlowNodeChange> change = run_->Compute(conn, ComputeFromProto(h), now, out);
    if (change.has_value()) {
      log_.push_back(
          {change->slow, absl::StrCat("run '", run_->run_id(), "': ", change->Describe())});
    }
  }
  if (h.has_checkpoint()) run_->Checkpoint(conn, CheckpointFromProto(h), now);
  NoteAdvice();
  report_due_ = true;
}

void EtcdCoordinator::NoteAdvice() {
  const std::optional<CheckpointAdvice>& advice = run_->checkpoint_advice();
  if (!advice.has_value() || advice->interval_s <= 0) return;
  // The estimate moves a little at every report as the run trains (its MTBF grows with the time
  // trained); each write carries the run's state too, and every node reports every 5 s: only a
  // move the workers should follow is written (a failure's is far larger).
  const double last = advice_pending_s_.value_or(advice_written_s_);
  if (last > 0 && std::abs(advice->interval_s - last) < kAdviceMove * last) return;
  advice_pending_s_ = advice->interval_s;
}

void EtcdCoordinator::NoteReport(TimePoint now) {
  if (!report_due_ || now < report_noted_at_ + kReportInterval) return;
  report_due_ = false;
  report_noted_at_ = now;
  std::string report = JudgesReportOf(run_->Status()).SerializeAsString();
  if (report != report_pending_.value_or(report_written_)) report_pending_ = std::move(report);
}

std::vector<EtcdCoordinator::LogLine> EtcdCoordinator::TakeLog() {
  // The run's own lines (the preflight's verdicts, a line a node), as the server logs them.
  if (run_ != nullptr) {
    for (std::string& line : run_->TakeLog()) log_.push_back({false, std::move(line)});
  }
  return std::exchange(log_, {});
}

void EtcdCoordinator::LocalLeave(const std::string& reason, TimePoint now) {
  auto it = conn_by_node_.find(self_);
  if (it == conn_by_node_.end() || run_ == nullptr) return;
  Outbox out;
  run_->Leave(it->second, reason, now, &out);
  dirty_ = true;
  Apply(out);
}

void EtcdCoordinator::Tick(TimePoint now) {
  if (run_ == nullptr) return;
  // A node is alive as long as its key is (etcd keeps its lease); RunState's own lease must
  // never fire first, so every known node counts as heard from.
  for (const auto& [conn, id] : node_by_conn_) run_->Heartbeat(conn, now);
  Outbox out;
  const RunPhase before = run_->phase();
  const int64_t round = run_->round();
  run_->Tick(now, &out);
  if (!out.empty() || run_->phase() != before || run_->round() != round) dirty_ = true;
  Apply(out);
  NoteReport(now);
}

std::optional<TimePoint> EtcdCoordinator::NextDeadline() const {
  if (run_ == nullptr) return std::nullopt;
  std::optional<TimePoint> next = run_->NextDeadline();
  if (report_due_ && (!next || report_noted_at_ + kReportInterval < *next)) {
    next = report_noted_at_ + kReportInterval;
  }
  return next;
}

void EtcdCoordinator::Apply(const Outbox& out) {
  if (run_ != nullptr) NoteAdvice();     // a failure restart recomputes it
  if (!out.empty()) report_due_ = true;  // and the members judged may have changed
  for (const Outgoing& o : out) {
    auto it = node_by_conn_.find(o.conn);
    if (it == node_by_conn_.end()) continue;
    const std::string id = it->second;
    Inbox& inbox = inboxes_[id];
    inbox.pending.push_back(ToProto(o));
    ++inbox.next_seq;
    if (std::holds_alternative<CloseNotice>(o.msg)) {
      // The state machine has forgotten the node; its key may linger until its agent leaves.
      conn_by_node_.erase(id);
      node_by_conn_.erase(it);
      liveness_index_.erase(o.conn);
      closed_nodes_.insert(id);
    }
  }
}

std::optional<LivenessSettings> EtcdCoordinator::liveness() const {
  if (run_ == nullptr || !run_->liveness().on()) return std::nullopt;
  return run_->liveness();
}

std::vector<EtcdCoordinator::WatchedNode> EtcdCoordinator::LivenessWatches() const {
  std::vector<WatchedNode> out;
  if (run_ == nullptr) return out;
  for (const auto& [conn, id] : node_by_conn_) {
    if (id == self_ || !run_->HasConn(conn)) continue;
    out.push_back({liveness_index_.at(conn), conn, run_->SilenceVerdictOf(conn)});
  }
  return out;
}

SilenceVerdict EtcdCoordinator::SilenceVerdictOf(ConnId conn) const {
  return run_ != nullptr ? run_->SilenceVerdictOf(conn) : SilenceVerdict::kByLease;
}

std::string EtcdCoordinator::Silent(ConnId conn, Duration silent_for, TimePoint now) {
  auto it = node_by_conn_.find(conn);
  if (it == node_by_conn_.end() || run_ == nullptr || !run_->HasConn(conn)) return "";
  const std::string id = it->second;
  Outbox out;
  run_->Silent(conn, silent_for, now, &out);
  dirty_ = true;
  Apply(out);
  return id;
}

void EtcdCoordinator::PublishLiveness(std::string record, int64_t lease) {
  liveness_record_ = Publication{std::move(record), lease};
}

std::optional<etcdserverpb::TxnRequest> EtcdCoordinator::PendingWrite() const {
  if (!dirty_ && !liveness_record_ && !advice_pending_s_ && !report_pending_ &&
      std::none_of(inboxes_.begin(), inboxes_.end(),
                   [](const auto& i) { return !i.second.pending.empty(); })) {
    return std::nullopt;
  }
  etcdserverpb::TxnRequest txn;
  if (drop_closed_mark_ && !run_closed()) {  // (a closing run puts the mark itself)
    txn.add_success()->mutable_request_delete_range()->set_key(keys_.closed());
  }
  // Only while this agent holds the coordinator key: a deposed coordinator writes nothing.
  auto* cmp = txn.add_compare();
  cmp->set_key(keys_.coordinator());
  cmp->set_target(etcdserverpb::Compare::VALUE);
  cmp->set_result(etcdserverpb::Compare::EQUAL);
  cmp->set_value(self_);
  if (liveness_record_) {
    auto* put = txn.add_success()->mutable_request_put();
    put->set_key(keys_.liveness());
    put->set_value(liveness_record_->record);
    put->set_lease(liveness_record_->lease);
  }
  if (advice_pending_s_) {
    auto* put = txn.add_success()->mutable_request_put();
    put->set_key(keys_.advice());
    put->set_value(absl::StrFormat("%.3f", *advice_pending_s_));
  }
  if (report_pending_) {
    auto* put = txn.add_success()->mutable_request_put();
    put->set_key(keys_.report());
    put->set_value(*report_pending_);
    put->set_lease(lease_);
  }
  for (const auto& [id, inbox] : inboxes_) {
    if (inbox.pending.empty()) continue;
    InboxRecord record;
    record.set_epoch(epoch_);
    record.set_first_seq(inbox.next_seq - static_cast<int64_t>(inbox.pending.size()));
    for (const auto& m : inbox.pending) *record.add_messages() = m;
    auto* put = txn.add_success()->mutable_request_put();
    put->set_key(keys_.inbox(id));
    put->set_value(record.SerializeAsString());
  }
  if (run_ != nullptr && dirty_) {  // (not for a write of the advice or the report alone)
    const RunSnapshot s = run_->Snapshot();
    RunSnapshotRecord r;
    *r.mutable_first() = first_;
    r.set_round(s.round);
    r.set_phase(static_cast<int>(s.phase));
    r.set_restarts_used(s.restarts_used);
    r.set_succeeded_in_round(s.succeeded_in_round);
    r.set_crash_loop_signature(s.crash_loop_signature);
    r.set_spares_used(s.spares_used);
    for (const auto& m : s.members) {
      auto* rm = r.add_members();
      rm->set_node_id(m.node_id);
      rm->set_group_rank(m.group_rank);
      rm->set_in_round(m.in_round);
      rm->set_spare(m.spare);
      rm->set_set_aside(m.set_aside);
    }
    if (s.preflight_median.has_value()) {
      auto* p = r.mutable_preflight_median();
      p->set_cpu_gflops(s.preflight_median->cpu_gflops);
      p->set_send_mbps(s.preflight_median->send_mbps);
      p->set_recv_mbps(s.preflight_median->recv_mbps);
      p->set_rtt_ms(s.preflight_median->rtt_ms);
    }
    if (s.preflight.has_value()) *r.mutable_preflight() = ToProto(*s.preflight);
    r.set_close_code(static_cast<int>(s.close_status.code()));
    r.set_close_message(std::string(s.close_status.message()));
    r.set_applied_revision(applied_revision_);
    for (const std::string& id : closed_nodes_) r.add_closed_nodes(id);
    auto* put = txn.add_success()->mutable_request_put();
    put->set_key(keys_.state());
    put->set_value(r.SerializeAsString());
    if (s.phase == RunPhase::kClosed) {
      auto* closed = txn.add_success()->mutable_request_put();
      closed->set_key(keys_.closed());
      closed->set_value("1");
    }
  }
  return txn;
}

void EtcdCoordinator::WriteConfirmed() {
  drop_closed_mark_ = false;
  liveness_record_.reset();
  if (advice_pending_s_) advice_written_s_ = *std::exchange(advice_pending_s_, std::nullopt);
  if (report_pending_) report_written_ = *std::exchange(report_pending_, std::nullopt);
  for (auto& [id, inbox] : inboxes_) inbox.pending.clear();
  dirty_ = false;
}

}  // namespace ddprun::rendezvous
