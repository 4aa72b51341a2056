#include "rendezvous/client/connection_state.h"

#include <algorithm>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;

std::string Seconds(milliseconds d) {
  return absl::StrCat(static_cast<double>(d.count()) / 1000.0, " s");
}

}  // namespace

milliseconds ConnectionStateMachine::Millis(Duration d) {
  return std::chrono::duration_cast<milliseconds>(d);
}

const char* ConnectionStateName(ConnectionState state) {
  switch (state) {
    case ConnectionState::kIdle:
      return "idle";
    case ConnectionState::kJoining:
      return "joining";
    case ConnectionState::kJoined:
      return "joined";
    case ConnectionState::kProbingHost:
      return "probing-host";
    case ConnectionState::kReconnecting:
      return "reconnecting";
    case ConnectionState::kServerDown:
      return "server-down";
    case ConnectionState::kFailingOver:
      return "failing-over";
    case ConnectionState::kSteppedOut:
      return "stepped-out";
    case ConnectionState::kClosed:
      return "closed";
  }
  return "?";
}

ConnectionStateMachine::ConnectionStateMachine(ConnectionConfig config)
    : config_(std::move(config)),
      endpoint_(config_.endpoint),
      heartbeat_interval_(Millis(config_.timeouts.keep_alive_interval)) {}

int ConnectionStateMachine::LeaseAttempts() const {
  return std::max(1, config_.timeouts.keep_alive_max_attempt);
}

Duration ConnectionStateMachine::Lease() const { return heartbeat_interval_ * LeaseAttempts(); }

bool ConnectionStateMachine::Reconnecting() const {
  return state_ == ConnectionState::kReconnecting || state_ == ConnectionState::kServerDown ||
         state_ == ConnectionState::kFailingOver;
}

ClientActions ConnectionStateMachine::Flush() { return std::exchange(out_, {}); }

void ConnectionStateMachine::Tell(ClientAction::Type type, std::string message) {
  ClientAction a(type);
  a.message = std::move(message);
  Do(std::move(a));
}

void ConnectionStateMachine::Close(absl::Status status, std::optional<HangNotice> hang) {
  if (Closed()) return;
  state_ = ConnectionState::kClosed;
  ClientAction a(ClientAction::Type::kClose);
  a.status = std::move(status);
  a.hang = std::move(hang);
  Do(std::move(a));
  for (Wake::Kind kind : {Wake::Kind::kReadTimeout, Wake::Kind::kHeartbeat}) {
    ClientAction cancel(ClientAction::Type::kCancelWake);
    cancel.wake.kind = kind;
    Do(std::move(cancel));
  }
  read_armed_ = heartbeat_armed_ = false;
}

// ---- The agent's calls ----

ClientActions ConnectionStateMachine::OnJoin(const NodeInfo& node, TimePoint now) {
  node_ = node;
  if (state_ == ConnectionState::kIdle) state_ = ConnectionState::kJoining;
  StartCall(config_.read_timeout, "read_timeout", now);
  return Flush();
}

ClientActions ConnectionStateMachine::OnStepOut(const std::string& reason, TimePoint now) {
  if (Closed() || state_ == ConnectionState::kSteppedOut) return {};
  state_ = ConnectionState::kSteppedOut;
  for (Wake::Kind kind : {Wake::Kind::kHeartbeat, Wake::Kind::kReadTimeout}) {
    ClientAction cancel(ClientAction::Type::kCancelWake);
    cancel.wake.kind = kind;
    Do(std::move(cancel));
  }
  heartbeat_armed_ = read_armed_ = false;
  ++call_generation_;  // the old stream's last reactions are not ours to act on
  if (has_call_) {
    Tell(ClientAction::Type::kSendLeave, reason);
    // The server answers a leave by closing the stream; cut it if it does not.
    ClientAction cut(ClientAction::Type::kCutCallLater);
    cut.at = now + config_.close_timeout;
    Do(std::move(cut));
  }
  RetireCall();
  return Flush();
}

ClientActions ConnectionStateMachine::OnStepIn(TimePoint now) {
  if (Closed() || state_ != ConnectionState::kSteppedOut) return {};
  state_ = ConnectionState::kJoining;
  Do(ClientAction(ClientAction::Type::kRenameForRejoin));
  JoinAsNewNode(now);
  return Flush();
}

