#include "rendezvous/core/run_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/signal_names.h"
#include "common/strings.h"
#include "rendezvous/core/rank_assignment.h"

namespace ddprun::rendezvous {
namespace {

std::string NodesFlag(int min_nodes, int max_nodes) {
  return min_nodes == max_nodes ? absl::StrCat("--nnodes=", min_nodes)
                                : absl::StrCat("--nnodes=", min_nodes, ":", max_nodes);
}

std::string DescribeFailure(const WorkerFailure& f) {
  std::string how = f.hang          ? "hung"
                    : f.signal != 0 ? absl::StrCat("was killed by ", SignalName(f.signal),
                                                   f.cause.empty() ? "" : ": ", f.cause)
                                    : absl::StrCat("exited with code ", f.exit_code);
  std::string out =
      absl::StrCat("worker ", f.hang ? "hang" : "failure", " on ", f.hostname, ": rank ", f.rank,
                   " (local_rank ", f.local_rank, ", pid ", f.pid, ") ", how);
  if (!f.message.empty()) absl::StrAppend(&out, ": ", f.message);
  return out;
}

// The first agent's timeouts, with the liveness path's rate fitted to the run's size: what every
// agent is told in Joined and what the server's detectors expect.
RunTimeouts TimeoutsForRunOf(RunTimeouts asked, int max_nodes) {
  asked.liveness = LivenessForRunOf(asked.liveness, max_nodes);
  return asked;
}

}  // namespace

RunState::RunState(const JoinRequest& first, TimePoint now, RoundQuorum quorum)
    : run_id_(first.node.run_id),
      min_nodes_(first.node.min_nodes),
      max_nodes_(first.node.max_nodes),
      nproc_per_node_(first.node.nproc_per_node),
      max_restarts_(first.node.max_restarts),
      timeouts_(TimeoutsForRunOf(first.timeouts, first.node.max_nodes)),
      creator_(absl::StrCat("node ", first.node.node_id, " on ", first.node.hostname)),
      quorum_(quorum),
      checkpoints_(first.timeouts.mtbf) {
  join_deadline_ = now + timeouts_.join_timeout;
  round_began_ = now;
}

absl::Status RunState::CheckJoin(const JoinRequest& request) const {
  const NodeInfo& n = request.node;
  if (phase_ == RunPhase::kClosed) {
    return absl::FailedPreconditionError(
        absl::StrCat("run '", run_id_, "' is closed: ", close_message_));
  }
  if (n.min_nodes != min_nodes_ || n.max_nodes != max_nodes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "run '", run_id_, "': this agent has ", NodesFlag(n.min_nodes, n.max_nodes),
        " but the run has ", NodesFlag(min_nodes_, max_nodes_), " (set by ", creator_, ")"));
  }
  if (n.nproc_per_node != nproc_per_node_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "run '", run_id_, "': this agent has --nproc-per-node=", n.nproc_per_node,
        " but the run has --nproc-per-node=", nproc_per_node_, " (set by ", creator_, ")"));
  }
  if (n.max_restarts != max_restarts_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "run '", run_id_, "': this agent has --max-restarts=", n.max_restarts,
        " but the run has --max-restarts=", max_restarts_, " (set by ", creator_, ")"));
  }
  if (n.requested_node_rank >= max_nodes_) {
    return absl::InvalidArgumentError(absl::StrCat("--node-rank=", n.requested_node_rank,
                                                   " is out of range for ",
                                                   NodesFlag(min_nodes_, max_nodes_)));
  }
  if (by_node_id_.count(n.node_id) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("run '", run_id_, "': node id '", n.node_id, "' has already joined"));
  }
  if (n.requested_node_rank >= 0) {
    auto taken = by_requested_rank_.find(n.requested_node_rank);
    if (taken != by_requested_rank_.end()) {
      const Node& other = nodes_.at(taken->second);
      return absl::InvalidArgumentError(absl::StrCat(
          "run '", run_id_, "': --node-rank=", n.requested_node_rank, " is already taken by node ",
          other.info.node_id, " on ", other.info.hostname));
    }
  }
  return absl::OkStatus();
}

