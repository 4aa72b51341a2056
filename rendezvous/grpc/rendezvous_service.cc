#include "rendezvous/grpc/rendezvous_service.h"

#include <functional>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/log.h"
#include "common/strings.h"
#include "rendezvous/core/server_metrics.h"
#include "rendezvous/core/status_page.h"
#include "rendezvous/grpc/agent_stream.h"
#include "rendezvous/grpc/member_secret.h"
#include "rendezvous/grpc/preflight_convert.h"
#include "rendezvous/grpc/proto_convert.h"
#include "rendezvous/grpc/security.h"
#include "rendezvous/liveness/liveness_settings.h"
#include "rendezvous/liveness/packet.h"

namespace ddprun::rendezvous {
namespace {

grpc::Status Unauthenticated() {
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "rendezvous token missing or wrong (set DDPRUN_RDZV_TOKEN or token_file "
                      "to the server's token)");
}

GroupState FromProto(proto::GroupStatus::State s) {
  switch (s) {
    case proto::GroupStatus::SUCCEEDED:
      return GroupState::kSucceeded;
    case proto::GroupStatus::FAILED:
      return GroupState::kFailed;
    default:
      return GroupState::kRunning;
  }
}

}  // namespace

RendezvousServiceImpl::RendezvousServiceImpl(LoopThread* loop, const Clock* clock,
                                             std::string token, ServerLimits limits,
                                             RunTimeouts default_timeouts, bool embedded,
                                             RoundQuorum round_quorum)
    : loop_(loop),
      clock_(clock),
      token_(std::move(token)),
      default_timeouts_(default_timeouts),
      embedded_(embedded),
      max_queued_(limits.max_queued_messages_per_stream),
      state_(limits, std::make_shared<HmacMemberKeys>(limits.member_secret), round_quorum) {}

RendezvousServiceImpl::~RendezvousServiceImpl() {
  // The server is shut down and the loop stopped: no reactor is left running. Streams whose
  // OnDone never reached the loop are deleted here.
  for (auto& [conn, entry] : streams_) delete entry.stream;
}

grpc::ServerBidiReactor<proto::AgentMessage, proto::ServerMessage>* RendezvousServiceImpl::Connect(
    grpc::CallbackServerContext* context) {
  std::optional<std::string> scope = CallScope(*context, token_);
  if (!scope.has_value()) {
    loop_->Post([this] { ++state_.metrics().refused["unauthenticated"]; });
    return new RefusedStream(Unauthenticated());
  }
  const int max_streams = state_.limits().max_streams;
  if (open_streams_.fetch_add(1) >= max_streams) {
    open_streams_.fetch_sub(1);
    return new RefusedStream(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        "rendezvous server is at its limit of " + std::to_string(max_streams) + " streams"));
  }
  const ConnId conn = next_conn_++;
  auto* stream = new AgentStream(this, conn);
  std::string peer = PeerHost(context->peer());
  loop_->Post([this, conn, stream, peer = std::move(peer), scope = *std::move(scope)] {
    StreamEntry& entry = streams_[conn];
    entry.stream = stream;
    entry.peer_host = peer;
    entry.scope = scope;
    const auto wait = state_.limits().first_join_timeout;
    entry.join_timer = loop_->PostAt(std::chrono::steady_clock::now() + wait, [this, conn, wait] {
      auto it = streams_.find(conn);
      if (it == streams_.end()) return;
      it->second.join_timer = 0;
      if (state_.HasJoined(conn)) return;
      it->second.stream->FinishWith(grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          "no join within " + std::to_string(ToMillis(wait)) + " ms of opening the stream"));
    });
  });
  stream->Start();
  return stream;
}

