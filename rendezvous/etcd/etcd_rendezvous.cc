#include "rendezvous/etcd/etcd_rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/log.h"
#include "common/loop_thread.h"
#include "common/strings.h"
#include "proto/etcd/records.pb.h"
#include "rendezvous/etcd/etcd_coordinator.h"
#include "rendezvous/etcd/etcd_watcher.h"
#include "rendezvous/grpc/preflight_convert.h"
#include "rendezvous/grpc/proto_convert.h"
#include "rendezvous/liveness/liveness_receiver.h"
#include "rendezvous/liveness/liveness_sender.h"
#include "rendezvous/liveness/liveness_settings.h"
#include "rendezvous/liveness/packet.h"

namespace ddprun::rendezvous {
namespace {

using ddprun::proto::etcd::AgentRecord;
using ddprun::proto::etcd::InboxRecord;
using ddprun::proto::etcd::LivenessRecord;
using ddprun::proto::etcd::NodeRecord;

TimePoint Now() { return std::chrono::steady_clock::now(); }

// The local address this host uses to reach `endpoint` ("host:port"): what the built-in server
// would have seen as the agent's peer address, and so the rank-0 agent's MASTER_ADDR. A UDP
// connect sends nothing; it only asks the kernel for the route. Empty when unknown.
std::string LocalAddressTowards(const std::string& endpoint) {
  std::string host = endpoint, port = "2379";
  if (const size_t colon = endpoint.rfind(':'); colon != std::string::npos) {
    host = endpoint.substr(0, colon);
    port = endpoint.substr(colon + 1);
  }
  if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return "";
  std::string out;
  for (addrinfo* a = res; a != nullptr && out.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {};
      if (local.ss_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, buf, sizeof(buf));
      } else {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, buf, sizeof(buf));
      }
      out = buf;
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdRendezvous>> EtcdRendezvous::Create(
    EtcdRendezvousOptions options, Executor* executor) {
  auto client = EtcdClient::Create(options.etcd);
  if (!client.ok()) return client.status();
  return std::unique_ptr<EtcdRendezvous>(
      new EtcdRendezvous(std::move(options), *std::move(client), executor));
}

EtcdRendezvous::EtcdRendezvous(EtcdRendezvousOptions options, std::unique_ptr<EtcdClient> client,
                               Executor* executor)
    : options_(std::move(options)),
      client_(std::move(client)),
      events_(executor),
      loop_(std::make_unique<LoopThread>()),
      keepalive_loop_(std::make_unique<LoopThread>()) {}

EtcdRendezvous::~EtcdRendezvous() {
  // An agent that exits without Leave() (its group succeeded, or the rendezvous failed) still
  // hands over cleanly: a crash is the only way to leave the others waiting for a lease.
  events_.Silence();
  client_->Abort();
  keepalive_loop_->Stop();
  loop_->Post([this] { LeaveNow("the agent exited"); });
  loop_->Stop();
}

void EtcdRendezvous::StopBackground() {
  // Joins the watcher thread; events it already posted may still run: OnEvents checks left_, and
  // a coordinator that is gone ignores them.
  watcher_.reset();
  if (tick_timer_ != 0) loop_->Cancel(tick_timer_);
  tick_timer_ = 0;
  StopServingLiveness();
  sender_.reset();
  sending_to_.clear();
}

void EtcdRendezvous::Join(const NodeInfo& node, RendezvousEvents* events) {
  loop_->Post([this, node, events] {
    if (!events_.SetSink(events)) return;
    node_ = node;
    keys_.emplace(options_.prefix, node.run_id);
    Start();
  });
}

void EtcdRendezvous::Start() {
  if (absl::Status s = Register(options_.read_timeout); !s.ok()) events_.Close(s);
}

absl::Status EtcdRendezvous::Register(Duration budget) {
  // etcd leases are whole seconds; its minimum is enforced by the server (1.5 election timeouts).
  ttl_seconds_ = std::max<int64_t>(
      1, std::chrono::ceil<std::chrono::seconds>(options_.timeouts.lease()).count());
  auto lease = client_->LeaseGrant(ttl_seconds_, budget);
  if (!lease.ok()) return lease.status();
  lease_ = lease->id();
  ttl_seconds_ = lease->ttl();

  NodeRecord record;
  *record.mutable_join() = ToProto(node_, options_.timeouts);
  peer_host_ = LocalAddressTowards(options_.etcd.endpoints.front());
  record.set_peer_host(peer_host_);
  etcdserverpb::PutRequest put;
  put.set_key(keys_->node(node_.node_id));
  put.set_value(record.SerializeAsString());
  put.set_lease(lease_);
  const TimePoint asked = Now();
  auto joined = client_->Put(put, budget);
  if (!joined.ok()) {
    client_->LeaseRevoke(lease_, budget).IgnoreError();
    return joined.status();
  }
  if (options_.on_server_heard) options_.on_server_heard(asked);
  // The key's create revision: this node's index on the liveness path, as the coordinator
  // reads it from the key.
  liveness_index_ = static_cast<uint32_t>(joined->header().revision());

  keepalive_loop_->Post([this, lease = lease_] {
    keepalive_lease_ = lease;
    last_renewed_ = Now();
    keepalive_loop_->PostAt(Now() + options_.timeouts.keep_alive_interval,
                            [this, lease] { KeepAlive(lease); });
  });
  // Every later change of the run, in order, from just after our own join.
  watcher_ = std::make_unique<EtcdWatcher>(
      client_.get(), keys_->run(), joined->header().revision() + 1,
      [this](std::vector<mvccpb::Event> events) {
        loop_->Post([this, events = std::move(events)] { OnEvents(events); });
      },
      [this](absl::Status status) { loop_->Post([this, status] { events_.Close(status); }); });
  // Where the run's liveness path is served now; the watch brings every later change.
  etcdserverpb::RangeRequest published;
  published.set_key(keys_->liveness());
  if (auto read = client_->Range(published, budget); read.ok()) {
    OnLivenessRecord(read->kvs_size() > 0 ? read->kvs(0).value() : "");
  }
  TryElect();
  return absl::OkStatus();
}

void EtcdRendezvous::LoseLease(const absl::Status& why) {
  if (lease_lost_ || events_.closed() || Out()) return;
  lease_lost_ = true;
  coordinator_.reset();
  StopBackground();
  if (node_.min_nodes == node_.max_nodes) {  // a fixed world cannot go on without this node
    events_.Close(why);
    return;
  }
  // Elastic: the others went on without this node (the coordinator saw its key vanish). Stop
  // the workers and come back as a new node, a scale-up for the others, no budget spent.
  events_.RejoinAsNewNode(std::string(why.message()), &node_);
  inbox_epoch_.clear();
  inbox_next_seq_ = 0;
  rejoin_deadline_ = Now() + options_.timeouts.join_timeout;
  TryRejoin();
}

void EtcdRendezvous::TryRejoin() {
  if (events_.closed() || Out()) return;
  const Duration left = rejoin_deadline_ - Now();
  if (left <= Duration::zero()) {
    events_.Close(absl::DeadlineExceededError(
        "lost the etcd rendezvous and could not rejoin within join_timeout"));
    return;
  }
  // Each try is bounded by a lease, so a cut that lasts keeps us trying, not blocked.
  const absl::Status s = Register(std::min<Duration>(left, options_.timeouts.lease()));
  if (s.ok()) {
    lease_lost_ = false;
    FollowLiveness();  // under the new key's index
    return;
  }
  loop_->PostAt(Now() + options_.timeouts.keep_alive_interval, [this] { TryRejoin(); });
}

void EtcdRendezvous::KeepAlive(int64_t lease) {
  if (lease != keepalive_lease_) return;
  const TimePoint started = Now();
  auto ttl = client_->KeepAliveOnce(lease, options_.timeouts.keep_alive_interval);
  const TimePoint now = Now();
  if (ttl.ok()) {
    last_renewed_ = now;
    if (options_.on_server_heard) options_.on_server_heard(started);
  } else if (absl::IsNotFound(ttl.status()) ||
             now - last_renewed_ >= std::chrono::seconds(ttl_seconds_)) {
    // The lease is gone (or surely will be by the time etcd answers again): the run has lost
    // this node, and its workers must stop.
    const absl::Status why = absl::UnavailableError(
        absl::StrCat("lost the etcd rendezvous: this node's lease (", ttl_seconds_,
                     " s) was not renewed: ", ttl.status().message()));
    loop_->Post([this, why, lease] {
      if (lease == lease_) LoseLease(why);
    });
    return;
  }
  // Paced from the call's start: a call that timed out (a whole interval) is followed at once,
  // so a cut-off node counts its lease lost one TTL after its last renewal, not up to an
  // interval later.
  keepalive_loop_->PostAt(std::max(now, started + options_.timeouts.keep_alive_interval),
                          [this, lease] { KeepAlive(lease); });
}

void EtcdRendezvous::TryElect() {
  if (events_.closed() || Out() || coordinator_ != nullptr) return;
  etcdserverpb::TxnRequest txn;
  auto* cmp = txn.add_compare();
  cmp->set_key(keys_->coordinator());
  cmp->set_target(etcdserverpb::Compare::CREATE);
  cmp->set_result(etcdserverpb::Compare::EQUAL);
  cmp->set_create_revision(0);
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(keys_->coordinator());
  put->set_value(node_.node_id);
  put->set_lease(lease_);
  auto done = client_->Txn(txn, options_.timeouts.lease());
  if (!done.ok()) {
    // Unreachable for a whole lease: the keep-alive will say so; try again meanwhile.
    loop_->PostAt(Now() + options_.timeouts.keep_alive_interval, [this] { TryElect(); });
    return;
  }
  // Lost: another agent coordinates; its key's deletion (seen by the watch) calls us again.
  if (done->succeeded()) BecomeCoordinator(done->header().revision());
}

void EtcdRendezvous::BecomeCoordinator(int64_t revision) {
  etcdserverpb::RangeRequest range;
  range.set_key(keys_->run());
  range.set_range_end(EtcdPrefixEnd(keys_->run()));
  range.set_revision(revision);
  auto read = client_->Range(range, options_.timeouts.lease());
  if (!read.ok()) {
    // Give the key up so that someone who can read takes over.
    etcdserverpb::DeleteRangeRequest del;
    del.set_key(keys_->coordinator());
    client_->DeleteRange(del, options_.timeouts.keep_alive_interval).IgnoreError();
    return;
  }
  coordinator_ = std::make_unique<EtcdCoordinator>(
      *keys_, node_.node_id, absl::StrCat(node_.node_id, "/", lease_), lease_);
  std::vector<mvccpb::KeyValue> kvs(read->kvs().begin(), read->kvs().end());
  coordinator_->Rebuild(kvs, revision, Now());
  LogInfo(
      absl::StrCat("this agent now coordinates the etcd rendezvous of run '", node_.run_id, "'"));
  FollowLiveness();  // a coordinator sends no heartbeats: it serves them
  // Nor does anyone judge its silence: its etcd lease decides its loss, so its local lease
  // follows that lease's renewals again, as after an ack offering kByLease (were it left to
  // follow liveness acks that no longer come, its workers would stop for good).
  if (options_.on_liveness_ack) options_.on_liveness_ack(Now(), SilenceVerdict::kByLease);
  Coordinate();
}

void EtcdRendezvous::OnEvents(const std::vector<mvccpb::Event>& events) {
  if (Out()) return;
  const TimePoint now = Now();
  for (const mvccpb::Event& e : events) {
    const std::string& key = e.kv().key();
    if (key == keys_->inbox(node_.node_id) && e.type() == mvccpb::Event::PUT) {
      OnInbox(e.kv().value());
    } else if (key == keys_->advice() && e.type() == mvccpb::Event::PUT) {
      OnAdvice(e.kv().value());
    } else if (key == keys_->liveness()) {
      OnLivenessRecord(e.type() == mvccpb::Event::PUT ? e.kv().value() : "");
    } else if (key == keys_->coordinator() && e.type() == mvccpb::Event::DELETE) {
      loop_->Post([this] { TryElect(); });
    } else if (key == keys_->node(node_.node_id) && e.type() == mvccpb::Event::DELETE) {
      LoseLease(absl::UnavailableError(
          "lost the etcd rendezvous: this node's key was deleted (its lease expired)"));
      return;
    }
    if (coordinator_ != nullptr) coordinator_->OnEvent(e, now);
  }
  if (coordinator_ != nullptr) {
    for (const EtcdCoordinator::LogLine& line : coordinator_->TakeLog()) {
      line.warning ? LogWarning(line.text) : LogInfo(line.text);
    }
  }
  Coordinate();
}

void EtcdRendezvous::OnInbox(const std::string& value) {
  InboxRecord record;
  if (!record.ParseFromString(value)) return;
  if (record.epoch() != inbox_epoch_) {  // a new coordinator numbers from 0
    inbox_epoch_ = record.epoch();
    inbox_next_seq_ = 0;
  }
  for (int i = 0; i < record.messages_size(); ++i) {
    const int64_t seq = record.first_seq() + i;
    if (seq < inbox_next_seq_) continue;  // a retried write repeats what we have read
    inbox_next_seq_ = seq + 1;
    if (events_.closed()) continue;
    const ddprun::proto::ServerMessage& m = record.messages(i);
    if (m.has_assignment()) {
      events_.Assigned(FromProto(m.assignment()));
    } else if (m.has_restart()) {
      events_.Restart(FromProto(m.restart().cause()), m.restart().reason(), HangOf(m.restart()),
                      FactsOf(m.restart()));
    } else if (m.has_standby()) {
      events_.Standby(FromProto(m.standby()));
    } else if (m.has_preflight()) {
      events_.Preflight(FromProto(m.preflight()));
    } else if (m.has_close()) {
      events_.Close(CloseStatus(m.close()), HangOf(m.close()));
    }
  }
}

absl::Status EtcdRendezvous::Flush(std::optional<Duration> budget) {
  if (coordinator_ == nullptr) return absl::OkStatus();
  std::optional<etcdserverpb::TxnRequest> txn = coordinator_->PendingWrite();
  if (!txn) return absl::OkStatus();
  auto done = client_->Txn(*txn, budget.value_or(options_.timeouts.keep_alive_interval));
  if (!done.ok()) return done.status();  // kept pending; the next tick writes it again
  if (!done->succeeded()) {
    LogWarning("this agent no longer holds the etcd rendezvous coordinator key; stepping down");
    coordinator_.reset();
    StopServingLiveness();
    FollowLiveness();  // the next coordinator's, once it publishes
    return absl::OkStatus();
  }
  coordinator_->WriteConfirmed();
  return absl::OkStatus();
}

void EtcdRendezvous::ScheduleTick() {
  if (coordinator_ == nullptr) return;
  TimePoint next = Now() + options_.timeouts.keep_alive_interval;
  if (auto deadline = coordinator_->NextDeadline(); deadline && *deadline < next) next = *deadline;
  if (tick_timer_ != 0) loop_->Cancel(tick_timer_);
  tick_timer_ = loop_->PostAt(next, [this] {
    tick_timer_ = 0;
    if (coordinator_ == nullptr || Out()) return;
    coordinator_->Tick(Now());
    Coordinate();
  });
}

void EtcdRendezvous::Coordinate() {
  if (coordinator_ == nullptr) return;
  ServeLiveness();
  Flush().IgnoreError();  // kept pending for the next tick
  ScheduleTick();
}

void EtcdRendezvous::ServeLiveness() {
  const std::optional<LivenessSettings> settings = coordinator_->liveness();
  if (!settings) {
    StopServingLiveness();
    return;
  }
  if (receiver_ == nullptr) {
    if (liveness_refused_) return;  // tried this coordinatorship: the leases decide
    const uint64_t generation = ++receiver_generation_;
    LivenessReceiver::Callbacks reports;
    reports.on_silent = [this, generation](uint64_t conn, Duration silent_for, size_t suspected,
                                           size_t watched) {
      loop_->Post([this, generation, conn, silent_for, suspected, watched] {
        OnSilent(generation, conn, silent_for, suspected, watched);
      });
    };
    reports.on_heard = [this, generation](uint64_t conn) {
      loop_->Post([this, generation, conn] {
        if (generation == receiver_generation_) silence_.Heard(std::to_string(conn));
      });
    };
    auto started = LivenessReceiver::Start(peer_host_, std::move(reports));
    if (!started.ok()) {
      liveness_refused_ = true;
      LogWarning(absl::StrCat("liveness: cannot serve the run's heartbeats on '", peer_host_, "' (",
                              started.status().message(),
                              "); a silent node is found by its etcd lease"));
      return;
    }
    receiver_ = *std::move(started);
    liveness_secret_ = RandomHex(32);
    silence_ = SilenceDecision();
    watching_.clear();
    LivenessRecord record;
    record.set_coordinator(node_.node_id);
    record.set_host(peer_host_);
    record.set_port(receiver_->port());
    record.set_salt(receiver_->salt());
    record.set_secret(liveness_secret_);
    *record.mutable_settings() = ToProto(*settings);
    coordinator_->PublishLiveness(record.SerializeAsString(), lease_);
    LogInfo(absl::StrCat("liveness: serving run '", node_.run_id, "'s heartbeats on ",
                         FormatHostPort(peer_host_, receiver_->port()), " every ",
                         ToMillis(settings->interval), " ms"));
  }
  // Whom the receiver hears, and the verdict it offers each, as the run says now.
  const AccrualOptions accrual = AccrualOptionsOf(*settings);
  std::map<uint32_t, Heard> next;
  for (const EtcdCoordinator::WatchedNode& w : coordinator_->LivenessWatches()) {
    auto it = watching_.find(w.index);
    if (it == watching_.end() || it->second.conn != w.conn) {
      receiver_->Watch(w.index, w.conn,
                       DeriveLivenessKey(liveness_secret_, receiver_->salt(), w.index), accrual,
                       w.verdict);
    } else if (it->second.verdict != w.verdict) {
      receiver_->Offer(w.index, w.verdict);
    }
    next[w.index] = {w.conn, w.verdict};
  }
  for (const auto& [index, heard] : watching_) {
    if (next.count(index) > 0) continue;
    receiver_->Unwatch(index);
    silence_.Forget(std::to_string(heard.conn));
  }
  watching_ = std::move(next);
}

void EtcdRendezvous::StopServingLiveness() {
  receiver_.reset();  // joins its thread; what it posted is ignored by generation
  ++receiver_generation_;
  watching_.clear();
  liveness_refused_ = false;
}

void EtcdRendezvous::OnSilent(uint64_t generation, ConnId conn, Duration silent_for,
                              size_t suspected, size_t watched) {
  if (generation != receiver_generation_ || coordinator_ == nullptr || Out()) return;
  const bool heard = std::any_of(watching_.begin(), watching_.end(),
                                 [conn](const auto& w) { return w.second.conn == conn; });
  if (!heard) return;
  const TimePoint now = Now();
  if (!silence_.Lost(std::to_string(conn), coordinator_->SilenceVerdictOf(conn), suspected, watched,
                     now)) {
    return;
  }
  const std::string node = coordinator_->Silent(conn, silent_for, now);
  if (node.empty()) return;
  LogInfo(absl::StrCat("liveness: node '", node, "' of run '", node_.run_id, "' silent for ",
                       ToMillis(silent_for), " ms: it is lost"));
  Coordinate();
}

void EtcdRendezvous::OnLivenessRecord(const std::string& value) {
  liveness_record_ = value;
  FollowLiveness();
}

void EtcdRendezvous::FollowLiveness() {
  LivenessRecord record;
  const bool sends = !liveness_record_.empty() && record.ParseFromString(liveness_record_) &&
                     record.port() > 0 && record.coordinator() != node_.node_id &&
                     coordinator_ == nullptr && lease_ != 0 && !lease_lost_ && !Out() &&
                     !events_.closed();
  if (!sends) {
    sender_.reset();
    sending_to_.clear();
    return;
  }
  const std::string target = absl::StrCat(liveness_index_, "@", liveness_record_);
  if (sender_ != nullptr && target == sending_to_) return;
  sender_.reset();
  const LivenessSettings settings = FromProto(record.settings());
  SenderOptions o;
  o.host = record.host();
  o.port = record.port();
  o.node_index = liveness_index_;
  o.key = DeriveLivenessKey(record.secret(), record.salt(), liveness_index_);
  o.interval = settings.interval;
  o.detector = AccrualOptionsOf(settings);
  o.on_ack = options_.on_liveness_ack;  // thread-safe: LocalLease::Renew locks
  const std::string server = FormatHostPort(record.host(), record.port());
  o.on_silent = [this, server](Duration silent_for) {
    loop_->Post([server, silent_for] {
      LogInfo(absl::StrCat("liveness: the etcd coordinator's receiver at ", server,
                           " has not answered for ", ToMillis(silent_for),
                           " ms; this node's workers commit nothing until it (or a new "
                           "coordinator) answers"));
    });
  };
  auto started = LivenessSender::Start(std::move(o));
  if (!started.ok()) {
    LogWarning(absl::StrCat(started.status().message(), "; the etcd lease decides"));
    return;
  }
  sender_ = *std::move(started);
  sending_to_ = target;
}

void EtcdRendezvous::ReportGroupState(int64_t round, GroupState state,
                                      const std::optional<WorkerFailure>& failure) {
  loop_->Post([this, round, state, failure] {
    if (lease_ == 0 || events_.closed() || Out()) return;
    AgentRecord record;
    auto* g = record.mutable_group_status();
    g->set_round(round);
    g->set_state(state == GroupState::kRunning     ? ddprun::proto::GroupStatus::RUNNING
                 : state == GroupState::kSucceeded ? ddprun::proto::GroupStatus::SUCCEEDED
                                                   : ddprun::proto::GroupStatus::FAILED);
    if (failure) *g->mutable_failure() = ToProto(*failure);
    etcdserverpb::PutRequest put;
    put.set_key(keys_->status(node_.node_id));
    put.set_value(record.SerializeAsString());
    put.set_lease(lease_);
    // Failing for a whole lease means the lease is gone too; the keep-alive reports that.
    auto done = client_->Put(put, options_.timeouts.lease());
    if (!done.ok()) LogWarning(absl::StrCat("etcd rendezvous: ", done.status().message()));
  });
}

void EtcdRendezvous::ReportProgress(const std::vector<RankProgress>& progress, bool urgent) {
  loop_->Post([this, progress, urgent] {
    if (lease_ == 0 || events_.closed() || Out()) return;
    // One put per keep-alive interval at most: as often as the built-in server hears it.
    const TimePoint now = Now();
    if (!urgent && now - last_progress_put_ < options_.timeouts.keep_alive_interval) return;
    last_progress_put_ = now;
    PutUnderLease(keys_->progress(node_.node_id), ToProto(progress).SerializeAsString());
  });
}

void EtcdRendezvous::ReportFigures(const NodeFigures& figures) {
  loop_->Post([this, figures] {
    PutUnderLease(keys_->figures(node_.node_id), ToProto(figures).SerializeAsString());
  });
}

void EtcdRendezvous::ReportPreflight(const PreflightReport& report) {
  loop_->Post([this, report] {
    PutUnderLease(keys_->preflight(node_.node_id), ToProto(report).SerializeAsString());
  });
}

void EtcdRendezvous::PutUnderLease(const std::string& key, const std::string& value) {
  if (lease_ == 0 || events_.closed() || Out()) return;
  etcdserverpb::PutRequest put;
  put.set_key(key);
  put.set_value(value);
  put.set_lease(lease_);
  auto done = client_->Put(put, options_.timeouts.keep_alive_interval);
  if (!done.ok()) LogWarning(absl::StrCat("etcd rendezvous: ", done.status().message()));
}

void EtcdRendezvous::OnAdvice(const std::string& value) {
  double interval_s = 0;
  if (!absl::SimpleAtod(value, &interval_s) || !(interval_s > 0) || interval_s == advice_s_) {
    return;
  }
  advice_s_ = interval_s;
  if (!events_.closed()) events_.CheckpointAdvice(interval_s);
}

void EtcdRendezvous::Leave(const std::string& reason) {
  events_.Silence();
  // Whatever the loop is waiting for (a join while etcd is unreachable) gives up first.
  client_->Abort();
  keepalive_loop_->Stop();
  absl::Notification done;
  loop_->Post([this, reason, &done] {
    LeaveNow(reason);
    done.Notify();
  });
  done.WaitForNotification();
}

void EtcdRendezvous::StepOut(const std::string& reason) {
  loop_->Post([this, reason] {
    if (Out() || events_.closed()) return;
    stepped_out_ = true;
    StopBackground();
    if (lease_ != 0 && !lease_lost_) Withdraw(reason, Now() + options_.close_timeout);
    coordinator_.reset();
    // The revoked lease's keep-alive chain then ends on NotFound without reporting a loss: it
    // is no longer lease_.
    lease_ = 0;
  });
}

void EtcdRendezvous::StepIn() {
  loop_->Post([this] {
    if (left_ || events_.closed() || !stepped_out_) return;
    stepped_out_ = false;
    events_.RenameForRejoin(&node_);
    inbox_epoch_.clear();
    inbox_next_seq_ = 0;
    lease_lost_ = true;  // registering again, as after a lost lease
    rejoin_deadline_ = Now() + options_.timeouts.join_timeout;
    TryRejoin();
  });
}

void EtcdRendezvous::LeaveNow(const std::string& reason) {
  if (left_) return;
  left_ = true;
  client_->Resume();  // our own last calls, bounded by close_timeout
  StopBackground();
  if (lease_ == 0 || lease_lost_) {
    coordinator_.reset();
    return;  // nothing of ours is left in etcd (or etcd is gone)
  }
  // One budget for all of it: an agent on its way out must not hang on a dead cluster.
  const TimePoint deadline = Now() + options_.close_timeout;
  auto left = [deadline] { return std::max<Duration>(deadline - Now(), Duration::zero()); };
  Withdraw(reason, deadline);
  // The last agent of a closed run removes every key of the run.
  etcdserverpb::TxnRequest txn;
  auto* closed = txn.add_compare();
  closed->set_key(keys_->closed());
  closed->set_target(etcdserverpb::Compare::VERSION);
  closed->set_result(etcdserverpb::Compare::GREATER);
  closed->set_version(0);
  auto* none_left = txn.add_compare();
  none_left->set_key(keys_->nodes());
  none_left->set_range_end(EtcdPrefixEnd(keys_->nodes()));
  none_left->set_target(etcdserverpb::Compare::CREATE);
  none_left->set_result(etcdserverpb::Compare::EQUAL);
  none_left->set_create_revision(0);
  auto* del = txn.add_success()->mutable_request_delete_range();
  del->set_key(keys_->run());
  del->set_range_end(EtcdPrefixEnd(keys_->run()));
  if (auto done = client_->Txn(txn, left()); !done.ok()) {
    LogWarning(absl::StrCat("etcd rendezvous: could not clean up the finished run's keys (",
                            done.status().message(), ")"));
  }
}

void EtcdRendezvous::Withdraw(const std::string& reason, TimePoint deadline) {
  auto left = [deadline] { return std::max<Duration>(deadline - Now(), Duration::zero()); };
  if (coordinator_ != nullptr) {
    // Apply our own leave and write the run's state before giving the coordinator key up.
    coordinator_->LocalLeave(reason, Now());
    if (absl::Status flushed = Flush(left()); !flushed.ok()) {
      LogWarning(absl::StrCat("etcd rendezvous: could not write the run's last state on leaving (",
                              flushed.message(), ")"));
    }
    coordinator_.reset();
  } else if (!events_.closed()) {
    AgentRecord record;
    record.mutable_leave()->set_reason(reason);
    etcdserverpb::PutRequest put;
    put.set_key(keys_->status(node_.node_id));
    put.set_value(record.SerializeAsString());
    put.set_lease(lease_);
    client_->Put(put, left()).IgnoreError();
  }
  // Deletes our node, status and (if ours) coordinator keys at once; another agent takes over.
  if (absl::Status revoked = client_->LeaseRevoke(lease_, left()); !revoked.ok()) {
    LogWarning(absl::StrCat("etcd rendezvous: could not remove this agent's keys on leaving (",
                            revoked.message(), "); they expire with its lease"));
  }
}

}  // namespace ddprun::rendezvous