ClientActions ConnectionStateMachine::OnLeave(const std::string& reason, TimePoint now) {
  if (Closed()) return {};
  state_ = ConnectionState::kClosed;
  Do(ClientAction(ClientAction::Type::kCloseQuietly));
  if (!has_call_) return Flush();
  for (Wake::Kind kind : {Wake::Kind::kHeartbeat, Wake::Kind::kReadTimeout}) {
    ClientAction cancel(ClientAction::Type::kCancelWake);
    cancel.wake.kind = kind;
    Do(std::move(cancel));
  }
  heartbeat_armed_ = read_armed_ = false;
  Tell(ClientAction::Type::kSendLeave, reason);
  ClientAction cut(ClientAction::Type::kCutCallLater);
  cut.at = now + config_.close_timeout;
  Do(std::move(cut));
  return Flush();
}

ClientActions ConnectionStateMachine::OnCancelForTesting() {
  state_ = ConnectionState::kClosed;  // a crashed agent neither reconnects nor hears anything
  Do(ClientAction(ClientAction::Type::kCloseQuietly));
  for (Wake::Kind kind : {Wake::Kind::kHeartbeat, Wake::Kind::kReadTimeout}) {
    ClientAction cancel(ClientAction::Type::kCancelWake);
    cancel.wake.kind = kind;
    Do(std::move(cancel));
  }
  heartbeat_armed_ = read_armed_ = false;
  if (has_call_) Do(ClientAction(ClientAction::Type::kCancelCall));
  return Flush();
}

ClientActions ConnectionStateMachine::OnProgress(bool urgent) {
  if (urgent && Joined() && has_call_) {
    Do(ClientAction(ClientAction::Type::kSendHeartbeat));
    ++unanswered_;
  }
  return Flush();
}

bool ConnectionStateMachine::MaySendStep() const { return Joined() && has_call_; }

bool ConnectionStateMachine::MaySendGroupState() const { return !Closed() && has_call_; }

void ConnectionStateMachine::OnGroupState(int64_t round, GroupState state,
                                          const std::optional<WorkerFailure>& failure) {
  // A re-registration says it too. Not once a restart of that round was heard (kWaiting): the
  // agent reports what its workers did before it stopped them, and a claim of a group running
  // would keep a hosting agent that waits for a round from looking for the other side of a
  // partition (MaybeLookForTheRun), and tell a new server a round is running that is not.
  if (round == claim_.last.round && round > 0 && claim_.group != ResumeClaim::Group::kWaiting) {
    claim_.Report(state, failure);
  }
}

// ---- Calls ----

void ConnectionStateMachine::StartCall(milliseconds budget, const char* budget_name,
                                       TimePoint now) {
  // A retry, reconnect or failover decided before a StepOut: the node stays out until StepIn.
  if (state_ == ConnectionState::kSteppedOut) return;
  connect_budget_ = budget;
  connect_budget_name_ = budget_name;
  connect_deadline_ = now + budget;
  // Reactions of a call replaced by a rejoin are dropped: only the current one speaks.
  ClientAction a(ClientAction::Type::kStartCall);
  a.generation = ++call_generation_;
  a.at = now + budget;
  Do(std::move(a));
  has_call_ = true;
  read_armed_ = true;
}

ClientActions ConnectionStateMachine::OnStartFailed(const absl::Status& status) {
  has_call_ = false;
  read_armed_ = false;
  Close(status);
  return Flush();
}

void ConnectionStateMachine::RetireCall() {
  has_call_ = false;
  Do(ClientAction(ClientAction::Type::kRetireCall));
}

// ---- What the server says ----

