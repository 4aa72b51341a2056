#include "rendezvous/grpc/rendezvous_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/log.h"
#include "common/loop_thread.h"
#include "common/message_limit.h"
#include "common/strings.h"
#include "grpcpp/grpcpp.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/client/endpoint_probe.h"
#include "rendezvous/grpc/agent_call.h"
#include "rendezvous/grpc/preflight_convert.h"
#include "rendezvous/grpc/proto_convert.h"
#include "rendezvous/grpc/served_run.h"
#include "rendezvous/liveness/liveness_settings.h"
#include "rendezvous/liveness/packet.h"

namespace ddprun::rendezvous {
namespace {

ConnectionConfig ConfigOf(const ClientOptions& options) {
  ConnectionConfig config;
  config.endpoint = options.endpoint;
  config.timeouts = options.timeouts;
  config.read_timeout = options.read_timeout;
  config.close_timeout = options.close_timeout;
  config.host_loss = options.host_loss;
  config.can_host = static_cast<bool>(options.host_failover);
  config.looks_for_the_run = static_cast<bool>(options.stop_hosting);
  return config;
}

// What the machine needs of a server message.
ServerWord WordOf(const proto::ServerMessage& m) {
  ServerWord w;
  switch (m.msg_case()) {
    case proto::ServerMessage::kAck:
      w.kind = ServerWord::Kind::kAck;
      break;
    case proto::ServerMessage::kJoined:
      w.kind = ServerWord::Kind::kJoined;
      w.embedded = m.joined().embedded();
      w.host_node_id = m.joined().host_node_id();
      w.member_key = m.joined().member_key();
      w.keep_alive_interval_ms = m.joined().keep_alive_interval_ms();
      if (m.joined().liveness_port() > 0 && m.joined().has_liveness()) {
        w.liveness.port = m.joined().liveness_port();
        w.liveness.node_index = m.joined().liveness_node_index();
        w.liveness.salt = m.joined().liveness_salt();
        w.liveness.settings = FromProto(m.joined().liveness());
      }
      break;
    case proto::ServerMessage::kAssignment:
      w.kind = ServerWord::Kind::kAssignment;
      w.assignment = FromProto(m.assignment());
      w.host_node_id = m.assignment().host_node_id();
      break;
    case proto::ServerMessage::kRestart:
      w.kind = ServerWord::Kind::kRestart;
      w.cause = FromProto(m.restart().cause());
      w.restart_count = m.restart().restart_count();
      w.round = m.restart().round();
      w.reason = m.restart().reason();
      w.hang = HangOf(m.restart());
      w.facts = FactsOf(m.restart());
      break;
    case proto::ServerMessage::kStandby:
      w.kind = ServerWord::Kind::kStandby;
      w.standby = FromProto(m.standby());
      break;
    case proto::ServerMessage::kPreflight:
      w.kind = ServerWord::Kind::kPreflight;
      w.preflight = FromProto(m.preflight());
      break;
    case proto::ServerMessage::kResumed:
      w.kind = ServerWord::Kind::kResumed;
      w.round = m.resumed().round();
      break;
    case proto::ServerMessage::kClose:
      w.kind = ServerWord::Kind::kClose;
      w.given_up = m.close().given_up();
      w.message = m.close().message();
      w.close_status = CloseStatus(m.close());
      w.hang = HangOf(m.close());
      break;
    default:
      w.kind = ServerWord::Kind::kUnknown;
      break;
  }
  return w;
}

StreamEnd EndOf(const grpc::Status& s) {
  StreamEnd end;
  switch (s.error_code()) {
    case grpc::StatusCode::OK:
      end.code = StreamEnd::Code::kOk;
      break;
    case grpc::StatusCode::UNAUTHENTICATED:
      end.code = StreamEnd::Code::kUnauthenticated;
      break;
    case grpc::StatusCode::UNAVAILABLE:
      end.code = StreamEnd::Code::kUnavailable;
      break;
    default:
      end.code = StreamEnd::Code::kOther;
      break;
  }
  end.grpc_code = static_cast<int>(s.error_code());
  end.message = s.error_message();
  return end;
}

}  // namespace

RendezvousClient::RendezvousClient(ClientOptions options, Executor* executor,
                                   std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      clock_(SystemClock::Get()),
      channel_(std::move(channel)),
      loop_(std::make_unique<LoopThread>()),
      events_(executor),
      machine_(ConfigOf(options_)) {
  if (options_.stop_hosting) probe_loop_ = std::make_unique<LoopThread>();
}

RendezvousClient::~RendezvousClient() {
  events_.Silence();
  // Its question posts the answer to loop_: finished before loop_ goes.
  if (probe_loop_ != nullptr) probe_loop_->Stop();
  // A call's last reaction posts to the loop, so wait for them before stopping the loop. The
  // calls leave the loop's hands first: a reaction still queued could otherwise retire (and
  // free) a call this thread is waiting on.
  std::vector<std::unique_ptr<AgentCall>> calls;
  absl::Notification fetched;
  loop_->Post([this, &calls, &fetched] {
    closing_ = true;
    liveness_.reset();  // before the loop its reports post to stops
    if (call_ != nullptr) {
      call_->Cancel();
      calls.push_back(std::move(call_));
    }
    for (auto& retired : retired_calls_) calls.push_back(std::move(retired));
    retired_calls_.clear();
    fetched.Notify();
  });
  fetched.WaitForNotification();
  for (const auto& call : calls) call->done().WaitForNotification();
  loop_->Stop();
}

// ---- The agent's calls: each posts to the loop and hands the machine an event ----

void RendezvousClient::Join(const NodeInfo& node, RendezvousEvents* events) {
  loop_->Post([this, node, events] {
    if (!events_.SetSink(events)) return;
    Execute(machine_.OnJoin(node, Now()));
  });
}

void RendezvousClient::StepOut(const std::string& reason) {
  loop_->Post([this, reason] { Execute(machine_.OnStepOut(reason, Now())); });
}

void RendezvousClient::StepIn() {
  loop_->Post([this] { Execute(machine_.OnStepIn(Now())); });
}

void RendezvousClient::ReportProgress(const std::vector<RankProgress>& progress, bool urgent) {
  loop_->Post([this, progress, urgent] {
    progress_ = progress;
    Execute(machine_.OnProgress(urgent));
  });
}

void RendezvousClient::ReportStep(const std::string& json) {
  loop_->Post([this, json] {
    if (!machine_.MaySendStep() || call_ == nullptr) return;
    proto::AgentMessage m;
    if (json.size() > kMaxStructuredMessageBytes) return;  // never a cut object (message_limit.h)
    m.mutable_step()->set_json(json);
    call_->Send(std::move(m));
  });
}

void RendezvousClient::ReportFigures(const NodeFigures& figures) {
  loop_->Post([this, figures] {
    if (!machine_.MaySendStep() || call_ == nullptr) return;
    proto::AgentMessage m;
    *m.mutable_heartbeat() = ToProto(figures);
    call_->Send(std::move(m));
  });
}

void RendezvousClient::ReportPreflight(const PreflightReport& report) {
  loop_->Post([this, report] {
    if (call_ == nullptr || machine_.state() != ConnectionState::kJoined) return;
    proto::AgentMessage m;
    *m.mutable_preflight_report() = ToProto(report);
    call_->Send(std::move(m));
  });
}

void RendezvousClient::OnCheckpointAdvice(double interval_s) {
  // Every ack carries it: only a change is news.
  if (interval_s <= 0 || interval_s == checkpoint_advice_s_) return;
  checkpoint_advice_s_ = interval_s;
  events_.CheckpointAdvice(interval_s);
}

void RendezvousClient::ReportGroupState(int64_t round, GroupState state,
                                        const std::optional<WorkerFailure>& failure) {
  loop_->Post([this, round, state, failure] {
    machine_.OnGroupState(round, state, failure);
    if (!machine_.MaySendGroupState() || call_ == nullptr) return;
    proto::AgentMessage m;
    proto::GroupStatus* g = m.mutable_group_status();
    g->set_round(round);
    g->set_state(state == GroupState::kRunning     ? proto::GroupStatus::RUNNING
                 : state == GroupState::kSucceeded ? proto::GroupStatus::SUCCEEDED
                                                   : proto::GroupStatus::FAILED);
    if (failure) {
      *g->mutable_failure() = ToProto(*failure);
      *g->mutable_failure()->mutable_message() = AbbreviateMessage(g->failure().message());
    }
    call_->Send(std::move(m));
  });
}

void RendezvousClient::Leave(const std::string& reason) {
  events_.Silence();
  loop_->Post([this, reason] { Execute(machine_.OnLeave(reason, Now())); });
}

void RendezvousClient::CancelForTesting() {
  loop_->Post([this] { Execute(machine_.OnCancelForTesting()); });
}

// ---- Executing the machine's actions ----

void RendezvousClient::Execute(ClientActions actions) {
  if (closing_) return;  // the destructor holds the calls; nothing new starts
  for (const ClientAction& a : actions) {
    switch (a.type) {
      case ClientAction::Type::kAssigned:
      case ClientAction::Type::kRestart:
      case ClientAction::Type::kStandby:
      case ClientAction::Type::kPreflight:
      case ClientAction::Type::kResumed:
      case ClientAction::Type::kReconnecting:
      case ClientAction::Type::kRejoinAsNewNode:
      case ClientAction::Type::kRenameForRejoin:
      case ClientAction::Type::kClose:
      case ClientAction::Type::kCloseQuietly:
        Tell(a);
        break;
      default:
        ExecuteOnConnection(a);
        break;
    }
  }
  // The liveness path lives while the machine is joined: a broken stream, a fence or a close
  // ends it (a new Joined starts a new one).
  if (liveness_ != nullptr && machine_.state() != ConnectionState::kJoined) liveness_.reset();
}

void RendezvousClient::Tell(const ClientAction& a) {
  switch (a.type) {
    case ClientAction::Type::kAssigned:
      events_.Assigned(a.assignment);
      break;
    case ClientAction::Type::kRestart:
      events_.Restart(a.cause, a.message, a.hang, a.facts);
      break;
    case ClientAction::Type::kStandby:
      events_.Standby(a.standby);
      break;
    case ClientAction::Type::kPreflight:
      events_.Preflight(a.preflight);
      break;
    case ClientAction::Type::kResumed:
      events_.Resumed(a.round);
      break;
    case ClientAction::Type::kReconnecting:
      events_.Reconnecting(a.message);
      break;
    case ClientAction::Type::kRejoinAsNewNode:
      events_.RejoinAsNewNode(a.message, machine_.mutable_node());
      break;
    case ClientAction::Type::kRenameForRejoin:
      events_.RenameForRejoin(machine_.mutable_node());
      break;
    case ClientAction::Type::kClose:
      events_.Close(a.status, a.hang);
      break;
    case ClientAction::Type::kCloseQuietly:
      events_.CloseQuietly();
      break;
    default:
      break;
  }
}

void RendezvousClient::ExecuteOnConnection(const ClientAction& a) {
  switch (a.type) {
    case ClientAction::Type::kStartCall:
      StartCall(a);
      break;
    case ClientAction::Type::kCancelCall:
      if (call_ != nullptr) call_->Cancel();
      break;
    case ClientAction::Type::kRetireCall:
      RetireCall();
      break;
    case ClientAction::Type::kNewEndpoint:
      channel_.reset();
      break;
    case ClientAction::Type::kResetBackoff:
      if (channel_ != nullptr) grpc::experimental::ChannelResetConnectionBackoff(channel_.get());
      break;
    case ClientAction::Type::kSendHeartbeat:
      SendHeartbeat();
      break;
    case ClientAction::Type::kSendLeave:
      if (call_ != nullptr) {
        proto::AgentMessage m;
        m.mutable_leave()->set_reason(a.message);
        call_->Send(std::move(m));
      }
      break;
    case ClientAction::Type::kCutCallLater:
      CutCallLater(a.at);
      break;
    case ClientAction::Type::kWakeAt:
      WakeAt(a);
      break;
    case ClientAction::Type::kCancelWake:
      CancelWake(a.wake.kind);
      break;
    case ClientAction::Type::kProbe:
      Probe(a);
      break;
    case ClientAction::Type::kHostHere:
      HostHere(a.port);
      break;
    case ClientAction::Type::kStopHosting:
      options_.stop_hosting();
      break;
    case ClientAction::Type::kLookForTheRun:
      LookForTheRun(a);
      break;
    case ClientAction::Type::kStartLiveness:
      StartLiveness(a);
      break;
    default:
      break;
  }
}

void RendezvousClient::StartCall(const ClientAction& a) {
  if (channel_ == nullptr) {
    ClientOptions current = options_;
    current.endpoint = machine_.endpoint();
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeRendezvousChannel(current);
    if (!channel.ok()) {
      Execute(machine_.OnStartFailed(channel.status()));
      return;
    }
    channel_ = *std::move(channel);
  }
  // The machine drops the reactions of a call that is no longer current.
  const uint64_t gen = a.generation;
  call_ = std::make_unique<AgentCall>(
      [this, gen](proto::ServerMessage m) {
        loop_->Post([this, gen, m = std::move(m)] {
          if (m.has_ack()) OnCheckpointAdvice(m.ack().checkpoint_interval_s());
          OnServerMessage(gen, WordOf(m));
        });
      },
      [this, gen](grpc::Status s) {
        loop_->Post(
            [this, gen, end = EndOf(s)] { Execute(machine_.OnStreamEnd(gen, end, Now())); });
      });
  unanswered_sent_.clear();
  AddRendezvousAuth(call_->context(), options_.token);
  // Waits for the server to come up instead of failing at once; read_timeout bounds it.
  call_->context()->set_wait_for_ready(true);
  proto::AgentMessage join;
  *join.mutable_join() = ToProto(machine_.node(), options_.timeouts);
  if (machine_.ever_joined()) {
    *join.mutable_join()->mutable_resume() = ToProto(machine_.claim());
    // Proves that this agent is the one that joined as this node (a claim without it, for a
    // node the server knows, is refused).
    join.mutable_join()->mutable_resume()->set_member_key(machine_.member_key());
  }
  // Proves the former id too: without the key it is ignored (the majority rule of an embedded
  // server would otherwise count any token holder as a member that was cut off).
  if (!machine_.node().formerly_node_id.empty()) {
    join.mutable_join()->set_formerly_member_key(machine_.former_key());
  }
  ClientAction read_timeout(ClientAction::Type::kWakeAt);
  read_timeout.at = a.at;
  read_timeout.wake.kind = Wake::Kind::kReadTimeout;
  read_timeout.wake.generation = gen;
  WakeAt(read_timeout);
  call_->Start(channel_, std::move(join));
}

void RendezvousClient::RetireCall() {
  // Finished calls are dropped (a flapping link must not grow this without bound).
  retired_calls_.erase(std::remove_if(retired_calls_.begin(), retired_calls_.end(),
                                      [](const std::unique_ptr<AgentCall>& c) {
                                        return c->done().HasBeenNotified();
                                      }),
                       retired_calls_.end());
  if (call_ != nullptr) retired_calls_.push_back(std::move(call_));
}

void RendezvousClient::WakeAt(const ClientAction& a) {
  uint64_t* timer = a.wake.kind == Wake::Kind::kReadTimeout ? &read_timer_
                    : a.wake.kind == Wake::Kind::kHeartbeat ? &heartbeat_timer_
                                                            : nullptr;
  if (timer != nullptr && *timer != 0) loop_->Cancel(*timer);
  const uint64_t id = loop_->PostAt(a.at, [this, wake = a.wake, timer] {
    if (timer != nullptr) *timer = 0;
    Execute(machine_.OnWake(wake, Now()));
  });
  if (timer != nullptr) *timer = id;
}

void RendezvousClient::CancelWake(Wake::Kind kind) {
  uint64_t* timer = kind == Wake::Kind::kReadTimeout ? &read_timer_ : &heartbeat_timer_;
  if (*timer != 0) loop_->Cancel(*timer);
  *timer = 0;
}

void RendezvousClient::CutCallLater(TimePoint at) {
  // The server answers a leave by closing the stream; cut it if it does not.
  AgentCall* leaving = call_.get();
  if (leaving == nullptr) return;
  loop_->PostAt(at, [this, leaving] {
    if (call_.get() == leaving) call_->Cancel();
    for (const std::unique_ptr<AgentCall>& c : retired_calls_) {
      if (c.get() == leaving) c->Cancel();
    }
  });
}

void RendezvousClient::Probe(const ClientAction& a) {
  // Blocks the loop for at most a.timeout (a.timeout <= 500 ms), as a heartbeat may wait.
  const ProbeResult result = ProbeEndpoint(a.endpoint, a.timeout);
  Execute(machine_.OnProbed(a.wake, result, Now()));
}

void RendezvousClient::HostHere(int port) {
  const absl::Status hosted = options_.host_failover(port);
  Execute(machine_.OnHosted(hosted, port, Now()));
}

void RendezvousClient::StartLiveness(const ClientAction& a) {
  liveness_.reset();
  absl::StatusOr<HostPort> server =
      ParseHostPort("the rendezvous endpoint", machine_.endpoint(), 0);
  if (!server.ok()) {
    LogWarning(absl::StrCat("liveness: ", server.status().message(), "; the lease stays"));
    return;
  }
  SenderOptions o;
  o.host = server->host;
  o.port = a.liveness.port;
  o.node_index = a.liveness.node_index;
  o.key = DeriveLivenessKey(machine_.member_key(), a.liveness.salt, a.liveness.node_index);
  o.interval = a.liveness.settings.interval;
  o.detector = AccrualOptionsOf(a.liveness.settings);
  o.on_ack = options_.on_liveness_ack;  // thread-safe: LocalLease::Renew locks
  const uint64_t generation = a.generation;
  o.on_silent = [this, generation](Duration silent_for) {
    // Posted, not decided here: the machine is the loop's.
    loop_->Post([this, generation, silent_for] {
      Execute(machine_.OnServerSilent(generation, silent_for, Now()));
    });
  };
  absl::StatusOr<std::unique_ptr<LivenessSender>> sender = LivenessSender::Start(std::move(o));
  if (!sender.ok()) {
    LogWarning(absl::StrCat(sender.status().message(), "; the lease stays"));
    return;
  }
  liveness_ = *std::move(sender);
}

void RendezvousClient::SendHeartbeat() {
  if (call_ == nullptr) return;
  proto::AgentMessage m;
  *m.mutable_heartbeat() = ToProto(progress_);
  call_->Send(std::move(m));
  unanswered_sent_.push_back(Now());
}

void RendezvousClient::OnServerMessage(uint64_t generation, const ServerWord& word) {
  // What the word vouches for: the server had this node as a member when it read what the word
  // answers, so no earlier than that was sent. Words that answer nothing vouch for nothing: one
  // read late (this process was stopped) may be older than the server's verdict on this node.
  std::optional<TimePoint> heard_from;
  if (generation == machine_.generation()) {
    if (word.kind == ServerWord::Kind::kAck && !unanswered_sent_.empty()) {
      heard_from = unanswered_sent_.front();
      unanswered_sent_.pop_front();
    } else if (word.kind == ServerWord::Kind::kJoined) {
      // When the join was sent is unknown (the call waits for the server to come up): when it
      // was answered. Read late only if this process was stopped while joining, when it has no
      // workers that could commit (a fence stopped them; kept in-process ones wait for a round).
      heard_from = Now();
    }
  }
  Execute(machine_.OnServerWord(generation, word, Now()));
  // With a liveness path its acks renew the lease too; the lease itself decides which path
  // rules (LocalLease::Renew), so that datagrams that never get through leave the stream's.
  if (heard_from.has_value() && options_.on_server_heard &&
      machine_.state() == ConnectionState::kJoined) {
    options_.on_server_heard(*heard_from);
  }
}

void RendezvousClient::LookForTheRun(const ClientAction& a) {
  ServedRun mine;
  mine.endpoint = a.mine.endpoint;
  mine.order = a.mine.order;
  std::vector<ServedRun> others;
  for (const RunServer& o : a.others) {
    ServedRun s;
    s.endpoint = o.endpoint;
    s.order = o.order;
    others.push_back(s);
  }
  probe_loop_->Post(
      [this, options = options_, run_id = machine_.node().run_id, mine, others]() mutable {
        std::optional<ServedRun> best;
        if (std::optional<ServedRun> own =
                AskServer(options, mine.endpoint, run_id, kLookProbeTimeout, kLookRpcTimeout)) {
          own->order = mine.order;
          mine = *own;
          for (const ServedRun& candidate : others) {
            std::optional<ServedRun> there =
                AskServer(options, candidate.endpoint, run_id, kLookProbeTimeout, kLookRpcTimeout);
            // This agent's own server under another name (on one host, a hostname that resolves
            // here): not the other side of anything.
            if (!there || there->server_instance == mine.server_instance) continue;
            there->order = candidate.order;
            if (Supersedes(*there, best ? *best : mine)) best = there;
          }
        }
        auto server = [](const ServedRun& s) {
          return RunServer{s.endpoint, s.round, s.agents, s.order};
        };
        std::optional<RunServer> found;
        if (best) found = server(*best);
        loop_->Post([this, found, mine = server(mine)] {
          Execute(machine_.OnLookAnswered(found, mine, Now()));
        });
      });
}

}  // namespace ddprun::rendezvous
