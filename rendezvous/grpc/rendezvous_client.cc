#include "rendezvous/grpc/rendezvous_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/loop_thread.h"
#include "common/message_limit.h"
#include "common/strings.h"
#include "grpcpp/grpcpp.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/grpc/agent_call.h"
#include "rendezvous/grpc/endpoint_probe.h"
#include "rendezvous/grpc/proto_convert.h"
#include "rendezvous/grpc/served_run.h"

namespace ddprun::rendezvous {
namespace {

std::string Seconds(std::chrono::milliseconds d) {
  return absl::StrCat(static_cast<double>(d.count()) / 1000.0, " s");
}

void AddAuth(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty()) context->AddMetadata(kAuthMetadataKey, AuthMetadataValue(token));
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeRendezvousChannel(const ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      MakeChannelCredentials(options.tls);
  if (!creds.ok()) return creds.status();
  grpc::ChannelArguments args;
  // Retry an unreachable server quickly: read_timeout bounds the whole attempt anyway.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetMaxReceiveMessageSize(1 << 20);
  if (!options.tls.server_name_override.empty()) {
    args.SetSslTargetNameOverride(options.tls.server_name_override);
  }
  return grpc::CreateCustomChannel(options.endpoint, *creds, args);
}

RendezvousClient::RendezvousClient(ClientOptions options, Executor* executor,
                                   std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      loop_(std::make_unique<LoopThread>()),
      events_(executor),
      heartbeat_interval_(std::chrono::duration_cast<std::chrono::milliseconds>(
          options_.timeouts.keep_alive_interval)) {
  endpoint_ = options_.endpoint;
  if (options_.stop_hosting) probe_loop_ = std::make_unique<LoopThread>();
}

RendezvousClient::~RendezvousClient() {
  events_.Silence();
  // Its question posts the answer to loop_: finished before loop_ goes.
  if (probe_loop_ != nullptr) probe_loop_->Stop();
  loop_->Post([this] {
    if (call_ != nullptr) call_->Cancel();
  });
  // A call's last reaction posts to the loop, so wait for them before stopping the loop.
  std::vector<AgentCall*> calls;
  absl::Notification fetched;
  loop_->Post([this, &calls, &fetched] {
    if (call_ != nullptr) calls.push_back(call_.get());
    for (const auto& retired : retired_calls_) calls.push_back(retired.get());
    fetched.Notify();
  });
  fetched.WaitForNotification();
  for (AgentCall* call : calls) call->done().WaitForNotification();
  loop_->Stop();
}

void RendezvousClient::Closed(absl::Status status, std::optional<HangNotice> hang) {
  if (!events_.Close(status, hang)) return;
  if (read_timer_ != 0) loop_->Cancel(read_timer_);
  if (heartbeat_timer_ != 0) loop_->Cancel(heartbeat_timer_);
  read_timer_ = heartbeat_timer_ = 0;
}

void RendezvousClient::Join(const NodeInfo& node, RendezvousEvents* events) {
  loop_->Post([this, node, events] {
    if (!events_.SetSink(events)) return;
    node_ = node;
    StartCall(options_.read_timeout, "read_timeout");
  });
}

void RendezvousClient::StartCall(std::chrono::milliseconds connect_budget,
                                 const char* budget_name) {
  // A retry, reconnect or failover posted before a StepOut: the node stays out until StepIn.
  if (stepped_out_) return;
  connect_budget_ = connect_budget;
  connect_budget_name_ = budget_name;
  connect_deadline_ = std::chrono::steady_clock::now() + connect_budget;
  if (channel_ == nullptr) {
    ClientOptions current = options_;
    current.endpoint = endpoint_;
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeRendezvousChannel(current);
    if (!channel.ok()) {
      Closed(channel.status());
      return;
    }
    channel_ = *std::move(channel);
  }
  // Reactions of a call replaced by a rejoin are dropped: only the current one speaks.
  const uint64_t gen = ++call_generation_;
  call_ = std::make_unique<AgentCall>(
      [this, gen](proto::ServerMessage m) {
        loop_->Post([this, gen, m = std::move(m)] {
          if (gen == call_generation_) HandleServerMessage(m);
        });
      },
      [this, gen](grpc::Status s) {
        loop_->Post([this, gen, code = static_cast<int>(s.error_code()), msg = s.error_message()] {
          if (gen == call_generation_) HandleDone(code, msg);
        });
      });
  AddAuth(call_->context(), options_.token);
  // Waits for the server to come up instead of failing at once; read_timeout bounds it.
  call_->context()->set_wait_for_ready(true);
  proto::AgentMessage join;
  *join.mutable_join() = ToProto(node_, options_.timeouts);
  if (ever_joined_) {
    *join.mutable_join()->mutable_resume() = ToProto(claim_);
    // Proves that this agent is the one that joined as this node (a claim without it, for a
    // node the server knows, is refused).
    join.mutable_join()->mutable_resume()->set_member_key(member_key_);
  }
  // Proves the former id too: without the key it is ignored (the majority rule of an embedded
  // server would otherwise count any token holder as a member that was cut off).
  if (!node_.formerly_node_id.empty()) join.mutable_join()->set_formerly_member_key(former_key_);
  read_timer_ = loop_->PostAt(std::chrono::steady_clock::now() + connect_budget, [this, gen] {
    read_timer_ = 0;
    if (gen != call_generation_ || joined_ || events_.closed()) return;
    timed_out_ = true;
    call_->Cancel();
  });
  call_->Start(channel_, std::move(join));
}

void RendezvousClient::HandleServerMessage(const proto::ServerMessage& m) {
  if (events_.closed()) return;
  last_heard_ = std::chrono::steady_clock::now();
  unanswered_ = 0;
  switch (m.msg_case()) {
    case proto::ServerMessage::kAck:
      break;
    case proto::ServerMessage::kJoined:
      if (joined_) break;
      joined_ = true;
      ever_joined_ = true;
      server_embedded_ = m.joined().embedded();
      host_node_id_ = m.joined().host_node_id();
      failing_over_ = false;
      member_key_ = m.joined().member_key();
      reconnecting_ = false;
      server_down_ = false;
      reconnect_attempts_ = 0;
      join_broken_because_.clear();
      if (read_timer_ != 0) loop_->Cancel(read_timer_);
      read_timer_ = 0;
      last_heard_ = std::chrono::steady_clock::now();
      // The run's lease follows its first agent's settings, which may be stricter than ours.
      if (const int64_t run_ms = m.joined().keep_alive_interval_ms();
          run_ms > 0 && std::chrono::milliseconds(run_ms) < heartbeat_interval_) {
        heartbeat_interval_ = std::chrono::milliseconds(run_ms);
      }
      ScheduleHeartbeat();
      break;
    case proto::ServerMessage::kAssignment: {
      Assignment a = FromProto(m.assignment());
      if (!a.successors.empty()) RememberMembers(a.successors);
      // An agent that joined before the host did learned no host from Joined.
      if (!m.assignment().host_node_id().empty()) host_node_id_ = m.assignment().host_node_id();
      claim_.last = a;
      claim_.gone_group_rank.reset();
      claim_.restarts_used = std::max(claim_.restarts_used, a.restart_count);
      claim_.group = ResumeClaim::Group::kRunning;
      claim_.failure.reset();
      events_.Assigned(a);
      break;
    }
    case proto::ServerMessage::kRestart: {
      claim_.restarts_used = std::max(claim_.restarts_used, m.restart().restart_count());
      if (m.restart().round() >= claim_.last.round) {
        claim_.group = ResumeClaim::Group::kWaiting;
        waiting_since_ = std::chrono::steady_clock::now();
      }
      events_.Restart(FromProto(m.restart().cause()), m.restart().reason(), HangOf(m.restart()));
      break;
    }
    case proto::ServerMessage::kResumed: {
      events_.Resumed(m.resumed().round());
      break;
    }
    case proto::ServerMessage::kClose: {
      if (m.close().given_up()) {
        // The verdict that fencing anticipates, heard after all (this agent was stopped longer
        // than the lease, or its link came back just too late): the same way out.
        Fence(absl::StrCat("fenced: the rendezvous server gave this node up (", m.close().message(),
                           ")"));
        break;
      }
      Closed(CloseStatus(m.close()), HangOf(m.close()));
      break;
    }
    default:
      break;  // a newer server's message this client does not know
  }
}

void RendezvousClient::HandleDone(int grpc_code, const std::string& message) {
  const std::string where = endpoint_;
  const auto code = static_cast<grpc::StatusCode>(grpc_code);
  if (joined_ && server_embedded_ && !events_.closed()) {
    joined_ = false;
    RetireCall();
    DecideFailover(absl::StrCat("lost the rendezvous stream to ", where, ": ", message,
                                " (gRPC code ", grpc_code, ")"),
                   std::chrono::steady_clock::now() + kFailoverProbing, 0);
    return;
  }
  if (!events_.closed() && !timed_out_ && code != grpc::StatusCode::UNAUTHENTICATED &&
      (joined_ || reconnecting_)) {
    Reconnect(code == grpc::StatusCode::OK
                  ? absl::StrCat("the rendezvous server at ", where, " ended the stream")
                  : absl::StrCat("lost the rendezvous stream to ", where, ": ", message,
                                 " (gRPC code ", grpc_code, ")"));
    return;
  }
  if (timed_out_ && failing_over_ && !events_.closed()) {
    // This successor did not take the run within its lease: the next one.
    timed_out_ = false;
    AdvanceFailover();
    return;
  }
  if (timed_out_ && reconnecting_) {
    Closed(absl::UnavailableError(
        absl::StrCat("no rendezvous server answered at ", where, " for read_timeout (",
                     Seconds(options_.read_timeout), ") after ", broken_because_)));
  } else if (timed_out_) {
    Closed(absl::UnavailableError(absl::StrCat(
        "cannot reach the rendezvous server at ", where, " within ", connect_budget_name_, " (",
        Seconds(connect_budget_), ")", message.empty() ? "" : ": ", message,
        join_broken_because_.empty() ? "" : "; earlier: ", join_broken_because_)));
  } else if (code == grpc::StatusCode::UNAVAILABLE && !events_.closed()) {
    // Not admitted yet and the connection broke under the join: a link still down after this
    // node was fenced (gRPC reports "No route to host", "Connection timed out" from the old
    // connection or the new one), a server restarting. Neither is an answer: try again until
    // the join's budget runs out (join_timeout after a fence, read_timeout at the start).
    RetryJoin(absl::StrCat("lost the rendezvous stream to ", where, " while joining: ", message,
                           " (gRPC code ", grpc_code, ")"));
  } else if (code == grpc::StatusCode::UNAUTHENTICATED) {
    Closed(absl::UnauthenticatedError(
        absl::StrCat("the rendezvous server at ", where, " refused this agent: ", message)));
  } else if (code == grpc::StatusCode::OK) {
    Closed(absl::UnavailableError(
        absl::StrCat("the rendezvous server at ", where, " ended the stream")));
  } else {
    Closed(absl::UnavailableError(absl::StrCat("lost the rendezvous stream to ", where, ": ",
                                               message, " (gRPC code ", grpc_code, ")")));
  }
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

std::chrono::milliseconds RendezvousClient::NextBackoff() {
  // 100 ms doubling to 1 s: a server that accepts and drops the stream at once must not turn
  // retries into a busy loop. The channel's own reconnect backoff paces connects.
  return std::min<std::chrono::milliseconds>(
      std::chrono::milliseconds(100 << std::min(reconnect_attempts_++, 4)),
      std::chrono::milliseconds(1000));
}

void RendezvousClient::RetryJoin(const std::string& why) {
  if (join_broken_because_.empty()) {
    events_.Reconnecting(absl::StrCat(why, "; trying again until ", connect_budget_name_, " (",
                                      Seconds(connect_budget_), ")"));
  }
  join_broken_because_ = why;
  RetireCall();
  loop_->PostAt(std::chrono::steady_clock::now() + NextBackoff(), [this] {
    if (events_.closed() || joined_ || reconnecting_ || call_ != nullptr) return;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        connect_deadline_ - std::chrono::steady_clock::now());
    if (left <= std::chrono::milliseconds::zero()) {
      Closed(absl::UnavailableError(absl::StrCat(
          "cannot reach the rendezvous server at ", endpoint_, " within ", connect_budget_name_,
          " (", Seconds(connect_budget_), "): ", join_broken_because_)));
      return;
    }
    const std::chrono::milliseconds budget = connect_budget_;
    StartCall(left, connect_budget_name_);
    connect_budget_ = budget;  // the budget named in messages stays the whole one
  });
}

void RendezvousClient::DecideFailover(const std::string& why, TimePoint until,
                                      int accepting_in_a_row) {
  if (stepped_out_) return;  // as in StartCall
  if (events_.closed()) return;
  // A server that is certainly gone (its address refuses connections: its agent died, its host
  // is up) is replaced at once, and the claims name its host gone. One that does not answer
  // may be alive on the other side of a partition, with the others still talking to it: the
  // survivors fail over too, but the host counts as silent, and the majority rule
  // (core/last_round_majority.h) lets only one side form rounds (a static job's agents await
  // the host's return instead). While the dying agent's sockets close one by one its listener
  // may still accept, or reset a connection half made, so the address is asked again, 50 ms
  // apart: a listener that accepts five times in a row (200 ms) is a server (a successor on the
  // same host and port, or the server itself, which only ended this stream; either takes a
  // re-registration, as a restarted ddprun-rdzv would); no answer counts only at `until`.
  const TimePoint now = std::chrono::steady_clock::now();
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
  const ProbeResult probe = ProbeEndpoint(
      endpoint_, std::clamp(left, std::chrono::milliseconds(50), std::chrono::milliseconds(500)));
  if (probe == ProbeResult::kRefused && options_.host_loss == HostLoss::kAwaitReturn) {
    Reconnect(absl::StrCat(why,
                           "; the agent that hosted the rendezvous is gone (its address "
                           "refuses connections): waiting for it to come back there"));
    return;
  }
  if (probe == ProbeResult::kRefused && !successors_.empty()) {
    StartFailover(why, /*host_refused=*/true);
    return;
  }
  accepting_in_a_row = probe == ProbeResult::kAccepting ? accepting_in_a_row + 1 : 0;
  if (accepting_in_a_row < 5 && std::chrono::steady_clock::now() < until) {
    loop_->PostAt(
        std::chrono::steady_clock::now() + std::chrono::milliseconds(50),
        [this, why, until, accepting_in_a_row] { DecideFailover(why, until, accepting_in_a_row); });
    return;
  }
  if (probe == ProbeResult::kAccepting) {
    Reconnect(why);
    return;
  }
  if (FailsOverOnSilence()) {
    // No answer: the host is down or cut off, or this node is. As after a lease of silence,
    // the survivors fail over and the majority rule decides which side goes on.
    StartFailover(absl::StrCat(why, " (its address: ", ProbeResultName(probe), ")"),
                  /*host_refused=*/false);
    return;
  }
  Closed(absl::UnavailableError(absl::StrCat(
      why, "; that server was hosted by an agent, which cannot be reached (",
      ProbeResultName(probe),
      "): this node may be the one cut off, so no successor takes over here (ddprun-rdzv or "
      "etcd survive a server restart)")));
}

void RendezvousClient::StartFailover(const std::string& why, bool host_refused) {
  if (stepped_out_) return;  // as in StartCall
  failover_candidates_.clear();
  for (size_t i = 0; i < successors_.size(); ++i) {
    if (successors_[i].node_id != host_node_id_) {
      failover_candidates_.push_back(successors_[i]);
    } else if (claim_.last.round > 0 && host_refused) {
      // The list is in group-rank order: the host's group rank in the round this node claims.
      claim_.gone_group_rank = static_cast<int>(i);
    }
  }
  failing_over_ = true;
  failover_next_ = 0;
  reconnecting_ = true;
  server_down_ = false;
  broken_because_ = why;
  reconnect_deadline_ = std::chrono::steady_clock::now() + options_.read_timeout;
  events_.Reconnecting(absl::StrCat(
      why,
      host_refused
          ? "; the agent that hosted the rendezvous is gone (its address refuses connections): "
            "the run moves to its successor, the workers keep running meanwhile"
          : "; the agent that hosted the rendezvous is gone or cut off: the run moves to its "
            "successor, which goes on only with a majority of the last round's members"));
  AdvanceFailover();
}

void RendezvousClient::RememberMembers(const std::vector<Successor>& members) {
  auto in = [](const std::vector<Successor>& list, const Successor& s) {
    return std::any_of(list.begin(), list.end(),
                       [&s](const Successor& o) { return o.node_id == s.node_id; });
  };
  std::vector<Successor> earlier;
  for (const Successor& s : successors_) {
    if (!in(members, s) && s.node_id != node_.node_id) earlier.push_back(s);
  }
  for (const Successor& s : earlier_members_) {
    if (!in(members, s) && !in(earlier, s)) earlier.push_back(s);
  }
  if (earlier.size() > kMaxEarlierMembers) earlier.resize(kMaxEarlierMembers);
  earlier_members_ = std::move(earlier);
  successors_ = members;
}

bool RendezvousClient::FailsOverOnSilence() const {
  return server_embedded_ && options_.host_loss == HostLoss::kFailOver && !successors_.empty() &&
         !host_node_id_.empty() && host_node_id_ != node_.node_id;
}

void RendezvousClient::MaybeLookForTheRun() {
  const TimePoint now = std::chrono::steady_clock::now();
  if (probe_loop_ == nullptr || looking_ || !joined_ || !server_embedded_ ||
      host_node_id_ != node_.node_id || claim_.group != ResumeClaim::Group::kWaiting ||
      claim_.last.round == 0 || successors_.empty() || now - waiting_since_ < Lease() ||
      now - last_look_ < Lease()) {
    return;
  }
  looking_ = true;
  last_look_ = now;
  // The other hosts of the last round, in the job's order: the endpoint the user gave (the
  // original host), then the members by group rank. Never this agent's own server, which a
  // loopback address names too (`localhost:PORT` on one host, where a successor serves the
  // original endpoint's port).
  const int port = ParseHostPort("endpoint", endpoint_, 0).value_or(HostPort{}).port;
  ServedRun mine;
  mine.endpoint = endpoint_;
  mine.order = -1;
  std::vector<ServedRun> others;
  auto consider = [&](const std::string& endpoint, int order) {
    if (endpoint == endpoint_) return;
    const absl::StatusOr<HostPort> where = ParseHostPort("endpoint", endpoint, 0);
    if (!where.ok() || IsLoopbackHost(where->host)) return;
    for (const ServedRun& o : others) {
      if (o.endpoint == endpoint) return;
    }
    ServedRun o;
    o.endpoint = endpoint;
    o.order = order;
    others.push_back(o);
  };
  consider(options_.endpoint, -1);
  for (size_t i = 0; i < successors_.size(); ++i) {
    if (successors_[i].node_id == node_.node_id) {
      if (endpoint_ != options_.endpoint) mine.order = static_cast<int>(i);
      continue;
    }
    consider(FormatHostPort(successors_[i].addr, port), static_cast<int>(i));
  }
  for (size_t i = 0; i < earlier_members_.size(); ++i) {
    consider(FormatHostPort(earlier_members_[i].addr, port),
             static_cast<int>(successors_.size() + i));
  }
  probe_loop_->Post([this, options = options_, run_id = node_.run_id, mine, others]() mutable {
    constexpr std::chrono::milliseconds kProbe{300}, kRpc{1000};
    std::optional<ServedRun> best;
    if (std::optional<ServedRun> own = AskServer(options, mine.endpoint, run_id, kProbe, kRpc)) {
      own->order = mine.order;
      mine = *own;
      for (const ServedRun& candidate : others) {
        std::optional<ServedRun> there =
            AskServer(options, candidate.endpoint, run_id, kProbe, kRpc);
        // This agent's own server under another name (on one host, a hostname that resolves
        // here): not the other side of anything.
        if (!there || there->server_instance == mine.server_instance) continue;
        there->order = candidate.order;
        if (Supersedes(*there, best ? *best : mine)) best = there;
      }
    }
    loop_->Post([this, best, mine] {
      looking_ = false;
      if (best) FollowServedRun(*best, mine);
    });
  });
}

void RendezvousClient::FollowServedRun(const ServedRun& other, const ServedRun& mine) {
  // Still hosting and still without a round: the answer is not stale.
  if (events_.closed() || !joined_ || host_node_id_ != node_.node_id ||
      claim_.group != ResumeClaim::Group::kWaiting) {
    return;
  }
  events_.Reconnecting(absl::StrCat(
      "run '", node_.run_id, "' is served at ", other.endpoint, " (round ", other.round, ", ",
      other.agents, " agent(s)) while the server this agent hosts at ", mine.endpoint,
      " has formed no round since round ", claim_.last.round, " (", mine.agents,
      " agent(s)): the two sides of a partition; this agent stops hosting and joins there"));
  if (call_ != nullptr) call_->Cancel();
  RetireCall();
  joined_ = false;
  options_.stop_hosting();
  endpoint_ = other.endpoint;
  channel_.reset();
  failing_over_ = false;
  reconnecting_ = false;
  timed_out_ = false;
  join_broken_because_.clear();
  StartCall(std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeouts.join_timeout),
            "join_timeout");
}

void RendezvousClient::AdvanceFailover() {
  if (failover_next_ >= failover_candidates_.size()) {
    Closed(absl::UnavailableError(absl::StrCat(
        "the rendezvous server hosted by an agent is gone (", broken_because_, ") and none of its ",
        failover_candidates_.size(), " successor(s) took the run over within its lease")));
    return;
  }
  const Successor next = failover_candidates_[failover_next_++];
  const int port = ParseHostPort("endpoint", endpoint_, 0).value_or(HostPort{}).port;
  if (next.node_id == node_.node_id && options_.host_failover) {
    // Every survivor walks the same list in the same order, so this agent is the one all of
    // them go to now.
    const absl::Status hosted = options_.host_failover(port);
    events_.Reconnecting(
        hosted.ok() ? absl::StrCat("this agent now hosts the rendezvous on port ", port,
                                   " (the successor of the agent that was lost)")
                    : absl::StrCat("this agent is the successor but cannot host the rendezvous: ",
                                   hosted.message()));
  }
  const TimePoint now = std::chrono::steady_clock::now();
  endpoint_ = FormatHostPort(next.addr, port);
  channel_.reset();
  // Each successor gets a lease to take the run; fencing measures silence from here.
  candidate_deadline_ = now + Lease();
  last_heard_ = now;
  joined_ = false;
  RetireCall();
  StartCall(std::chrono::duration_cast<std::chrono::milliseconds>(candidate_deadline_ - now),
            "the successor's lease");
}

void RendezvousClient::Reconnect(const std::string& why) {
  const TimePoint now = std::chrono::steady_clock::now();
  if (!reconnecting_) {
    reconnecting_ = true;
    server_down_ = false;
    broken_because_ = why;
    reconnect_deadline_ = now + options_.read_timeout;
    events_.Reconnecting(absl::StrCat(why,
                                      "; the workers keep running while this agent re-registers "
                                      "(for up to read_timeout, ",
                                      Seconds(options_.read_timeout), ")"));
  }
  joined_ = false;
  RetireCall();
  loop_->PostAt(now + NextBackoff(), [this] {
    if (events_.closed() || !reconnecting_ || call_ != nullptr) return;
    const TimePoint deadline =
        failing_over_ ? std::min(candidate_deadline_, reconnect_deadline_) : reconnect_deadline_;
    if (failing_over_ && std::chrono::steady_clock::now() >= candidate_deadline_) {
      AdvanceFailover();
      return;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left <= std::chrono::milliseconds::zero()) {
      Closed(absl::UnavailableError(
          absl::StrCat("no rendezvous server answered at ", endpoint_, " for read_timeout (",
                       Seconds(options_.read_timeout), ") after ", broken_because_)));
      return;
    }
    StartCall(left, "read_timeout");
  });
  if (heartbeat_timer_ == 0) ScheduleHeartbeat();  // keeps judging the silence (fencing)
}

void RendezvousClient::ScheduleHeartbeat() {
  if (heartbeat_timer_ != 0) loop_->Cancel(heartbeat_timer_);
  heartbeat_timer_ = loop_->PostAt(std::chrono::steady_clock::now() + heartbeat_interval_, [this] {
    heartbeat_timer_ = 0;
    if (events_.closed()) return;
    if (reconnecting_) {
      JudgeSilenceWhileReconnecting();
      if (events_.closed() || !reconnecting_) return;
      ScheduleHeartbeat();
      return;
    }
    if (call_ == nullptr) return;
    // Fencing: the server answers every heartbeat, so a lease without a word from it means
    // this node is cut off and its peers have already given it up (a broken connection is
    // reported by gRPC; a silent partition is not, until its keepalive decides much later).
    // Counted in unanswered heartbeats too, so that an agent that was itself stopped (SIGSTOP,
    // a frozen VM) hears the server's verdict before judging the silence.
    const Duration lease = Lease();
    const Duration silent = std::chrono::steady_clock::now() - last_heard_;
    if (silent > lease && unanswered_ >= LeaseAttempts() && FailsOverOnSilence()) {
      call_->Cancel();
      RetireCall();
      joined_ = false;
      StartFailover(absl::StrCat("no word from the rendezvous server at ", endpoint_, " for ",
                                 ToMillis(silent), " ms (the lease is ", ToMillis(lease), " ms)"),
                    /*host_refused=*/false);
      return;
    }
    if (silent > lease && unanswered_ >= LeaseAttempts()) {
      Fence(absl::StrCat("fenced: no word from the rendezvous server at ", endpoint_, " for ",
                         ToMillis(silent), " ms (the lease is ", ToMillis(lease),
                         " ms): this node is cut off and its peers have given it up"));
      return;
    }
    SendHeartbeat();
    ScheduleHeartbeat();
    MaybeLookForTheRun();
  });
}

void RendezvousClient::JudgeSilenceWhileReconnecting() {
  // No stream. Silence for the lease means this node's peers have given it up, unless the
  // server's address refuses connections: a server that is down gives nobody up, and its
  // successor (or itself, restarted) rebuilds the run from the agents that come back. So while
  // it refuses, silence does not count, and once it accepts again this node gets a whole lease
  // to re-register (the channel is told to connect now rather than after its backoff).
  // A failover walk gives each successor its own lease (AdvanceFailover).
  if (failing_over_) return;
  const Duration lease = Lease();
  const Duration silent = std::chrono::steady_clock::now() - last_heard_;
  if (silent <= lease && !server_down_) return;
  const ProbeResult probe = ProbeEndpoint(
      endpoint_, std::min<std::chrono::milliseconds>(
                     std::chrono::milliseconds(500),
                     std::chrono::duration_cast<std::chrono::milliseconds>(heartbeat_interval_)));
  if (probe == ProbeResult::kRefused) {
    server_down_ = true;
    last_heard_ = std::chrono::steady_clock::now();
    return;
  }
  if (server_down_) {
    server_down_ = false;
    last_heard_ = std::chrono::steady_clock::now();
    if (channel_ != nullptr) grpc::experimental::ChannelResetConnectionBackoff(channel_.get());
    return;
  }
  Fence(absl::StrCat("fenced: the rendezvous server at ", endpoint_, " has not been reachable for ",
                     ToMillis(silent), " ms (the lease is ", ToMillis(lease),
                     " ms; a connection to it: ", ProbeResultName(probe),
                     "): this node is cut off and its peers have given it up"));
}

void RendezvousClient::Fence(const std::string& why) {
  if (call_ != nullptr) call_->Cancel();
  reconnecting_ = false;
  if (node_.min_nodes == node_.max_nodes) {  // a fixed world cannot go on without this node
    Closed(absl::UnavailableError(why));
    return;
  }
  // Elastic: the others went on without this node. Stop the workers and come back as a new
  // node (a scale-up for the others, no budget spent) once the network lets us, until
  // join_timeout. The old call is cancelled; its reactions are dropped.
  events_.RejoinAsNewNode(why, &node_);
  JoinAsNewNode();
}

void RendezvousClient::JoinAsNewNode() {
  waiting_since_ = std::chrono::steady_clock::now();
  // The key was the old node id's: it now proves the claim to have been that node, and the new
  // node gets its own.
  former_key_ = std::exchange(member_key_, std::string());
  claim_.group = ResumeClaim::Group::kWaiting;  // its workers are being stopped
  RetireCall();
  joined_ = false;
  timed_out_ = false;
  unanswered_ = 0;
  join_broken_because_.clear();
  StartCall(std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeouts.join_timeout),
            "join_timeout");
}

void RendezvousClient::StepOut(const std::string& reason) {
  loop_->Post([this, reason] {
    if (events_.closed() || stepped_out_) return;
    stepped_out_ = true;
    if (heartbeat_timer_ != 0) loop_->Cancel(heartbeat_timer_);
    if (read_timer_ != 0) loop_->Cancel(read_timer_);
    heartbeat_timer_ = read_timer_ = 0;
    ++call_generation_;  // the old stream's last reactions are not ours to act on
    if (call_ != nullptr) {
      proto::AgentMessage m;
      m.mutable_leave()->set_reason(reason);
      call_->Send(std::move(m));
      // The server answers a leave by closing the stream; cut it if it does not.
      AgentCall* leaving = call_.get();
      loop_->PostAt(std::chrono::steady_clock::now() + options_.close_timeout, [this, leaving] {
        for (const std::unique_ptr<AgentCall>& c : retired_calls_) {
          if (c.get() == leaving) c->Cancel();
        }
      });
    }
    RetireCall();
    joined_ = false;
    reconnecting_ = false;
    failing_over_ = false;
  });
}

void RendezvousClient::StepIn() {
  loop_->Post([this] {
    if (events_.closed() || !stepped_out_) return;
    stepped_out_ = false;
    events_.RenameForRejoin(&node_);
    JoinAsNewNode();
  });
}

void RendezvousClient::SendHeartbeat() {
  proto::AgentMessage m;
  *m.mutable_heartbeat() = ToProto(progress_);
  call_->Send(std::move(m));
  ++unanswered_;
}

void RendezvousClient::ReportProgress(const std::vector<RankProgress>& progress, bool urgent) {
  loop_->Post([this, progress, urgent] {
    progress_ = progress;
    if (urgent && joined_ && !events_.closed() && call_ != nullptr) SendHeartbeat();
  });
}

void RendezvousClient::ReportStep(const std::string& json) {
  loop_->Post([this, json] {
    if (!joined_ || events_.closed() || call_ == nullptr) return;
    proto::AgentMessage m;
    if (json.size() > kMaxStructuredMessageBytes) return;  // never a cut object (message_limit.h)
    m.mutable_step()->set_json(json);
    call_->Send(std::move(m));
  });
}

void RendezvousClient::ReportGroupState(int64_t round, GroupState state,
                                        const std::optional<WorkerFailure>& failure) {
  loop_->Post([this, round, state, failure] {
    // A re-registration says it too. Not once a restart of that round was heard (kWaiting): the
    // agent reports what its workers did before it stopped them, and a claim of a group running
    // would keep a hosting agent that waits for a round from looking for the other side of a
    // partition (MaybeLookForTheRun), and tell a new server a round is running that is not.
    if (round == claim_.last.round && round > 0 && claim_.group != ResumeClaim::Group::kWaiting) {
      claim_.Report(state, failure);
    }
    if (events_.closed() || call_ == nullptr) return;
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
  loop_->Post([this, reason] {
    if (!events_.CloseQuietly() || call_ == nullptr) return;
    if (heartbeat_timer_ != 0) loop_->Cancel(heartbeat_timer_);
    if (read_timer_ != 0) loop_->Cancel(read_timer_);
    heartbeat_timer_ = read_timer_ = 0;
    proto::AgentMessage m;
    m.mutable_leave()->set_reason(reason);
    call_->Send(std::move(m));
    // The server answers a leave by closing the stream; cut it if it does not.
    loop_->PostAt(std::chrono::steady_clock::now() + options_.close_timeout,
                  [this] { call_->Cancel(); });
  });
}

void RendezvousClient::CancelForTesting() {
  loop_->Post([this] {
    events_.CloseQuietly();  // a crashed agent neither reconnects nor hears anything
    if (heartbeat_timer_ != 0) loop_->Cancel(heartbeat_timer_);
    if (read_timer_ != 0) loop_->Cancel(read_timer_);
    heartbeat_timer_ = read_timer_ = 0;
    if (call_ != nullptr) call_->Cancel();
  });
}

absl::StatusOr<RunStatus> QueryRunStatus(const ClientOptions& options, const std::string& run_id) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeRendezvousChannel(options);
  if (!channel.ok()) return channel.status();
  auto stub = proto::RendezvousService::NewStub(*channel);
  grpc::ClientContext context;
  AddAuth(&context, options.token);
  context.set_deadline(std::chrono::system_clock::now() + options.rpc_timeout);
  proto::StatusRequest request;
  request.set_run_id(run_id);
  proto::StatusResponse response;
  grpc::Status status = stub->Status(&context, request, &response);
  if (!status.ok()) {
    const std::string what = absl::StrCat("status of run '", run_id, "' from ", options.endpoint,
                                          ": ", status.error_message());
    switch (status.error_code()) {
      case grpc::StatusCode::UNAUTHENTICATED:
        return absl::UnauthenticatedError(what);
      case grpc::StatusCode::NOT_FOUND:
        return absl::NotFoundError(what);
      default:
        return absl::UnavailableError(what);
    }
  }
  RunStatus s;
  s.run_id = response.run_id();
  s.round = response.round();
  s.phase = response.phase() == "running"      ? RunPhase::kRunning
            : response.phase() == "recovering" ? RunPhase::kRecovering
            : response.phase() == "closed"     ? RunPhase::kClosed
                                               : RunPhase::kJoining;
  s.restarts_used = response.restarts_used();
  s.max_restarts = response.max_restarts();
  s.min_nodes = response.min_nodes();
  s.max_nodes = response.max_nodes();
  s.close_message = response.close_message();
  s.server_instance = response.server_instance();
  for (const proto::Member& m : response.members()) {
    s.members.push_back(
        {m.node_id(), m.hostname(), m.addr(), m.group_rank(), m.nproc_per_node(), m.state()});
  }
  return s;
}

}  // namespace ddprun::rendezvous
