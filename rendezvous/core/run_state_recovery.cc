// RunState: re-registration and the rebuild of a run after a rendezvous server restart.
//
// An agent whose stream broke reconnects and joins again with a ResumeClaim: its last
// assignment, the restarts it has heard of, and whether its worker group of that round is still
// running (or finished, or failed while the server was away). Its workers keep running
// meanwhile. What the server does with the claim:
//
//  1. It knows the node (the old stream is dead but was not noticed yet): the node moves to the
//     new stream. A member re-registering its current round goes on (Resumed); one out of step
//     with it restarts the round without spending the budget.
//  2. It knows the run but not the node (the node was lost and the round went on without it,
//     or the claim names a round from the future): the node's workers are stopped (Restart of
//     the claimed round) and it is a newcomer, as any joining node.
//  3. It does not know the run, or has formed no round of it (a new server on the old
//     address): the run is *recovering*. Claims are collected until every group rank of the
//     newest claimed round R is back (a rank some claim names as gone, the agent that hosted an
//     embedded server which failed over, is not waited for), or for the lease
//     (keep_alive_interval x keep_alive_max_attempt; agents reconnect within about a second). Then
//     it settles:
//       - round R goes on, no worker restarted, no budget spent, when the claims of R agree
//         (group world size, world size, master address and port), each group rank 0..n-1 is
//         claimed exactly once, and no node says it was told that R is over. What groups
//         reported while the server was away (success, failure) is applied after that, as if
//         it had just arrived.
//       - Otherwise the round restarts: without spending the budget when claims contradict
//         each other (two nodes claim one group rank, sizes or master disagree) or R was already
//         over; spending one restart when a member of R did not come back (it is lost, as a
//         broken stream would be). Contradicting claimants lose their old ranks, so no two
//         workers ever get one rank.
//       - Nodes whose workers run an older round than R are stopped; waiting nodes and
//         newcomers wait for the next round (a scale-up restart if the round is below max).
//     restarts_used is the highest any claim reports. A member that had already finished and
//     left before the restart cannot be told from a lost one: it counts as lost.
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rendezvous/core/run_state.h"

