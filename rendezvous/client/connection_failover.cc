// ConnectionStateMachine, continued: the failover of an embedded server (a server hosted by an
// agent) and the search for the other side of a healed partition.
#include <algorithm>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "rendezvous/client/connection_state.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;

int PortOf(const std::string& endpoint) {
  return ParseHostPort("endpoint", endpoint, 0).value_or(HostPort{}).port;
}

}  // namespace

void ConnectionStateMachine::ProbeHost(const Wake& wake, TimePoint now) {
  if (state_ == ConnectionState::kSteppedOut || Closed()) return;
  ClientAction probe(ClientAction::Type::kProbe);
  probe.endpoint = endpoint_;
  probe.timeout = std::clamp(Millis(wake.until - now), kHostProbeMin, kHostProbeMax);
  probe.wake = wake;
  Do(std::move(probe));
}

void ConnectionStateMachine::DecideFailover(const Wake& wake, ProbeResult probe, TimePoint now) {
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
  const std::string& why = wake.why;
  if (probe == ProbeResult::kRefused && config_.host_loss == HostLoss::kAwaitReturn) {
    Reconnect(absl::StrCat(why,
                           "; the agent that hosted the rendezvous is gone (its address "
                           "refuses connections): waiting for it to come back there"),
              now);
    return;
  }
  if (probe == ProbeResult::kRefused && !successors_.empty()) {
    StartFailover(why, /*host_refused=*/true, now);
    return;
  }
  const int accepting = probe == ProbeResult::kAccepting ? wake.accepting_in_a_row + 1 : 0;
  if (accepting < kAcceptingProbesToReconnect && now < wake.until) {
    ClientAction again(ClientAction::Type::kWakeAt);
    again.at = now + kHostProbeInterval;
    again.wake = wake;
    again.wake.accepting_in_a_row = accepting;
    Do(std::move(again));
    return;
  }
  if (probe == ProbeResult::kAccepting) {
    Reconnect(why, now);
    return;
  }
  if (FailsOverOnSilence()) {
    // No answer: the host is down or cut off, or this node is. As after a lease of silence,
    // the survivors fail over and the majority rule decides which side goes on.
    StartFailover(absl::StrCat(why, " (its address: ", ProbeResultName(probe), ")"),
                  /*host_refused=*/false, now);
    return;
  }
  Close(absl::UnavailableError(absl::StrCat(
      why, "; that server was hosted by an agent, which cannot be reached (",
      ProbeResultName(probe),
      "): this node may be the one cut off, so no successor takes over here (ddprun-rdzv or "
      "etcd survive a server restart)")));
}

bool ConnectionStateMachine::FailsOverOnSilence() const {
  return server_embedded_ && config_.host_loss == HostLoss::kFailOver && !successors_.empty() &&
         !host_node_id_.empty() && host_node_id_ != node_.node_id;
}

void ConnectionStateMachine::StartFailover(const std::string& why, bool host_refused,
                                           TimePoint now) {
  if (state_ == ConnectionState::kSteppedOut) return;  // as in StartCall
  failover_candidates_.clear();
  for (size_t i = 0; i < successors_.size(); ++i) {
    if (successors_[i].node_id != host_node_id_) {
      failover_candidates_.push_back(successors_[i]);
    } else if (claim_.last.round > 0 && host_refused) {
      // The list is in group-rank order: the host's group rank in the round this node claims.
      claim_.gone_group_rank = static_cast<int>(i);
    }
  }
  state_ = ConnectionState::kFailingOver;
  failover_next_ = 0;
  broken_because_ = why;
  reconnect_deadline_ = now + config_.read_timeout;
  Tell(ClientAction::Type::kReconnecting,
       absl::StrCat(why, host_refused
                             ? "; the agent that hosted the rendezvous is gone (its address "
                               "refuses connections): the run moves to its successor, the "
                               "workers keep running meanwhile"
                             : "; the agent that hosted the rendezvous is gone or cut off: the "
                               "run moves to its successor, which goes on only with a majority "
                               "of the last round's members"));
  AdvanceFailover(now);
}

void ConnectionStateMachine::AdvanceFailover(TimePoint now) {
  if (failover_next_ >= failover_candidates_.size()) {
    Close(absl::UnavailableError(absl::StrCat(
        "the rendezvous server hosted by an agent is gone (", broken_because_, ") and none of its ",
        failover_candidates_.size(), " successor(s) took the run over within its lease")));
    return;
  }
  const Successor& next = failover_candidates_[failover_next_++];
  const int port = PortOf(endpoint_);
  if (next.node_id == node_.node_id && config_.can_host) {
    // Every survivor walks the same list in the same order, so this agent is the one all of
    // them go to now: it starts serving (OnHosted goes on).
    ClientAction host(ClientAction::Type::kHostHere);
    host.port = port;
    Do(std::move(host));
    return;
  }
  CallCandidate(next, port, now);
}

