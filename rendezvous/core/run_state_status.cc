// RunState: what a run reports of itself: the status page's view (Status), the ranks'
// progress, from which a hang names its straggler, and the silence verdict of each node.

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/strings.h"
#include "rendezvous/core/run_state.h"

namespace ddprun::rendezvous {

void RunState::Progress(ConnId conn, const std::vector<RankProgress>& progress, TimePoint now) {
  auto it = nodes_.find(conn);
  if (it == nodes_.end()) return;
  // Bounded by what one node can run; a larger list is not an agent's.
  if (progress.size() > 4096) return;
  it->second.progress = progress;
  it->second.progress_at = now;
}

std::optional<SlowNodeChange> RunState::Compute(ConnId conn,
                                                const std::vector<RankCompute>& compute,
                                                TimePoint now, Outbox* out) {
  auto it = nodes_.find(conn);
  if (it == nodes_.end() || !it->second.in_round || phase_ != RunPhase::kRunning) {
    return std::nullopt;
  }
  // The node runs at its slowest rank's pace: the others on it wait for that one too.
  NodeComputeReport report;
  report.node_id = it->second.info.node_id;
  for (const RankCompute& c : compute) {
    if (c.steps <= 0 || !(c.compute_ms >= 0) || c.compute_ms > 1e9) continue;  // nonsense
    if (c.compute_ms >= report.compute_ms) {
      report.compute_ms = c.compute_ms;
      report.steps = c.steps;
    }
  }
  std::optional<SlowNodeChange> change = slow_nodes_.Report(report, now);
  // At any report while it stands named: a spare that arrives later still takes its place.
  const std::optional<NodeComputeStanding> standing = slow_nodes_.StandingOf(report.node_id);
  if (timeouts_.slow_nodes.evict && standing.has_value() && standing->slow && SpareStandsReady()) {
    EvictSlow(conn, *standing, now, out);
  }
  return change;
}

void RunState::Checkpoint(ConnId conn, const CheckpointReport& report, TimePoint now) {
  auto it = nodes_.find(conn);
  if (it == nodes_.end() || report.empty()) return;
  checkpoints_.Report(it->second.info.node_id, report);
  checkpoint_advice_ = checkpoints_.Advise(now);
}

void RunState::EvictSlow(ConnId conn, const NodeComputeStanding& standing, TimePoint now,
                         Outbox* out) {
  auto it = nodes_.find(conn);
  if (it == nodes_.end()) return;
  const std::string figures =
      absl::StrFormat("its workers computed %.1f ms a step, %.2fx the run's median node",
                      standing.compute_ms, standing.ratio);
  const std::string reason = absl::StrCat(Describe(it->second), " was evicted as slow: ", figures);
  // Not given up: the node is alive and would only be judged slow again. Set aside (or closed
  // out, where there is no preflight to pass again); its group rank goes to the spare.
  Node& node = it->second;
  node.in_round = false;
  --members_in_round_;
  node.progress.clear();
  SetAside(node,
           absl::StrCat("this node was evicted from the run as slow (--evict-slow): ", figures,
                        "; a spare takes its group rank"),
           now, out);
  if (EndsWithoutRestart(out)) return;
  // Free: nothing failed, and the budget of --max-restarts stays for failures.
  RestartRound(reason, Cause::kNodeSlow, RestartKind::kFree, std::nullopt, now, out);
}

std::string RunState::Straggler(TimePoint now) const {
  // Lowest step first (a rank stuck outside a collective is a step behind the ranks waiting in
  // it), then the longest without a sign of life.
  const Node* best_node = nullptr;
  const RankProgress* best = nullptr;
  int64_t best_idle = 0;
  for (const auto& [conn, node] : nodes_) {
    if (!node.in_round) continue;
    for (const RankProgress& p : node.progress) {
      const int64_t idle = p.idle_ms + ToMillis(now - node.progress_at);
      const bool better = best == nullptr ||
                          (p.step >= 0 && (best->step < 0 || p.step < best->step)) ||
                          (p.step == best->step && idle > best_idle);
      if (better) {
        best = &p;
        best_node = &node;
        best_idle = idle;
      }
    }
  }
  if (best == nullptr) return "";
  return absl::StrCat("rank ", best->rank, " on ", best_node->info.hostname, " (",
                      best->step >= 0 ? absl::StrCat("step ", best->step, ", ") : "",
                      "no progress for ", absl::StrFormat("%.1f", best_idle / 1000.0), " s)");
}

RunStatus RunState::Status(bool with_members) const {
  RunStatus s;
  s.run_id = run_id_;
  s.round = round_;
  s.phase = phase_;
  s.restarts_used = restarts_used_;
  s.max_restarts = max_restarts_;
  s.min_nodes = min_nodes_;
  s.max_nodes = max_nodes_;
  s.close_message = close_message_;
  s.num_nodes = static_cast<int>(nodes_.size());
  s.spares = phase_ == RunPhase::kRunning ? eligible_nodes() - members_in_round() : 0;
  s.spares_used = spares_used_;
  s.slow_nodes = static_cast<int>(slow_nodes_.SlowNodes().size());
  s.checkpoint_advice = checkpoint_advice_;
  s.preflight = preflight_summary_;
  if (preflight_round_.has_value()) s.preflight = PreflightSummary{/*running=*/true, 0, {}};
  if (!with_members) return s;
  s.restarts = restart_log_;
  s.steps.assign(steps_.begin(), steps_.end());
  std::vector<const Node*> order;
  for (const auto& [conn, node] : nodes_) order.push_back(&node);
  std::sort(order.begin(), order.end(), [](const Node* a, const Node* b) {
    if (a->in_round != b->in_round) return a->in_round;
    if (a->in_round) return a->group_rank < b->group_rank;
    return a->arrival < b->arrival;
  });
  for (const Node* n : order) {
    MemberStatus m;
    m.node_id = n->info.node_id;
    m.hostname = n->info.hostname;
    m.addr = n->addr;
    m.group_rank = n->in_round ? n->group_rank : -1;
    m.nproc_per_node = n->info.nproc_per_node;
    m.state = n->in_round                    ? "running"
              : n->set_aside.has_value()     ? "set aside"
              : phase_ == RunPhase::kRunning ? "spare"
                                             : "waiting";
    m.last_seen = n->last_seen;
    if (n->in_round) {
      if (std::optional<NodeComputeStanding> c = slow_nodes_.StandingOf(n->info.node_id)) {
        m.compute_ms = c->compute_ms;
        m.compute_ratio = c->ratio;
        m.slow = c->slow;
      }
    }
    if (n->claim.has_value() && n->claim->group != ResumeClaim::Group::kWaiting) {
      m.group_rank = n->claim->last.group_rank;
      m.state = "recovering";
    }
    s.members.push_back(std::move(m));
  }
  return s;
}

SilenceVerdict RunState::SilenceVerdictOf(ConnId conn) const {
  auto it = nodes_.find(conn);
  if (it == nodes_.end()) return SilenceVerdict::kByLease;
  switch (timeouts_.liveness.mode) {
    case LivenessMode::kOn:
      return SilenceVerdict::kBySilence;
    case LivenessMode::kAuto:
      // A quick verdict pays only where a spare takes the lost rank at once; without one a fixed
      // world waits for the node anyway, and a flap of its link would cost a restart.
      return it->second.in_round && SpareStandsReady() ? SilenceVerdict::kBySilence
                                                       : SilenceVerdict::kByLease;
    case LivenessMode::kOff:
      break;
  }
  return SilenceVerdict::kByLease;
}

std::vector<ConnId> RunState::Conns() const {
  std::vector<ConnId> conns;
  conns.reserve(nodes_.size());
  for (const auto& [conn, node] : nodes_) conns.push_back(conn);
  return conns;
}

}  // namespace ddprun::rendezvous