namespace ddprun::rendezvous {
namespace {

using Group = ResumeClaim::Group;

bool HasWorkers(const ResumeClaim& claim) {
  return claim.last.round > 0 && claim.group != Group::kWaiting;
}

bool SameShape(const Assignment& a, const Assignment& b) {
  return a.group_world_size == b.group_world_size && a.world_size == b.world_size &&
         a.master_addr == b.master_addr && a.master_port == b.master_port;
}

}  // namespace

void RunState::TakeOver(ConnId conn, const JoinRequest& request, TimePoint now, Outbox* out) {
  const ConnId old = by_node_id_.at(request.node.node_id);
  Node node = nodes_.at(old);
  RemoveNode(old);
  node.conn = conn;
  node.last_seen = now;
  AddNode(std::move(node));
  out->push_back(
      {conn,
       JoinedNotice{request.peer_host, timeouts_.keep_alive_interval, {}, {}, timeouts_.liveness}});
  Node& n = nodes_.at(conn);
  const ResumeClaim& claim = *request.resume;
  last_round_.Confirmed(claim.last.round, n.info.node_id);  // it knows the round it claims
  if (phase_ == RunPhase::kRecovering) {
    AddClaim(n, claim, now, out);
    return;
  }
  const bool in_step = phase_ == RunPhase::kRunning && n.in_round && claim.last.round == round_ &&
                       claim.last.group_rank == n.group_rank && HasWorkers(claim);
  if (in_step) {
    out->push_back({conn, ResumedNotice{round_}});
    // What the group reported may have been lost with the old stream.
    // The claim was checked against this round above, so GroupStatus cannot refuse it.
    if (claim.group == Group::kSucceeded) {
      GroupStatus(conn, round_, GroupState::kSucceeded, std::nullopt, now, out).IgnoreError();
    } else if (claim.group == Group::kFailed) {
      GroupStatus(conn, round_, GroupState::kFailed, claim.failure, now, out).IgnoreError();
    }
    return;
  }
  if (phase_ == RunPhase::kRunning && n.in_round) {
    RestartRound(absl::StrCat(Describe(n), " re-registered out of step with round ", round_,
                              " (it knows round ", claim.last.round, ")"),
                 Cause::kServerRestart, RestartKind::kFree, std::nullopt, now, out);
    return;
  }
  AnswerUnknownClaim(n, claim, out);
}

void RunState::AnswerUnknownClaim(const Node& node, const ResumeClaim& claim, Outbox* out) {
  if (!HasWorkers(claim) || claim.group != Group::kRunning) return;
  const bool future = claim.last.round > round_;
  const std::string why =
      future ? absl::StrCat("round ", claim.last.round, " is from the future: run '", run_id_,
                            "' is at round ", round_)
             : absl::StrCat(Describe(node), " is not a member of round ", claim.last.round,
                            " on this rendezvous server (the run went on without it)");
  // From the future: this server lost the run's state. Not a member: the run gave the node up.
  const Cause cause = future ? Cause::kServerRestart : Cause::kNodeLostLease;
  out->push_back(
      {node.conn, RestartNotice{claim.last.round, cause, why, std::nullopt, restarts_used_}});
}

void RunState::StartRecovery(TimePoint now) {
  phase_ = RunPhase::kRecovering;
  join_deadline_.reset();
  last_call_deadline_.reset();
  recovery_deadline_ = now + timeouts_.lease();
}

void RunState::AddClaim(Node& node, const ResumeClaim& claim, TimePoint now, Outbox* out) {
  node.claim = claim;
  restarts_used_ = std::max(restarts_used_, claim.restarts_used);
  if (RecoveryComplete()) Settle(now, out);
}

bool RunState::RecoveryComplete() const {
  int64_t newest = 0;
  for (const auto& [conn, node] : nodes_) {
    if (node.claim) newest = std::max(newest, node.claim->last.round);
  }
  if (newest == 0) return false;
  const Assignment* shape = nullptr;
  std::set<int> ranks;
  for (const auto& [conn, node] : nodes_) {
    if (!node.claim || node.claim->last.round != newest) continue;
    const Assignment& a = node.claim->last;
    if (!HasWorkers(*node.claim)) return true;  // the round is over: nothing to wait for
    if (shape == nullptr) shape = &a;
    if (a.group_world_size < 1 || a.group_world_size > max_nodes_ || !SameShape(a, *shape) ||
        !ranks.insert(a.group_rank).second) {
      return true;  // contradicts: waiting cannot fix it
    }
  }
  if (shape == nullptr) return false;
  // Members a claimant knows to be gone will not come back: no lease is waited for them.
  for (int gone : GoneGroupRanks(newest)) {
    if (gone >= 0 && gone < shape->group_world_size) ranks.insert(gone);
  }
  return static_cast<int>(ranks.size()) == shape->group_world_size && *ranks.begin() == 0 &&
         *ranks.rbegin() == shape->group_world_size - 1;
}

std::set<int> RunState::GoneGroupRanks(int64_t round) const {
  std::set<int> gone;
  for (const auto& [conn, node] : nodes_) {
    if (node.claim && node.claim->last.round == round && node.claim->gone_group_rank) {
      gone.insert(*node.claim->gone_group_rank);
    }
  }
  return gone;
}

void RunState::ResetMajorityToClaimedRound(int64_t newest, const std::set<int>& gone) {
  // The recovered round is the last one for the majority rule: its size from the claims, the
  // ranks nobody claimed counted as silent unless a claim names them gone. Every claim of it
  // counts, also those whose workers were already stopped (a restart of the round was heard):
  // the round is still what the other side of a partition may hold a majority of, and without
  // it this server would have no reference at all and any number of nodes could go on.
  if (newest == 0) return;  // no claim names a round
  const Assignment* shape = nullptr;
  std::map<int, std::string> by_rank;
  for (const auto& [conn, node] : nodes_) {
    if (!node.claim || node.claim->last.round != newest) continue;
    const Assignment& a = node.claim->last;
    if (shape == nullptr) shape = &a;
    if (a.group_rank >= 0) by_rank.emplace(a.group_rank, node.info.node_id);
  }
  if (shape == nullptr) return;
  std::vector<std::string> member_ids(std::clamp(shape->group_world_size, 0, max_nodes_));
  for (const auto& [rank, id] : by_rank) {
    if (rank < static_cast<int>(member_ids.size())) member_ids[rank] = id;
  }
  last_round_.Reset(newest, std::move(member_ids), gone);
}

RunState::ClaimSurvey RunState::SurveyClaims(int64_t newest) const {
  ClaimSurvey survey;
  for (const auto& [conn, node] : nodes_) {
    if (!node.claim || node.claim->last.round != newest || newest == 0) continue;
    const Assignment& a = node.claim->last;
    if (!HasWorkers(*node.claim)) {
      if (survey.told_over.empty()) survey.told_over = Describe(node);
      continue;
    }
    survey.claimants.push_back(conn);
    if (survey.shape == nullptr) survey.shape = &a;
    if (survey.contradiction.empty()) {
      survey.contradiction = ContradictionOf(conn, node, *survey.shape, &survey.by_rank);
    }
  }
  return survey;
}

std::string RunState::ContradictionOf(ConnId conn, const Node& node, const Assignment& shape,
                                      std::map<int, ConnId>* by_rank) const {
  const Assignment& a = node.claim->last;
  if (a.group_world_size < 1 || a.group_world_size > max_nodes_) {
    return absl::StrCat(Describe(node), " claims a round of ", a.group_world_size,
                        " nodes; the run has at most ", max_nodes_);
  }
  if (!SameShape(a, shape)) {
    return absl::StrCat(Describe(node), " claims a round of ", a.group_world_size,
                        " nodes, world size ", a.world_size, ", master ", a.master_addr, ":",
                        a.master_port, "; others claim ", shape.group_world_size,
                        " nodes, world size ", shape.world_size, ", master ", shape.master_addr,
                        ":", shape.master_port);
  }
  if (a.group_rank < 0 || a.group_rank >= a.group_world_size) {
    return absl::StrCat(Describe(node), " claims group rank ", a.group_rank, " of ",
                        a.group_world_size);
  }
  if (auto [it, fresh] = by_rank->emplace(a.group_rank, conn); !fresh) {
    return absl::StrCat(Describe(nodes_.at(it->second)), " and ", Describe(node),
                        " both claim group rank ", a.group_rank);
  }
  return "";
}

void RunState::ReplayClaimedGroups(const std::vector<ConnId>& claimants,
                                   const std::map<ConnId, ResumeClaim>& claims, int64_t newest,
                                   TimePoint now, Outbox* out) {
  // What the groups reported while the server was away, as if it arrived now.
  for (ConnId conn : claimants) {
    const ResumeClaim& claim = claims.at(conn);
    // Claimants are members of the newest round, so GroupStatus cannot refuse these.
    if (claim.group == Group::kSucceeded) {
      GroupStatus(conn, newest, GroupState::kSucceeded, std::nullopt, now, out).IgnoreError();
    } else if (claim.group == Group::kFailed) {
      GroupStatus(conn, newest, GroupState::kFailed, claim.failure, now, out).IgnoreError();
    }
  }
}

void RunState::Settle(TimePoint now, Outbox* out) {
  recovery_deadline_.reset();
  int64_t newest = 0;
  for (const auto& [conn, node] : nodes_) {
    if (node.claim) newest = std::max(newest, node.claim->last.round);
  }
  round_ = newest;

  ClaimSurvey survey = SurveyClaims(newest);
  std::vector<ConnId>& claimants = survey.claimants;
  const std::string& contradiction = survey.contradiction;
  const std::string& told_over = survey.told_over;
  const Assignment* shape = survey.shape;
  const std::map<int, ConnId>& by_rank = survey.by_rank;
  std::vector<int> missing;
  const std::set<int> gone = GoneGroupRanks(newest);
  ResetMajorityToClaimedRound(newest, gone);
  if (shape != nullptr && contradiction.empty()) {
    for (int r = 0; r < shape->group_world_size; ++r) {
      if (by_rank.count(r) == 0) missing.push_back(r);
    }
  }

  for (auto& [conn, node] : nodes_) {
    // Workers of an older round are stale whatever happens to the newest one.
    if (node.claim && HasWorkers(*node.claim) && node.claim->last.round < newest) {
      out->push_back({conn, RestartNotice{node.claim->last.round, Cause::kServerRestart,
                                          absl::StrCat("round ", node.claim->last.round,
                                                       " is over: the run is at round ", newest),
                                          std::nullopt, restarts_used_}});
    }
    // Survivor order for the next round, where the claims can be trusted.
    const bool trusted =
        node.claim && node.claim->last.round == newest && newest > 0 && contradiction.empty();
    node.group_rank = trusted ? node.claim->last.group_rank : -1;
  }
  std::map<ConnId, ResumeClaim> claims;
  for (auto& [conn, node] : nodes_) {
    if (node.claim) claims.emplace(conn, *std::move(node.claim));
    node.claim.reset();
  }

  if (claimants.empty()) {
    phase_ = RunPhase::kJoining;
    join_deadline_ = now + timeouts_.join_timeout;
    MaybeFormRound(now, out);
    return;
  }
  phase_ = RunPhase::kRunning;
  succeeded_in_round_ = 0;
  for (ConnId conn : claimants) {
    nodes_.at(conn).in_round = true;
    ++members_in_round_;
  }
  const std::string after_restart = "after the rendezvous server restarted";
  if (!contradiction.empty()) {
    RestartRound(
        absl::StrCat("re-registrations ", after_restart, " contradict each other: ", contradiction),
        Cause::kServerRestart, RestartKind::kFree, std::nullopt, now, out);
    return;
  }
  if (!told_over.empty()) {
    RestartRound(absl::StrCat("round ", newest, " was already over ", after_restart, " (",
                              told_over, " had been told so)"),
                 Cause::kServerRestart, RestartKind::kFree, std::nullopt, now, out);
    return;
  }
  if (!missing.empty()) {
    const bool all_gone =
        std::all_of(missing.begin(), missing.end(), [&gone](int r) { return gone.count(r) > 0; });
    RestartRound(all_gone
                     ? absl::StrCat("group rank", missing.size() > 1 ? "s " : " ",
                                    absl::StrJoin(missing, ", "), " of round ", newest,
                                    " lost with the agent that hosted the rendezvous (its address "
                                    "refused connections; this server is its successor)")
                     : absl::StrCat("group rank", missing.size() > 1 ? "s " : " ",
                                    absl::StrJoin(missing, ", "), " of round ", newest,
                                    " did not re-register within ", ToMillis(timeouts_.lease()),
                                    " ms ", after_restart),
                 Cause::kNodeLostLease, RestartKind::kFailure, std::nullopt, now, out);
    return;
  }
  for (ConnId conn : claimants) out->push_back({conn, ResumedNotice{newest}});
  ReplayClaimedGroups(claimants, claims, newest, now, out);
  if (phase_ != RunPhase::kRunning || succeeded_in_round_ > 0) return;
  SeatTheOthers(now, out);
}

void RunState::SeatTheOthers(TimePoint now, Outbox* out) {
  if (members_in_round() < eligible_nodes() && members_in_round() < max_nodes_) {
    for (const auto& [conn, node] : nodes_) {
      if (node.in_round || node.set_aside.has_value()) continue;
      RestartRound(absl::StrCat(Describe(node), " joined"), Cause::kNodeJoined, RestartKind::kFree,
                   std::nullopt, now, out);
      break;
    }
    return;
  }
  // The round goes on full: whoever else came back waits as a spare (told by this server, which
  // is new to it), in arrival order.
  int position = 0;
  for (auto& [conn, node] : nodes_) {
    if (!node.in_round && !node.set_aside.has_value()) Standby(node, position++, out);
  }
}

}  // namespace ddprun::rendezvous