void RunState::Join(ConnId conn, const JoinRequest& request, TimePoint now, Outbox* out) {
  if (request.resume.has_value() && by_node_id_.count(request.node.node_id) > 0 &&
      phase_ != RunPhase::kClosed) {
    TakeOver(conn, request, now, out);
    return;
  }
  if (request.resume.has_value() && phase_ == RunPhase::kClosed && close_status_.ok()) {
    // A node of this run coming back (after fencing) to find the job finished without it: the
    // job succeeded, and so does its agent. (A stranger joining late is refused below.)
    out->push_back({conn, CloseNotice{absl::OkStatus(), std::nullopt}});
    return;
  }
  if (absl::Status refused = CheckJoin(request); !refused.ok()) {
    out->push_back({conn, CloseNotice{refused, std::nullopt}});
    return;
  }
  Node node;
  node.conn = conn;
  node.info = request.node;
  node.addr = request.node.local_addr.empty() ? request.peer_host : request.node.local_addr;
  node.last_seen = now;
  node.arrival = next_arrival_++;
  const std::string who = Describe(node);
  AddNode(std::move(node));
  JoinedNotice joined{request.peer_host, timeouts_.keep_alive_interval, {}, {}, timeouts_.liveness};
  joined.succeeds_node_id = request.node.formerly_node_id;
  out->push_back({conn, std::move(joined)});

  if (std::optional<std::string> why = StillSetAside(request)) {
    // Back, it still has to pass the preflight; no claimant of a recovery either (the round it
    // claims, if any, went on without it).
    SetAside(nodes_.at(conn), *why, now, out);
    return;
  }
  if (request.resume.has_value()) {
    // A run this server has formed no round of, and an agent that knows one: the server lost
    // the run (it restarted). Rebuild it from the agents that come back.
    if (phase_ == RunPhase::kJoining && round_ == 0) StartRecovery(now);
    if (phase_ == RunPhase::kRecovering) {
      AddClaim(nodes_.at(conn), *request.resume, now, out);
      return;
    }
    AnswerUnknownClaim(nodes_.at(conn), *request.resume, out);
  }
  if (phase_ == RunPhase::kRecovering) return;  // newcomers wait for the run to settle
  if (preflight_round_.has_value()) {
    // A spare arriving with the members: measured before it may take a place.
    const Node& added = nodes_.at(conn);
    out->push_back({conn, preflight_round_->Add({added.info.node_id, added.info.hostname,
                                                 AddressForPeers(added, SomeNodeRemote()),
                                                 added.info.preflight_port})});
  }
  Seat(conn, absl::StrCat(who, " joined"), Cause::kNodeJoined, now, out);
}

bool RunState::SeatTakesAPlace() const {
  // Scale up: the world is below max, so the node gets in by restarting the round. A round
  // where some node already succeeded is finishing; the node waits instead.
  return phase_ == RunPhase::kJoining ||
         (members_in_round() < max_nodes_ && succeeded_in_round_ == 0);
}

void RunState::Seat(ConnId conn, const std::string& why, Cause cause, TimePoint now, Outbox* out) {
  if (phase_ == RunPhase::kJoining) {
    MaybeFormRound(now, out);
  } else if (SeatTakesAPlace()) {
    RestartRound(why, cause, RestartKind::kFree, std::nullopt, now, out);
  } else {
    // The round is full (or finishing): the node waits as a spare, last in the order.
    Standby(nodes_.at(conn), eligible_nodes() - members_in_round() - 1, out);
  }
}

void RunState::Standby(Node& node, int position, Outbox* out) {
  node.spare = true;
  out->push_back({node.conn, StandbyNotice{round_, members_in_round(), position}});
}

void RunState::Heartbeat(ConnId conn, TimePoint now) {
  auto it = nodes_.find(conn);
  if (it != nodes_.end()) Touch(it->second, now);
}

void RunState::Step(ConnId conn, const std::string& json, TimePoint now) {
  auto it = nodes_.find(conn);
  if (it == nodes_.end()) return;
  Touch(it->second, now);
  PushBounded(&steps_, json, kMaxSteps);
}

