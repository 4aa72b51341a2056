// RunState: the preflight before the first round (issue 41, docs/design.md §3d). The round that
// would form waits while every node measures; the verdicts then keep the slowest nodes out while
// spares remain to take their places, and the round forms with the others. Also where the nodes
// reach each other (the probes' targets, and MASTER_ADDR).

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/strings.h"
#include "rendezvous/core/run_state.h"

namespace ddprun::rendezvous {

std::string RunState::AddressForPeers(const Node& node, bool some_peer_remote) {
  const bool use_hostname = some_peer_remote && node.info.local_addr.empty() &&
                            IsLoopbackHost(node.addr) && !node.info.hostname.empty();
  return use_hostname ? node.info.hostname : node.addr;
}

bool RunState::SomeNodeRemote() const {
  return std::any_of(nodes_.begin(), nodes_.end(),
                     [](const auto& entry) { return !IsLoopbackHost(entry.second.addr); });
}

bool RunState::PreflightDue() const {
  return timeouts_.preflight.enabled && round_ == 0 && !preflight_done_ && nodes_.size() >= 2;
}

void RunState::FormRoundAfterPreflight(TimePoint now, Outbox* out) {
  if (PreflightDue()) {
    StartPreflight(now, out);
    return;
  }
  FormRound(now, out);
}

void RunState::StartPreflight(TimePoint now, Outbox* out) {
  // Arrival order: the ring's neighbours are the nodes that joined one after the other.
  std::vector<const Node*> order;
  for (const auto& [conn, node] : nodes_) order.push_back(&node);
  std::sort(order.begin(), order.end(),
            [](const Node* a, const Node* b) { return a->arrival < b->arrival; });
  // The address the node's workers would be reached at (as MASTER_ADDR would name it).
  const bool some_remote = SomeNodeRemote();
  std::vector<PreflightParticipant> participants;
  for (const Node* n : order) {
    participants.push_back({n->info.node_id, n->info.hostname, AddressForPeers(*n, some_remote),
                            n->info.preflight_port});
  }
  preflight_round_.emplace(++preflight_generation_, std::move(participants), timeouts_.preflight,
                           now);
  for (auto& [node_id, request] : preflight_round_->Requests()) {
    out->push_back({by_node_id_.at(node_id), std::move(request)});
  }
  log_.push_back(absl::StrCat("run '", run_id_, "': preflight of ", order.size(),
                              " nodes: compute and network probes before the first round"));
}

void RunState::Preflight(ConnId conn, const PreflightReport& report, TimePoint now, Outbox* out) {
  auto it = nodes_.find(conn);
  if (it == nodes_.end()) return;
  if (it->second.set_aside.has_value()) {
    // A try to requalify: the one asked for (a late report of an earlier one is dropped).
    const int64_t asked = it->second.set_aside->generation;
    if (asked != 0 && report.generation == asked) Requalify(it->second, report, now, out);
    return;
  }
  if (!preflight_round_.has_value()) return;
  if (!preflight_round_->Report(it->second.info.node_id, report)) return;
  MaybeFormRound(now, out);
}

void RunState::FinishPreflight(TimePoint now, Outbox* out) {
  PreflightSummary summary;
  summary.took_s = std::chrono::duration<double>(now - preflight_round_->started()).count();
  summary.verdicts = preflight_round_->Judge();
  summary.median = preflight_round_->Median();
  preflight_median_ = summary.median;
  preflight_round_.reset();
  preflight_done_ = true;

  // The nodes beyond the round's seats are its spares: as many slow nodes as there are spares
  // are kept out, the slowest first, and the spares take their places.
  const int connected = static_cast<int>(nodes_.size());
  int spares = connected - std::min(max_nodes_, connected);
  std::vector<PreflightVerdict*> slow;
  for (PreflightVerdict& v : summary.verdicts) {
    if (v.slow()) slow.push_back(&v);
  }
  std::stable_sort(slow.begin(), slow.end(),
                   [](const PreflightVerdict* a, const PreflightVerdict* b) {
                     return a->worst_ratio < b->worst_ratio;
                   });
  for (PreflightVerdict* v : slow) {
    if (spares == 0) break;
    auto found = by_node_id_.find(v->node_id);
    if (found == by_node_id_.end()) continue;  // gone already
    v->kept_out = true;
    --spares;
    const std::string findings = absl::StrJoin(v->shortfalls, "; ");
    SetAside(nodes_.at(found->second),
             absl::StrCat("this node was kept out by the preflight: ", findings,
                          "; a spare takes its place"),
             now, out);
  }
  for (const PreflightVerdict& v : summary.verdicts) {
    log_.push_back(absl::StrCat("run '", run_id_, "': preflight: node ", v.node_id, " (",
                                v.hostname, "): ", DescribeVerdict(v)));
  }
  const size_t started_slow =
      slow.size() - std::count_if(slow.begin(), slow.end(), [](auto* v) { return v->kept_out; });
  if (started_slow > 0) {
    log_.push_back(absl::StrCat("run '", run_id_, "': preflight: ", started_slow,
                                " slow node(s) and no spare to take their places: the job starts "
                                "with them"));
  }
  log_.push_back(absl::StrCat("run '", run_id_, "': preflight took ",
                              absl::StrFormat("%.2f", summary.took_s), " s"));
  preflight_summary_ = std::move(summary);
  MaybeFormRound(now, out);
}

}  // namespace ddprun::rendezvous