ClientActions ConnectionStateMachine::OnServerWord(uint64_t generation, const ServerWord& word,
                                                   TimePoint now) {
  if (generation != call_generation_ || Closed()) return {};
  last_heard_ = now;
  unanswered_ = 0;
  switch (word.kind) {
    case ServerWord::Kind::kJoined:
      OnJoined(word, now);
      break;
    case ServerWord::Kind::kAssignment:
      OnAssigned(word);
      break;
    case ServerWord::Kind::kRestart: {
      claim_.restarts_used = std::max(claim_.restarts_used, word.restart_count);
      if (word.round >= claim_.last.round) {
        claim_.group = ResumeClaim::Group::kWaiting;
        waiting_since_ = now;
      }
      ClientAction a(ClientAction::Type::kRestart);
      a.cause = word.cause;
      a.message = word.reason;
      a.hang = word.hang;
      a.facts = word.facts;
      Do(std::move(a));
      break;
    }
    case ServerWord::Kind::kPreflight: {
      ClientAction a(ClientAction::Type::kPreflight);
      a.preflight = word.preflight;
      Do(std::move(a));
      break;
    }
    case ServerWord::Kind::kStandby: {
      // A spare, or set aside: no workers either way (a node set aside had its stopped).
      if (claim_.group != ResumeClaim::Group::kWaiting) {
        claim_.group = ResumeClaim::Group::kWaiting;
        waiting_since_ = now;
      }
      claim_.set_aside = word.standby.set_aside;  // a plain standby: a spare again
      ClientAction a(ClientAction::Type::kStandby);
      a.standby = word.standby;
      Do(std::move(a));
      break;
    }
    case ServerWord::Kind::kResumed: {
      ClientAction a(ClientAction::Type::kResumed);
      a.round = word.round;
      Do(std::move(a));
      break;
    }
    case ServerWord::Kind::kClose:
      if (word.given_up) {
        // The verdict that fencing anticipates, heard after all (this agent was stopped longer
        // than the lease, or its link came back just too late): the same way out.
        Fence(absl::StrCat("fenced: the rendezvous server gave this node up (", word.message, ")"),
              now);
        break;
      }
      Close(word.close_status, word.hang);
      break;
    case ServerWord::Kind::kAck:
    case ServerWord::Kind::kUnknown:  // a newer server's message this client does not know
      break;
  }
  return Flush();
}

void ConnectionStateMachine::OnJoined(const ServerWord& word, TimePoint now) {
  if (Joined()) return;
  state_ = ConnectionState::kJoined;
  ever_joined_ = true;
  server_embedded_ = word.embedded;
  host_node_id_ = word.host_node_id;
  member_key_ = word.member_key;
  reconnect_attempts_ = 0;
  join_broken_because_.clear();
  if (read_armed_) {
    ClientAction cancel(ClientAction::Type::kCancelWake);
    cancel.wake.kind = Wake::Kind::kReadTimeout;
    Do(std::move(cancel));
    read_armed_ = false;
  }
  last_heard_ = now;
  if (word.liveness.port > 0) {
    ClientAction start(ClientAction::Type::kStartLiveness);
    start.generation = ++liveness_generation_;
    start.liveness = word.liveness;
    Do(std::move(start));
  }
  // The run's lease follows its first agent's settings, which may be stricter than ours.
  if (word.keep_alive_interval_ms > 0 &&
      milliseconds(word.keep_alive_interval_ms) < heartbeat_interval_) {
    heartbeat_interval_ = milliseconds(word.keep_alive_interval_ms);
  }
  ScheduleHeartbeat(now);
}

void ConnectionStateMachine::OnAssigned(const ServerWord& word) {
  const Assignment& a = word.assignment;
  if (!a.successors.empty()) RememberMembers(a.successors);
  // An agent that joined before the host did learned no host from Joined.
  if (!word.host_node_id.empty()) host_node_id_ = word.host_node_id;
  claim_.last = a;
  claim_.gone_group_rank.reset();
  claim_.restarts_used = std::max(claim_.restarts_used, a.restart_count);
  claim_.group = ResumeClaim::Group::kRunning;
  claim_.failure.reset();
  claim_.set_aside.clear();
  ClientAction assigned(ClientAction::Type::kAssigned);
  assigned.assignment = a;
  Do(std::move(assigned));
}