absl::Status RunState::GroupStatus(ConnId conn, int64_t round, GroupState state,
                                   const std::optional<WorkerFailure>& failure, TimePoint now,
                                   Outbox* out) {
  auto it = nodes_.find(conn);
  if (it == nodes_.end()) return absl::NotFoundError("unknown stream");
  Touch(it->second, now);
  // Whatever the state, and even for a round already past: the node knows `round`.
  last_round_.Confirmed(round, it->second.info.node_id);
  if (phase_ == RunPhase::kRecovering && it->second.claim.has_value() &&
      it->second.claim->last.round == round && round > 0) {
    // Reported after the claim was sent: the claim says it now.
    it->second.claim->Report(state, failure);
    return absl::OkStatus();
  }
  if (phase_ != RunPhase::kRunning || round != round_ || !it->second.in_round) {
    return absl::AbortedError(absl::StrCat("status for round ", round, " but the run is at round ",
                                           round_, " (", RunPhaseName(phase_), ")"));
  }
  switch (state) {
    case GroupState::kRunning:
      return absl::OkStatus();
    case GroupState::kSucceeded: {
      ++succeeded_in_round_;
      RemoveNode(conn);
      out->push_back({conn, CloseNotice{absl::OkStatus(), std::nullopt}});
      EndsWithoutRestart(out);  // closes the run OK when it was the last member
      return absl::OkStatus();
    }
    case GroupState::kFailed: {
      WorkerFailure f = failure.value_or(WorkerFailure{});
      if (f.hostname.empty()) f.hostname = it->second.info.hostname;
      // With the budget spent the run ends anyway, as torchrun's would (exit 1).
      if (restarts_used_ < max_restarts_ && crash_loop_.Repeats(f)) {
        CloseRun(CrashLoopStop(CrashLoopMessage(DescribeFailure(f))), f, out);
        return absl::OkStatus();
      }
      RestartRound(DescribeFailure(f), f.hang ? Cause::kHang : Cause::kWorkerFailure,
                   RestartKind::kFailure, f, now, out);
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("unknown group state");
}

void RunState::Leave(ConnId conn, const std::string& reason, TimePoint now, Outbox* out) {
  auto it = nodes_.find(conn);
  if (it == nodes_.end()) return;
  const bool was_member = it->second.in_round;
  const std::string who = Describe(it->second);
  last_round_.MarkGone(it->second.info.node_id);
  RemoveNode(conn);
  out->push_back({conn, CloseNotice{absl::OkStatus(), std::nullopt}});
  if (phase_ == RunPhase::kRunning && was_member) {
    if (EndsWithoutRestart(out)) return;
    RestartRound(absl::StrCat(who, " left", reason.empty() ? "" : ": ", reason), Cause::kNodeLeft,
                 RestartKind::kFree, std::nullopt, now, out);
  } else if (phase_ == RunPhase::kJoining) {
    MaybeFormRound(now, out);
  }
}

void RunState::StreamBroken(ConnId conn, TimePoint now, Outbox* out) {
  auto it = nodes_.find(conn);
  if (it == nodes_.end()) return;
  // Broken while the agent was still heard from: it died (or its host reset the connection),
  // so it is on no other side of a partition. A stream that breaks after a silence (gRPC's
  // keepalive giving up on a cut link) proves nothing: the node counts as silent.
  // The detection time follows: a death is noticed at once (its heartbeats say nothing of when
  // it died), a silence took as long as it lasted.
  Duration silent_for{0};
  if (now - it->second.last_seen <= 2 * timeouts_.keep_alive_interval) {
    last_round_.MarkGone(it->second.info.node_id);
  } else {
    silent_for = now - it->second.last_seen;
  }
  LoseNode(conn, "its connection broke", Cause::kNodeLostStream, silent_for, now, out);
}

void RunState::Silent(ConnId conn, Duration silent_for, TimePoint now, Outbox* out) {
  if (nodes_.count(conn) == 0 || phase_ == RunPhase::kClosed) return;
  const std::string why = absl::StrFormat("silent for %.2f s (its liveness heartbeats stopped)",
                                          std::chrono::duration<double>(silent_for).count());
  // As for an expired lease: if the node was only stopped or cut off, it hears on its return
  // that the run went on without it (and fences; its own detector of the server's acks has
  // usually fenced it already).
  CloseNotice given_up{
      absl::UnavailableError(absl::StrCat("this node was given up by the rendezvous: ", why))};
  given_up.given_up = true;
  out->push_back({conn, std::move(given_up)});
  LoseNode(conn, why, Cause::kNodeLostSilence, silent_for, now, out);
}

void RunState::LoseNode(ConnId conn, const std::string& why, Cause cause, Duration silent_for,
                        TimePoint now, Outbox* out) {
  auto it = nodes_.find(conn);
  if (it == nodes_.end()) return;
  const bool was_member = it->second.in_round;
  const std::string reason = absl::StrCat(Describe(it->second), " was lost: ", why);
  RemoveNode(conn);
  if (phase_ == RunPhase::kRunning && was_member) {
    if (EndsWithoutRestart(out)) return;
    RestartRound(reason, cause, RestartKind::kFailure, std::nullopt, silent_for, now, out);
  } else if (phase_ == RunPhase::kJoining) {
    MaybeFormRound(now, out);
  }
}

void RunState::Tick(TimePoint now, Outbox* out) {
  if (phase_ == RunPhase::kClosed) return;
  // Leases first: a node that is gone must not be counted into a round. Nodes found silent
  // in one tick are one event: one restart, one unit of budget.
  const std::string why = absl::StrCat("no heartbeat for ", ToMillis(timeouts_.lease()),
                                       " ms (keep_alive_interval * keep_alive_max_attempt)");
  std::string lost_members;
  int num_lost_members = 0;
  Duration silent_for{};  // the first lost member's (the longest silent)
  while (!by_last_seen_.empty() && now - by_last_seen_.begin()->first >= timeouts_.lease()) {
    const ConnId conn = by_last_seen_.begin()->second;
    const Node& node = nodes_.at(conn);
    if (node.in_round && num_lost_members++ == 0) {
      lost_members = Describe(node);
      silent_for = now - node.last_seen;
    }
    CloseNotice given_up{
        absl::UnavailableError(absl::StrCat("this node's rendezvous lease expired: ", why))};
    given_up.given_up = true;
    out->push_back({conn, std::move(given_up)});
    RemoveNode(conn);
  }
  if (phase_ == RunPhase::kRunning && num_lost_members > 0 && !EndsWithoutRestart(out)) {
    const std::string more =
        num_lost_members > 1 ? absl::StrCat(" (and ", num_lost_members - 1, " more)") : "";
    RestartRound(absl::StrCat(lost_members, more, " was lost: ", why), Cause::kNodeLostLease,
                 RestartKind::kFailure, std::nullopt, silent_for, now, out);
  }
  if (phase_ != RunPhase::kClosed) TickSetAside(now, out);
  if (phase_ == RunPhase::kRecovering && recovery_deadline_ && now >= *recovery_deadline_) {
    Settle(now, out);
  }
  if (phase_ != RunPhase::kJoining) return;
  MaybeFormRound(now, out);
  if (phase_ == RunPhase::kJoining && !MajorityHeld() && join_deadline_ && now >= *join_deadline_) {
    CloseRun(
        absl::DeadlineExceededError(absl::StrCat(
            "run '", run_id_, "': no majority of its last round came back within join_timeout (",
            ToMillis(timeouts_.join_timeout), " ms): ",
            last_round_.Describe([this](const std::string& id) { return PresentAsMember(id); }),
            "; the others may be running the job without this side of a partition")),
        std::nullopt, out);
    return;
  }
  if (phase_ == RunPhase::kJoining && eligible_nodes() < min_nodes_ && join_deadline_ &&
      now >= *join_deadline_) {
    CloseRun(absl::DeadlineExceededError(
                 absl::StrCat("run '", run_id_, "': only ", eligible_nodes(), " of ", min_nodes_,
                              " required nodes joined within join_timeout (",
                              ToMillis(timeouts_.join_timeout), " ms)")),
             std::nullopt, out);
  }
}

std::optional<TimePoint> RunState::NextDeadline() const {
  if (phase_ == RunPhase::kClosed) return std::nullopt;
  std::optional<TimePoint> next;
  auto consider = [&next](TimePoint t) {
    if (!next || t < *next) next = t;
  };
  if (!by_last_seen_.empty()) consider(by_last_seen_.begin()->first + timeouts_.lease());
  if (phase_ == RunPhase::kRecovering && recovery_deadline_) consider(*recovery_deadline_);
  for (ConnId conn : set_aside_) {
    const Node::SetAside& aside = *nodes_.at(conn).set_aside;
    consider(aside.generation != 0 ? aside.report_due : aside.next_try);
  }
  if (phase_ == RunPhase::kJoining) {
    if (preflight_round_.has_value()) consider(preflight_round_->deadline());
    if (last_call_deadline_) consider(*last_call_deadline_);
    if (join_deadline_ && (eligible_nodes() < min_nodes_ || !MajorityHeld())) {
      consider(*join_deadline_);
    }
  }
  return next;
}

void RunState::AddNode(Node node) {
  const ConnId conn = node.conn;
  by_node_id_[node.info.node_id] = conn;
  if (!node.info.formerly_node_id.empty()) by_former_id_[node.info.formerly_node_id] = conn;
  if (node.info.requested_node_rank >= 0) by_requested_rank_[node.info.requested_node_rank] = conn;
  by_last_seen_.insert({node.last_seen, conn});
  if (node.in_round) ++members_in_round_;
  if (node.set_aside.has_value()) set_aside_.insert(conn);
  nodes_[conn] = std::move(node);
}

void RunState::RemoveNode(ConnId conn) {
  auto it = nodes_.find(conn);
  if (it == nodes_.end()) return;
  const Node& node = it->second;
  by_node_id_.erase(node.info.node_id);
  if (auto former = by_former_id_.find(node.info.formerly_node_id);
      former != by_former_id_.end() && former->second == conn) {
    by_former_id_.erase(former);
  }
  if (node.info.requested_node_rank >= 0) by_requested_rank_.erase(node.info.requested_node_rank);
  by_last_seen_.erase({node.last_seen, conn});
  if (node.in_round) --members_in_round_;
  set_aside_.erase(conn);
  checkpoints_.Forget(node.info.node_id);
  if (preflight_round_.has_value()) preflight_round_->Forget(node.info.node_id);
  nodes_.erase(it);
}

void RunState::Touch(Node& node, TimePoint now) {
  by_last_seen_.erase({node.last_seen, node.conn});
  node.last_seen = now;
  by_last_seen_.insert({now, node.conn});
}

std::string RunState::Describe(const Node& node) const {
  return absl::StrCat("node ", node.info.node_id, " (", node.info.hostname, ")");
}

bool RunState::EndsWithoutRestart(Outbox* out) {
  if (succeeded_in_round_ == 0) return false;
  if (members_in_round() == 0) {
    CloseRun(absl::OkStatus(), std::nullopt, out);
    close_message_ = absl::StrCat("round ", round_, " succeeded");
  }
  return true;
}

void RunState::RestartRound(const std::string& reason, Cause cause, RestartKind kind,
                            const std::optional<WorkerFailure>& root_cause,
                            std::optional<Duration> lost_silent_for, TimePoint now, Outbox* out) {
  std::optional<HangNotice> hang;
  if (root_cause.has_value() && root_cause->hang) hang = HangNotice{Straggler(now)};
  if (kind == RestartKind::kFailure) {
    if (restarts_used_ >= max_restarts_) {
      CloseRun(absl::ResourceExhaustedError(absl::StrCat("restart budget spent (", restarts_used_,
                                                         " of --max-restarts=", max_restarts_,
                                                         " used); root cause: ", reason)),
               root_cause, out, hang.has_value() ? hang->straggler : "");
      return;
    }
    ++restarts_used_;
    failed_at_ = now;
    checkpoints_.Failure();
    checkpoint_advice_ = checkpoints_.Advise(now);
  }
  PushBounded(&restart_causes_, cause, kMaxUntaken);
  RestartRecord record{now, round_, cause, reason, std::nullopt};
  RestartFacts facts;
  if (lost_silent_for.has_value()) {
    facts.lost_silent_s = std::chrono::duration<double>(*lost_silent_for).count();
    record.lost_silent_s = facts.lost_silent_s;
  }
  PushBounded(&restart_log_, std::move(record), kMaxRestartRecords);
  round_began_ = now;
  const size_t first_notice = out->size();
  for (auto& [conn, node] : nodes_) {
    if (!node.in_round) continue;
    node.in_round = false;  // group_rank stays: it orders the survivors in the next round
    node.progress.clear();
    --members_in_round_;
    out->push_back({conn, RestartNotice{round_, cause, reason, hang, restarts_used_, facts}});
  }
  phase_ = RunPhase::kJoining;
  succeeded_in_round_ = 0;
  join_deadline_ = now + timeouts_.join_timeout;
  last_call_deadline_.reset();
  MaybeFormRound(now, out);
  if (!restart_log_.back().spare_used) return;
  // The round formed at once and took a spare (the usual case with one): the survivors' notices,
  // still unsent, say so.
  for (size_t i = first_notice; i < out->size(); ++i) {
    if (auto* notice = std::get_if<RestartNotice>(&(*out)[i].msg)) notice->facts.spare_used = true;
  }
}

bool RunState::MajorityHeld() const {
  return quorum_ != RoundQuorum::kMajorityOfLastRound ||
         last_round_.HeldBy([this](const std::string& id) { return PresentAsMember(id); });
}

void RunState::MaybeFormRound(TimePoint now, Outbox* out) {
  if (phase_ != RunPhase::kJoining) return;
  if (preflight_round_.has_value()) {
    // The round forms once the preflight has its verdicts: every report in, or its deadline.
    if (preflight_round_->Complete() || now >= preflight_round_->deadline()) {
      FinishPreflight(now, out);
    }
    return;
  }
  if (!MajorityHeld()) {
    // This side of a partition may be the smaller one: the other may be running the job.
    last_call_deadline_.reset();
    return;
  }
  const int n = eligible_nodes();
  if (n >= max_nodes_) {
    FormRoundAfterPreflight(now, out);
    return;
  }
  if (n < min_nodes_) {
    last_call_deadline_.reset();
    return;
  }
  if (!last_call_deadline_) {
    const Duration wait = failed_at_.has_value() && timeouts_.failure_last_call_timeout
                              ? *timeouts_.failure_last_call_timeout
                              : timeouts_.last_call_timeout;
    last_call_deadline_ = now + wait;
  }
  if (now >= *last_call_deadline_) FormRoundAfterPreflight(now, out);
}

std::vector<RunState::Node*> RunState::ChooseMembers(Outbox* out) {
  // Survivors of the last round first, by their old rank; then newcomers (spares) by arrival,
  // those that asked for a rank first. Only newcomers are left out past max_nodes: a survivor is
  // never dropped for a spare (the survivors were one round, so they fit).
  std::vector<Node*> order;
  order.reserve(nodes_.size());
  for (auto& [conn, node] : nodes_) {
    if (!node.set_aside.has_value()) order.push_back(&node);
  }
  std::sort(order.begin(), order.end(), [](const Node* a, const Node* b) {
    const bool a_old = a->group_rank >= 0, b_old = b->group_rank >= 0;
    if (a_old != b_old) return a_old;
    if (a_old && a->group_rank != b->group_rank) return a->group_rank < b->group_rank;
    const bool a_asked = a->info.requested_node_rank >= 0;
    const bool b_asked = b->info.requested_node_rank >= 0;
    if (a_asked != b_asked) return a_asked;
    return a->arrival < b->arrival;
  });
  // The ones left out are spares, told so in the order the next round would take them.
  for (size_t i = max_nodes_; i < order.size(); ++i) {
    Standby(*order[i], static_cast<int>(i) - max_nodes_, out);
  }
  if (static_cast<int>(order.size()) > max_nodes_) order.resize(max_nodes_);
  // Back to arrival order among the chosen newcomers: the holes go to the earliest spare.
  std::stable_sort(order.begin(), order.end(), [](const Node* a, const Node* b) {
    const bool a_old = a->group_rank >= 0, b_old = b->group_rank >= 0;
    if (a_old != b_old) return a_old;
    return !a_old && a->arrival < b->arrival;
  });

  std::vector<RankCandidate> candidates;
  for (const Node* n : order) candidates.push_back({n->info.requested_node_rank, n->group_rank});
  const std::vector<int> ranks = AssignGroupRanks(candidates);
  const size_t size = order.size();
  std::vector<Node*> by_rank(size);
  for (size_t i = 0; i < size; ++i) by_rank[ranks[i]] = order[i];
  return by_rank;
}

void RunState::FormRound(TimePoint now, Outbox* out) {
  RoundTiming timing;
  timing.completion_s = std::chrono::duration<double>(now - round_began_).count();
  if (failed_at_) timing.after_failure_s = std::chrono::duration<double>(now - *failed_at_).count();
  failed_at_.reset();
  PushBounded(&round_timings_, timing, kMaxUntaken);
  RestartRecord* after_restart = nullptr;  // the restart this round is the first after
  if (!restart_log_.empty() && !restart_log_.back().formed_after_s) {
    after_restart = &restart_log_.back();
    after_restart->formed_after_s =
        std::chrono::duration<double>(now - after_restart->when).count();
  }
  const std::vector<Node*> by_rank = ChooseMembers(out);
  const int size = static_cast<int>(by_rank.size());

  for (auto& [conn, node] : nodes_) node.group_rank = -1;  // the waiting ones lose old ranks
  int spares_taken = 0;
  for (Node* n : by_rank) spares_taken += std::exchange(n->spare, false) ? 1 : 0;
  spares_used_ += spares_taken;
  if (after_restart != nullptr) after_restart->spare_used = spares_taken > 0;
  if (quorum_ == RoundQuorum::kMajorityOfLastRound) {
    // Only where the rule applies: elsewhere nobody would ever forget the rounds kept.
    std::vector<std::string> member_ids;
    for (const Node* n : by_rank) member_ids.push_back(n->info.node_id);
    last_round_.Formed(round_ + 1, std::move(member_ids));
  }
  ++round_;
  phase_ = RunPhase::kRunning;
  succeeded_in_round_ = 0;
  slow_nodes_.Clear();
  checkpoints_.Started(now);
  join_deadline_.reset();
  last_call_deadline_.reset();

  const Node* master = by_rank[0];
  const bool some_member_remote = std::any_of(
      by_rank.begin(), by_rank.end(), [](const Node* n) { return !IsLoopbackHost(n->addr); });
  const std::string master_addr = AddressForPeers(*master, some_member_remote);
  int world_size = 0;
  // The first few members are enough places to move the server to, and keep every assignment
  // small in a run of thousands of nodes (one of them may be the host, which is skipped).
  constexpr size_t kMaxSuccessors = 9;
  std::vector<Successor> successors;
  for (const Node* n : by_rank) {
    world_size += n->info.nproc_per_node;
    if (successors.size() < kMaxSuccessors) successors.push_back({n->info.node_id, n->addr});
  }
  int offset = 0;
  for (int r = 0; r < size; ++r) {
    Node* n = by_rank[r];
    n->in_round = true;
    ++members_in_round_;
    n->group_rank = r;
    Assignment a;
    a.round = round_;
    a.group_rank = r;
    a.group_world_size = size;
    a.rank_offset = offset;
    a.world_size = world_size;
    a.master_addr = master_addr;
    a.master_port = master->info.master_port;
    a.restart_count = restarts_used_;
    a.max_restarts = max_restarts_;
    a.successors = successors;
    out->push_back({n->conn, a});
    offset += n->info.nproc_per_node;
  }
}

void RunState::CloseRun(const absl::Status& status, const std::optional<WorkerFailure>& root_cause,
                        Outbox* out, const std::string& straggler) {
  for (const auto& [conn, node] : nodes_) {
    out->push_back({conn, CloseNotice{status, root_cause, straggler}});
  }
  nodes_.clear();
  by_node_id_.clear();
  by_requested_rank_.clear();
  by_last_seen_.clear();
  set_aside_.clear();
  members_in_round_ = 0;
  phase_ = RunPhase::kClosed;
  preflight_round_.reset();
  close_status_ = status;
  close_message_ = status.ok() ? "succeeded" : std::string(status.message());
  join_deadline_.reset();
  last_call_deadline_.reset();
  recovery_deadline_.reset();
}

}  // namespace ddprun::rendezvous