ClientActions ConnectionStateMachine::OnHosted(const absl::Status& hosted, int port,
                                               TimePoint now) {
  if (state_ != ConnectionState::kFailingOver || failover_next_ == 0) return {};
  Tell(ClientAction::Type::kReconnecting,
       hosted.ok() ? absl::StrCat("this agent now hosts the rendezvous on port ", port,
                                  " (the successor of the agent that was lost)")
                   : absl::StrCat("this agent is the successor but cannot host the rendezvous: ",
                                  hosted.message()));
  CallCandidate(failover_candidates_[failover_next_ - 1], port, now);
  return Flush();
}

void ConnectionStateMachine::CallCandidate(const Successor& next, int port, TimePoint now) {
  endpoint_ = FormatHostPort(next.addr, port);
  Do(ClientAction(ClientAction::Type::kNewEndpoint));
  // Each successor gets a lease to take the run; fencing measures silence from here.
  candidate_deadline_ = now + Lease();
  last_heard_ = now;
  RetireCall();
  StartCall(Millis(candidate_deadline_ - now), "the successor's lease", now);
}

// ---- The other side of a healed partition ----

void ConnectionStateMachine::MaybeLookForTheRun(TimePoint now) {
  if (!config_.looks_for_the_run || looking_ || !Joined() || !server_embedded_ ||
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
  const int port = PortOf(endpoint_);
  ClientAction look(ClientAction::Type::kLookForTheRun);
  look.mine.endpoint = endpoint_;
  look.mine.order = -1;
  std::vector<RunServer>& others = look.others;
  auto consider = [&](const std::string& endpoint, int order) {
    if (endpoint == endpoint_) return;
    const absl::StatusOr<HostPort> where = ParseHostPort("endpoint", endpoint, 0);
    if (!where.ok() || IsLoopbackHost(where->host)) return;
    for (const RunServer& o : others) {
      if (o.endpoint == endpoint) return;
    }
    RunServer o;
    o.endpoint = endpoint;
    o.order = order;
    others.push_back(o);
  };
  consider(config_.endpoint, -1);
  for (size_t i = 0; i < successors_.size(); ++i) {
    if (successors_[i].node_id == node_.node_id) {
      if (endpoint_ != config_.endpoint) look.mine.order = static_cast<int>(i);
      continue;
    }
    consider(FormatHostPort(successors_[i].addr, port), static_cast<int>(i));
  }
  for (size_t i = 0; i < earlier_members_.size(); ++i) {
    consider(FormatHostPort(earlier_members_[i].addr, port),
             static_cast<int>(successors_.size() + i));
  }
  Do(std::move(look));
}

ClientActions ConnectionStateMachine::OnLookAnswered(const std::optional<RunServer>& best,
                                                     const RunServer& mine, TimePoint now) {
  looking_ = false;
  if (best) FollowServedRun(*best, mine, now);
  return Flush();
}

void ConnectionStateMachine::FollowServedRun(const RunServer& other, const RunServer& mine,
                                             TimePoint now) {
  // Still hosting and still without a round: the answer is not stale.
  if (Closed() || !Joined() || host_node_id_ != node_.node_id ||
      claim_.group != ResumeClaim::Group::kWaiting) {
    return;
  }
  Tell(ClientAction::Type::kReconnecting,
       absl::StrCat("run '", node_.run_id, "' is served at ", other.endpoint, " (round ",
                    other.round, ", ", other.agents,
                    " agent(s)) while the server this agent hosts at ", mine.endpoint,
                    " has formed no round since round ", claim_.last.round, " (", mine.agents,
                    " agent(s)): the two sides of a partition; this agent stops hosting and "
                    "joins there"));
  if (has_call_) Do(ClientAction(ClientAction::Type::kCancelCall));
  RetireCall();
  state_ = ConnectionState::kJoining;
  Do(ClientAction(ClientAction::Type::kStopHosting));
  endpoint_ = other.endpoint;
  Do(ClientAction(ClientAction::Type::kNewEndpoint));
  budget_cut_ = false;
  join_broken_because_.clear();
  StartCall(Millis(config_.timeouts.join_timeout), "join_timeout", now);
}

}  // namespace ddprun::rendezvous