void ConnectionStateMachine::RememberMembers(const std::vector<Successor>& members) {
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

// ---- How a stream ends ----

ClientActions ConnectionStateMachine::OnStreamEnd(uint64_t generation, const StreamEnd& end,
                                                  TimePoint now) {
  if (generation != call_generation_) return {};
  const std::string lost = absl::StrCat("lost the rendezvous stream to ", endpoint_, ": ",
                                        end.message, " (gRPC code ", end.grpc_code, ")");
  if (Joined() && server_embedded_) {
    state_ = ConnectionState::kProbingHost;
    RetireCall();
    Wake probe;
    probe.kind = Wake::Kind::kProbeHost;
    probe.why = lost;
    probe.until = now + kFailoverProbing;
    ProbeHost(probe, now);
    return Flush();
  }
  if (!Closed() && !budget_cut_ && end.code != StreamEnd::Code::kUnauthenticated &&
      (Joined() || Reconnecting())) {
    Reconnect(end.code == StreamEnd::Code::kOk
                  ? absl::StrCat("the rendezvous server at ", endpoint_, " ended the stream")
                  : lost,
              now);
    return Flush();
  }
  if (budget_cut_ && state_ == ConnectionState::kFailingOver) {
    // This successor did not take the run within its lease: the next one.
    budget_cut_ = false;
    AdvanceFailover(now);
    return Flush();
  }
  OnEndedBeforeJoin(end, now);
  return Flush();
}

void ConnectionStateMachine::OnEndedBeforeJoin(const StreamEnd& end, TimePoint now) {
  const std::string& where = endpoint_;
  if (budget_cut_ && Reconnecting()) {
    Close(absl::UnavailableError(absl::StrCat("no rendezvous server answered at ", where,
                                              " for read_timeout (", Seconds(config_.read_timeout),
                                              ") after ", broken_because_)));
  } else if (budget_cut_) {
    Close(absl::UnavailableError(absl::StrCat(
        "cannot reach the rendezvous server at ", where, " within ", connect_budget_name_, " (",
        Seconds(connect_budget_), ")", end.message.empty() ? "" : ": ", end.message,
        join_broken_because_.empty() ? "" : "; earlier: ", join_broken_because_)));
  } else if (end.code == StreamEnd::Code::kUnavailable && !Closed()) {
    // Not admitted yet and the connection broke under the join: a link still down after this
    // node was fenced (gRPC reports "No route to host", "Connection timed out" from the old
    // connection or the new one), a server restarting. Neither is an answer: try again until
    // the join's budget runs out (join_timeout after a fence, read_timeout at the start).
    RetryJoin(absl::StrCat("lost the rendezvous stream to ", where, " while joining: ", end.message,
                           " (gRPC code ", end.grpc_code, ")"),
              now);
  } else if (end.code == StreamEnd::Code::kUnauthenticated) {
    Close(absl::UnauthenticatedError(
        absl::StrCat("the rendezvous server at ", where, " refused this agent: ", end.message)));
  } else if (end.code == StreamEnd::Code::kOk) {
    Close(absl::UnavailableError(
        absl::StrCat("the rendezvous server at ", where, " ended the stream")));
  } else {
    Close(absl::UnavailableError(absl::StrCat("lost the rendezvous stream to ", where, ": ",
                                              end.message, " (gRPC code ", end.grpc_code, ")")));
  }
}

milliseconds ConnectionStateMachine::NextBackoff() {
  return std::min<milliseconds>(
      kFirstRetryBackoff * (1 << std::min(reconnect_attempts_++, kRetryBackoffDoublings)),
      kMaxRetryBackoff);
}

void ConnectionStateMachine::RetryJoin(const std::string& why, TimePoint now) {
  if (join_broken_because_.empty()) {
    Tell(ClientAction::Type::kReconnecting,
         absl::StrCat(why, "; trying again until ", connect_budget_name_, " (",
                      Seconds(connect_budget_), ")"));
  }
  join_broken_because_ = why;
  RetireCall();
  ClientAction wake(ClientAction::Type::kWakeAt);
  wake.at = now + NextBackoff();
  wake.wake.kind = Wake::Kind::kRetryJoin;
  Do(std::move(wake));
}

void ConnectionStateMachine::RetryJoinNow(TimePoint now) {
  if (Closed() || Joined() || Reconnecting() || has_call_) return;
  const milliseconds left = Millis(connect_deadline_ - now);
  if (left <= milliseconds::zero()) {
    Close(absl::UnavailableError(absl::StrCat(
        "cannot reach the rendezvous server at ", endpoint_, " within ", connect_budget_name_, " (",
        Seconds(connect_budget_), "): ", join_broken_because_)));
    return;
  }
  const milliseconds budget = connect_budget_;
  StartCall(left, connect_budget_name_, now);
  connect_budget_ = budget;  // the budget named in messages stays the whole one
}

void ConnectionStateMachine::Reconnect(const std::string& why, TimePoint now) {
  if (!Reconnecting()) {
    state_ = ConnectionState::kReconnecting;
    broken_because_ = why;
    reconnect_deadline_ = now + config_.read_timeout;
    Tell(ClientAction::Type::kReconnecting,
         absl::StrCat(why,
                      "; the workers keep running while this agent re-registers "
                      "(for up to read_timeout, ",
                      Seconds(config_.read_timeout), ")"));
  }
  RetireCall();
  ClientAction wake(ClientAction::Type::kWakeAt);
  wake.at = now + NextBackoff();
  wake.wake.kind = Wake::Kind::kReconnect;
  Do(std::move(wake));
  if (!heartbeat_armed_) ScheduleHeartbeat(now);  // keeps judging the silence (fencing)
}

void ConnectionStateMachine::ReconnectNow(TimePoint now) {
  if (Closed() || !Reconnecting() || has_call_) return;
  const bool failing_over = state_ == ConnectionState::kFailingOver;
  const TimePoint deadline =
      failing_over ? std::min(candidate_deadline_, reconnect_deadline_) : reconnect_deadline_;
  if (failing_over && now >= candidate_deadline_) {
    AdvanceFailover(now);
    return;
  }
  const milliseconds left = Millis(deadline - now);
  if (left <= milliseconds::zero()) {
    Close(absl::UnavailableError(absl::StrCat("no rendezvous server answered at ", endpoint_,
                                              " for read_timeout (", Seconds(config_.read_timeout),
                                              ") after ", broken_because_)));
    return;
  }
  StartCall(left, "read_timeout", now);
}

// ---- Timers and probes ----

ClientActions ConnectionStateMachine::OnWake(const Wake& wake, TimePoint now) {
  switch (wake.kind) {
    case Wake::Kind::kReadTimeout:
      read_armed_ = false;
      if (wake.generation != call_generation_ || Joined() || Closed()) break;
      budget_cut_ = true;
      Do(ClientAction(ClientAction::Type::kCancelCall));
      break;
    case Wake::Kind::kHeartbeat:
      heartbeat_armed_ = false;
      Heartbeat(now);
      break;
    case Wake::Kind::kRetryJoin:
      RetryJoinNow(now);
      break;
    case Wake::Kind::kReconnect:
      ReconnectNow(now);
      break;
    case Wake::Kind::kProbeHost:
      ProbeHost(wake, now);
      break;
    case Wake::Kind::kJudgeSilence:
      break;  // a probe's reason only
  }
  return Flush();
}

ClientActions ConnectionStateMachine::OnProbed(const Wake& wake, ProbeResult result,
                                               TimePoint now) {
  if (wake.kind == Wake::Kind::kProbeHost) {
    DecideFailover(wake, result, now);
  } else if (wake.kind == Wake::Kind::kJudgeSilence) {
    JudgeProbedSilence(result, wake.until, now);
    if (!Closed() && Reconnecting()) ScheduleHeartbeat(now);
  }
  return Flush();
}

void ConnectionStateMachine::ScheduleHeartbeat(TimePoint now) {
  ClientAction wake(ClientAction::Type::kWakeAt);
  wake.at = now + heartbeat_interval_;
  wake.wake.kind = Wake::Kind::kHeartbeat;
  Do(std::move(wake));
  heartbeat_armed_ = true;
}

void ConnectionStateMachine::Heartbeat(TimePoint now) {
  if (Closed()) return;
  if (Reconnecting()) {
    JudgeSilence(now);
    return;
  }
  if (!has_call_) return;
  // Fencing: the server answers every heartbeat, so a lease without a word from it means
  // this node is cut off and its peers have already given it up (a broken connection is
  // reported by gRPC; a silent partition is not, until its keepalive decides much later).
  // Counted in unanswered heartbeats too, so that an agent that was itself stopped (SIGSTOP,
  // a frozen VM) hears the server's verdict before judging the silence.
  const Duration lease = Lease();
  const Duration silent = now - last_heard_;
  const bool lease_lost = silent > lease && unanswered_ >= LeaseAttempts();
  if (lease_lost && FailsOverOnSilence()) {
    Do(ClientAction(ClientAction::Type::kCancelCall));
    RetireCall();
    StartFailover(absl::StrCat("no word from the rendezvous server at ", endpoint_, " for ",
                               ToMillis(silent), " ms (the lease is ", ToMillis(lease), " ms)"),
                  /*host_refused=*/false, now);
    return;
  }
  if (lease_lost) {
    Fence(absl::StrCat("fenced: no word from the rendezvous server at ", endpoint_, " for ",
                       ToMillis(silent), " ms (the lease is ", ToMillis(lease),
                       " ms): this node is cut off and its peers have given it up"),
          now);
    return;
  }
  Do(ClientAction(ClientAction::Type::kSendHeartbeat));
  ++unanswered_;
  ScheduleHeartbeat(now);
  MaybeLookForTheRun(now);
}

void ConnectionStateMachine::JudgeSilence(TimePoint now) {
  // No stream. Silence for the lease means this node's peers have given it up, unless the
  // server's address refuses connections: a server that is down gives nobody up, and its
  // successor (or itself, restarted) rebuilds the run from the agents that come back. So while
  // it refuses, silence does not count, and once it accepts again this node gets a whole lease
  // to re-register (the channel is told to connect now rather than after its backoff).
  // A failover walk gives each successor its own lease (AdvanceFailover).
  if (state_ != ConnectionState::kFailingOver &&
      (now - last_heard_ > Lease() || state_ == ConnectionState::kServerDown)) {
    ClientAction probe(ClientAction::Type::kProbe);
    probe.endpoint = endpoint_;
    probe.timeout = std::min<milliseconds>(kSilenceProbeMax, heartbeat_interval_);
    probe.wake.kind = Wake::Kind::kJudgeSilence;
    probe.wake.until = now;  // when the silence was judged
    Do(std::move(probe));
    return;
  }
  ScheduleHeartbeat(now);
}

void ConnectionStateMachine::JudgeProbedSilence(ProbeResult probe, TimePoint judged_at,
                                                TimePoint now) {
  if (probe == ProbeResult::kRefused) {
    state_ = ConnectionState::kServerDown;
    last_heard_ = now;
    return;
  }
  if (state_ == ConnectionState::kServerDown) {
    state_ = ConnectionState::kReconnecting;
    last_heard_ = now;
    Do(ClientAction(ClientAction::Type::kResetBackoff));
    return;
  }
  Fence(absl::StrCat("fenced: the rendezvous server at ", endpoint_, " has not been reachable for ",
                     ToMillis(judged_at - last_heard_), " ms (the lease is ", ToMillis(Lease()),
                     " ms; a connection to it: ", ProbeResultName(probe),
                     "): this node is cut off and its peers have given it up"),
        now);
}

ClientActions ConnectionStateMachine::OnServerSilent(uint64_t generation, Duration silent_for,
                                                     TimePoint now) {
  if (generation != liveness_generation_ || !Joined()) return Flush();
  const std::string silence =
      absl::StrCat("no liveness ack from the rendezvous server at ", endpoint_, " for ",
                   ToMillis(silent_for), " ms (its failure detector suspects it)");
  if (FailsOverOnSilence()) {
    // As after the lease's verdict on an embedded server: its host may be the one gone, so the
    // survivors walk to its successor and the majority rule decides which side goes on.
    Do(ClientAction(ClientAction::Type::kCancelCall));
    RetireCall();
    StartFailover(silence, /*host_refused=*/false, now);
    return Flush();
  }
  Fence(absl::StrCat("fenced: ", silence, ": the server gives this node up in the same time"), now);
  return Flush();
}

// ---- Fencing ----

void ConnectionStateMachine::Fence(const std::string& why, TimePoint now) {
  if (has_call_) Do(ClientAction(ClientAction::Type::kCancelCall));
  if (node_.min_nodes == node_.max_nodes) {  // a fixed world cannot go on without this node
    Close(absl::UnavailableError(why));
    return;
  }
  // Elastic: the others went on without this node. Stop the workers and come back as a new
  // node (a scale-up for the others, no budget spent) once the network lets us, until
  // join_timeout. The old call is cancelled; its reactions are dropped.
  Tell(ClientAction::Type::kRejoinAsNewNode, why);
  JoinAsNewNode(now);
}

void ConnectionStateMachine::JoinAsNewNode(TimePoint now) {
  waiting_since_ = now;
  // The key was the old node id's: it now proves the claim to have been that node, and the new
  // node gets its own.
  former_key_ = std::exchange(member_key_, std::string());
  claim_.group = ResumeClaim::Group::kWaiting;  // its workers are being stopped
  RetireCall();
  state_ = ConnectionState::kJoining;
  budget_cut_ = false;
  unanswered_ = 0;
  join_broken_because_.clear();
  StartCall(Millis(config_.timeouts.join_timeout), "join_timeout", now);
}

}  // namespace ddprun::rendezvous