grpc::ServerUnaryReactor* RendezvousServiceImpl::Status(grpc::CallbackServerContext* context,
                                                        const proto::StatusRequest* request,
                                                        proto::StatusResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::optional<std::string> scope = CallScope(*context, token_);
  if (!scope.has_value()) {
    loop_->Post([this] { ++state_.metrics().refused["unauthenticated"]; });
    reactor->Finish(Unauthenticated());
    return reactor;
  }
  // request/response stay valid until Finish; the loop outlives every RPC.
  loop_->Post([this, request, response, reactor, scope = *std::move(scope)] {
    // A scoped token sees the runs of its scope only; the server's token names any run in full.
    absl::StatusOr<RunStatus> status = state_.Status(ScopedRunId(scope, request->run_id()));
    if (!status.ok()) {
      reactor->Finish(
          grpc::Status(grpc::StatusCode::NOT_FOUND, std::string(status.status().message())));
      return;
    }
    ToProto(*status, response);
    response->set_server_instance(instance_);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

namespace {

// Runs `render` on `loop` and returns its text; "" when the loop does not run it within a
// second (it is stopping). The result lives in a shared cell: a late task writes there, never
// into a caller that has given up.
std::string OnLoop(LoopThread* loop, std::function<std::string()> render) {
  struct Cell {
    absl::Notification done;
    std::string text;
  };
  auto cell = std::make_shared<Cell>();
  loop->Post([cell, render = std::move(render)] {
    cell->text = render();
    cell->done.Notify();
  });
  if (!cell->done.WaitForNotificationWithTimeout(absl::Seconds(1))) return "";
  return cell->text;
}

}  // namespace

std::string RendezvousServiceImpl::RenderMetrics() {
  return OnLoop(loop_, [this] {
    return FormatMetrics(state_.metrics(), state_.AllStatus(/*with_members=*/false));
  });
}

std::string RendezvousServiceImpl::RenderStatusPage(const std::string& server) {
  return OnLoop(loop_, [this, server] {
    return rendezvous::RenderStatusPage(state_.AllStatus(/*with_members=*/true), state_.metrics(),
                                        server, clock_->Now());
  });
}

void RendezvousServiceImpl::EndAllStreams() {
  absl::Notification done;
  loop_->Post([this, &done] {
    for (auto& [conn, entry] : streams_) {
      entry.stream->FinishWith(
          grpc::Status(grpc::StatusCode::UNAVAILABLE, "rendezvous server shutting down"));
    }
    done.Notify();
  });
  done.WaitForNotification();
}

void RendezvousServiceImpl::PostMessage(ConnId conn, proto::AgentMessage message,
                                        std::atomic<int>* queued) {
  // `queued` lives in the stream, which the loop deletes only after this task (posted before
  // the stream's OnDone) has run.
  loop_->Post([this, conn, queued, message = std::move(message)] {
    HandleMessage(conn, message);
    queued->fetch_sub(1);
  });
}

void RendezvousServiceImpl::PostStreamBroken(ConnId conn) {
  loop_->Post([this, conn] {
    UnwatchLiveness(conn);
    Apply(state_.StreamBroken(conn, clock_->Now()));
    ScheduleTick();
  });
}

void RendezvousServiceImpl::PostStreamDone(ConnId conn) {
  loop_->Post([this, conn] {
    // Normally the read side already reported the break; this is idempotent.
    Apply(state_.StreamBroken(conn, clock_->Now()));
    UnwatchLiveness(conn);
    auto it = streams_.find(conn);
    if (it != streams_.end()) {
      if (it->second.join_timer != 0) loop_->Cancel(it->second.join_timer);
      delete it->second.stream;
      streams_.erase(it);
      open_streams_.fetch_sub(1);
    }
    ScheduleTick();
  });
}

void RendezvousServiceImpl::PostSilent(ConnId conn, Duration silent_for, size_t suspected,
                                       size_t watched) {
  loop_->Post([this, conn, silent_for, suspected, watched] {
    auto it = streams_.find(conn);
    if (it == streams_.end() || it->second.closed || !it->second.liveness_watched) return;
    // The offer may have been withdrawn since the receiver judged (the spare was taken): the
    // node's workers may hold the stream's lease again, so only the lease may lose it now.
    const TimePoint now = clock_->Now();
    if (!silence_.Lost(std::to_string(conn), state_.SilenceVerdictOf(conn), suspected, watched,
                       now)) {
      return;
    }
    LogInfo(absl::StrCat("liveness: stream ", conn, " of run '", state_.RunIdOf(conn),
                         "' silent for ", ToMillis(silent_for), " ms: its node is lost"));
    Apply(state_.Silent(conn, silent_for, now));
    ScheduleTick();
  });
}

void RendezvousServiceImpl::PostHeard(ConnId conn) {
  loop_->Post([this, conn] { silence_.Heard(std::to_string(conn)); });
}

void RendezvousServiceImpl::WatchLiveness(ConnId conn, const JoinedNotice& notice,
                                          proto::Joined* joined) {
  if (liveness_ == nullptr || !notice.liveness.on()) return;
  auto it = streams_.find(conn);
  if (it == streams_.end()) return;
  // The stream's id is the packet's node index: unique for 4 billion streams of this server,
  // and the salt makes an earlier server's packets no packets here.
  const auto index = static_cast<uint32_t>(conn);
  liveness_->Watch(index, conn, DeriveLivenessKey(notice.member_key, liveness_->salt(), index),
                   AccrualOptionsOf(notice.liveness), state_.SilenceVerdictOf(conn));
  it->second.liveness_watched = true;
  joined->set_liveness_port(liveness_->port());
  joined->set_liveness_node_index(index);
  joined->set_liveness_salt(liveness_->salt());
}

void RendezvousServiceImpl::UnwatchLiveness(ConnId conn) {
  auto it = streams_.find(conn);
  if (it == streams_.end() || !it->second.liveness_watched) return;
  it->second.liveness_watched = false;
  liveness_->Unwatch(static_cast<uint32_t>(conn));
  silence_.Forget(std::to_string(conn));
}

void RendezvousServiceImpl::HandleMessage(ConnId conn, const proto::AgentMessage& message) {
  auto entry = streams_.find(conn);
  if (entry == streams_.end() || entry->second.closed) return;  // finishing: nothing to say
  const TimePoint now = clock_->Now();
  switch (message.msg_case()) {
    case proto::AgentMessage::kJoin: {
      JoinRequest request = FromProto(message.join(), default_timeouts_, entry->second.peer_host);
      request.token_scope = entry->second.scope;
      Outbox out = state_.Join(conn, request, now);
      FollowHostRename(conn, request.node.node_id, out);
      Apply(out);
      // Refused and unverified re-registrations: always logged, verbose or not.
      for (const std::string& line : state_.TakeSecurityLog()) LogWarning(line);
      break;
    }
    case proto::AgentMessage::kHeartbeat: {
      Apply(state_.Heartbeat(conn, rendezvous::FromProto(message.heartbeat()), now));
      // Most heartbeats carry no compute times (an agent sends them every 5 s): nothing to judge.
      if (message.heartbeat().compute_size() > 0) {
        std::optional<SlowNodeChange> change;
        const std::string run_id = state_.RunIdOf(conn);  // before an eviction forgets the conn
        Outbox evicted = state_.Compute(conn, ComputeFromProto(message.heartbeat()), now, &change);
        if (change.has_value()) {
          const std::string line = absl::StrCat("run '", run_id, "': ", change->Describe());
          change->slow ? LogWarning(line) : LogInfo(line);
        }
        Apply(evicted);
      }
      if (message.heartbeat().has_checkpoint()) {
        state_.Checkpoint(conn, CheckpointFromProto(message.heartbeat()), now);
      }
      auto open = streams_.find(conn);
      if (open != streams_.end() && !open->second.closed) {
        proto::ServerMessage ack;
        ack.mutable_ack()->set_checkpoint_interval_s(state_.CheckpointIntervalOf(conn));
        open->second.stream->Send(std::move(ack), /*last=*/false);
      }
      break;
    }
    case proto::AgentMessage::kGroupStatus: {
      const proto::GroupStatus& g = message.group_status();
      std::optional<WorkerFailure> failure;
      if (g.has_failure()) failure = rendezvous::FromProto(g.failure());
      Apply(state_.GroupStatus(conn, g.round(), FromProto(g.state()), failure, now));
      break;
    }
    case proto::AgentMessage::kLeave:
      Apply(state_.Leave(conn, message.leave().reason(), now));
      break;
    case proto::AgentMessage::kStep:
      Apply(state_.Step(conn, message.step().json(), now));
      break;
    case proto::AgentMessage::kPreflightReport:
      Apply(state_.Preflight(conn, FromProto(message.preflight_report()), now));
      break;
    default: {
      // Unknown or empty message: a client speaking another protocol. Drop it and its stream.
      Outbox out = state_.StreamBroken(conn, now);
      out.push_back({conn, CloseNotice{absl::InvalidArgumentError("unknown message"), {}}});
      Apply(out);
      break;
    }
  }
  ScheduleTick();
}

void RendezvousServiceImpl::FollowHostRename(ConnId conn, const std::string& node_id,
                                             const Outbox& out) {
  if (!embedded_ || host_node_id_.empty()) return;
  for (const Outgoing& o : out) {
    const auto* joined = std::get_if<JoinedNotice>(&o.msg);
    // The hosting agent rejoining under a new name (fenced, or back from a failed health check)
    // is still the host: agents must never pick it as the successor of itself. Only a join the
    // run accepted, and whose former id ServerState believed (it proved it with that node's
    // member key): a refused or forged claim leaves the host as it is.
    if (joined != nullptr && o.conn == conn && !joined->succeeds_node_id.empty() &&
        joined->succeeds_node_id == host_node_id_) {
      host_node_id_ = node_id;
    }
  }
}

void RendezvousServiceImpl::Apply(const Outbox& out) {
  // The runs' own lines (the preflight's verdicts), before the round they let form: always
  // logged, verbose or not.
  for (const std::string& line : state_.TakeRunLog()) LogInfo(line);
  LogDecisions(out);
  for (const Outgoing& o : out) {
    auto it = streams_.find(o.conn);
    if (it == streams_.end()) continue;
    if (it->second.closed) continue;
    const bool last = std::holds_alternative<CloseNotice>(o.msg);
    it->second.closed = last;
    if (last) UnwatchLiveness(o.conn);
    proto::ServerMessage m = ToProto(o);
    if (m.has_joined()) {
      m.mutable_joined()->set_embedded(embedded_);
      m.mutable_joined()->set_host_node_id(host_node_id_);
      WatchLiveness(o.conn, std::get<JoinedNotice>(o.msg), m.mutable_joined());
    } else if (m.has_assignment() && embedded_) {
      m.mutable_assignment()->set_host_node_id(host_node_id_);
    }
    it->second.stream->Send(std::move(m), last);
  }
  for (const auto& [conn, verdict] : state_.TakeVerdictOffers()) {
    auto it = streams_.find(conn);
    if (it != streams_.end() && it->second.liveness_watched) {
      liveness_->Offer(static_cast<uint32_t>(conn), verdict);
    }
  }
}

void RendezvousServiceImpl::LogDecisions(const Outbox& out) {
  // One line per decision, not per stream: a round of 10,000 nodes is one line.
  const Assignment* first = nullptr;
  ConnId first_conn = 0;
  int assigned = 0;
  int spares_told = 0;  // StandbyNotice: nodes left out of a round, or joining a full one
  std::string last_restart, last_close;
  const ResumedNotice* resumed = nullptr;
  ConnId resumed_conn = 0;
  int num_resumed = 0;
  for (const Outgoing& o : out) {
    if (const auto* r = std::get_if<ResumedNotice>(&o.msg)) {
      if (resumed == nullptr) {
        resumed = r;
        resumed_conn = o.conn;
      }
      ++num_resumed;
    }
    if (const auto* a = std::get_if<Assignment>(&o.msg)) {
      if (first == nullptr) {
        first = a;
        first_conn = o.conn;
      }
      ++assigned;
    } else if (const auto* standby = std::get_if<StandbyNotice>(&o.msg)) {
      if (standby->set_aside.empty()) ++spares_told;  // one set aside is no spare
    } else if (const auto* r = std::get_if<RestartNotice>(&o.msg)) {
      if (r->reason != last_restart) {
        last_restart = r->reason;
        LogInfo(absl::StrCat("run '", state_.RunIdOf(o.conn), "': round ", r->round, " is over: ",
                             r->reason, r->facts.spare_used ? "; a spare takes its place" : ""));
      }
    } else if (const auto* c = std::get_if<CloseNotice>(&o.msg)) {
      const std::string line =
          c->status.ok() ? std::string()
                         : absl::StrCat("closing ", absl::StatusCodeToString(c->status.code()),
                                        ": ", c->status.message());
      if (!line.empty() && line != last_close) {
        last_close = line;
        LogInfo(line);
      }
    }
  }
  if (resumed != nullptr) {
    LogInfo(absl::StrCat("run '", state_.RunIdOf(resumed_conn), "': round ", resumed->round,
                         " goes on: ", num_resumed, " node(s) re-registered"));
  }
  if (first != nullptr) {
    LogInfo(
        absl::StrCat("run '", state_.RunIdOf(first_conn), "': round ", first->round,
                     " formed: ", assigned, " nodes, world size ", first->world_size, ", master ",
                     FormatHostPort(first->master_addr, first->master_port), ", restarts used ",
                     first->restart_count, " of ", first->max_restarts,
                     spares_told > 0 ? absl::StrCat(", ", spares_told, " spare(s) waiting") : ""));
  }
}

void RendezvousServiceImpl::ScheduleTick() {
  // Coalesced: a burst of events (10,000 joins) recomputes the next deadline once, after the
  // burst, instead of once per event.
  if (tick_scheduling_posted_) return;
  tick_scheduling_posted_ = true;
  loop_->Post([this] {
    tick_scheduling_posted_ = false;
    std::optional<TimePoint> next = state_.NextDeadline();
    if (next && tick_timer_ != 0 && tick_at_ == *next) return;
    if (tick_timer_ != 0) loop_->Cancel(tick_timer_);
    tick_timer_ = 0;
    if (!next) return;
    tick_at_ = *next;
    // The loop's timers run on the steady clock; the state machine's clock is the injected one.
    const TimePoint when = std::chrono::steady_clock::now() + (*next - clock_->Now());
    tick_timer_ = loop_->PostAt(when, [this] {
      tick_timer_ = 0;
      RunTick();
    });
  });
}

void RendezvousServiceImpl::RunTick() {
  Apply(state_.Tick(clock_->Now()));
  ScheduleTick();
}

}  // namespace ddprun::rendezvous
