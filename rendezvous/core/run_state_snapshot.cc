// RunState: the run's durable part (RunSnapshot) and a new coordinator's continuation of it
// (the etcd backend, docs/design.md "etcd"): what the snapshot keeps, and how the nodes that
// joined the new state are put back in their places.

#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "rendezvous/core/run_state.h"

namespace ddprun::rendezvous {

RunSnapshot RunState::Snapshot() const {
  RunSnapshot s;
  s.round = round_;
  s.phase = phase_;
  s.restarts_used = restarts_used_;
  s.succeeded_in_round = succeeded_in_round_;
  s.crash_loop_signature = crash_loop_.unprogressed();
  s.spares_used = spares_used_;
  for (const auto& [conn, node] : nodes_) {
    s.members.push_back({node.info.node_id, node.group_rank, node.in_round, node.spare,
                         node.set_aside.has_value() ? node.set_aside->why : ""});
  }
  s.preflight_median = preflight_median_;
  s.preflight = preflight_summary_;
  if (phase_ == RunPhase::kClosed) {
    s.close_status = close_status_;
  }
  return s;
}

void RunState::Restore(const RunSnapshot& s, TimePoint now, Outbox* out) {
  // The preflight is the first round's. The joins that rebuilt this state may have started one
  // afresh: a run restored past its first round has none; one restored before it asks again.
  preflight_round_.reset();
  if (s.round > 0) preflight_done_ = true;
  if (s.preflight_median.has_value()) preflight_median_ = s.preflight_median;
  if (s.preflight.has_value()) preflight_summary_ = s.preflight;
  round_ = s.round;
  restarts_used_ = s.restarts_used;
  spares_used_ = s.spares_used;
  crash_loop_ = CrashLoopBreaker(s.crash_loop_signature);
  if (s.phase == RunPhase::kClosed) {
    CloseRun(s.close_status, std::nullopt, out);
    return;
  }
  std::unordered_map<std::string, const RunSnapshot::Member*> known;
  for (const RunSnapshot::Member& m : s.members) known[m.node_id] = &m;
  members_in_round_ = 0;
  std::string newcomer;
  for (auto& [conn, node] : nodes_) {
    auto it = known.find(node.info.node_id);
    node.group_rank = it != known.end() ? it->second->group_rank : -1;
    node.in_round = it != known.end() && it->second->in_round && s.phase == RunPhase::kRunning;
    node.spare = it != known.end() && it->second->spare;
    if (node.in_round) ++members_in_round_;
    if (it != known.end() && !it->second->set_aside.empty()) {
      // Joined again, it was taken for a newcomer: it still has to pass the preflight.
      node.set_aside =
          Node::SetAside{it->second->set_aside, now + timeouts_.preflight.requalify_interval};
      set_aside_.insert(conn);
      set_aside_ids_[node.info.node_id] = it->second->set_aside;
    }
    if (it == known.end() && newcomer.empty()) newcomer = Describe(node);
  }
  phase_ = s.phase;
  succeeded_in_round_ = s.succeeded_in_round;
  join_deadline_.reset();
  last_call_deadline_.reset();
  if (phase_ == RunPhase::kJoining) {
    join_deadline_ = now + timeouts_.join_timeout;
    MaybeFormRound(now, out);
    return;
  }
  std::string lost;
  int num_lost = 0;
  for (const RunSnapshot::Member& m : s.members) {
    if (m.in_round && by_node_id_.count(m.node_id) == 0 && num_lost++ == 0) {
      lost = absl::StrCat("node ", m.node_id);
    }
  }
  if (num_lost > 0 && EndsWithoutRestart(out)) {
    // Nothing to restart: the round's work is done.
  } else if (num_lost > 0) {
    const std::string more = num_lost > 1 ? absl::StrCat(" (and ", num_lost - 1, " more)") : "";
    RestartRound(absl::StrCat(lost, more, " was lost while the rendezvous changed coordinator"),
                 Cause::kNodeLostLease,  // etcd: its key (and lease) vanished
                 RestartKind::kFailure, std::nullopt, now, out);
  } else if (!newcomer.empty() && members_in_round() < max_nodes_ && succeeded_in_round_ == 0) {
    RestartRound(absl::StrCat(newcomer, " joined"), Cause::kNodeJoined, RestartKind::kFree,
                 std::nullopt, now, out);
  } else if (phase_ == RunPhase::kRunning) {
    // The round goes on. Spares of the old coordinator stay spares (they were told); a node it
    // did not know waits beyond the round: told now, after them.
    int position = 0;
    for (auto& [conn, node] : nodes_) position += node.spare ? 1 : 0;
    for (auto& [conn, node] : nodes_) {
      if (!node.in_round && !node.spare && !node.set_aside.has_value()) {
        Standby(node, position++, out);
      }
    }
  }
}

}  // namespace ddprun::rendezvous
