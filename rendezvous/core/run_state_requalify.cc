// RunState: nodes set aside (issue 41, docs/design.md §3d). A node the preflight kept out, or
// --evict-slow evicted, stays connected but takes no place: it is neither a member nor a spare.
// Every requalify_interval it is asked to measure again, as in the preflight (its compute, its
// links to two nodes of the run, its health check); judged against the preflight's median node
// it either passes, and is seated as a node that joined would be (a spare, most often), or
// waits for the next try, told why. A slow node that got better serves again; one that did not
// costs the job nothing but its connection. Without a preflight there is nothing to pass: the
// node is closed out as evicted, as before requalification existed.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rendezvous/api/eviction.h"
#include "rendezvous/core/run_state.h"
#include "rendezvous/preflight/preflight_judge.h"

namespace ddprun::rendezvous {
namespace {

// "30 s", "2.5 s".
std::string SecondsText(Duration d) {
  return absl::StrCat(std::chrono::duration<double>(d).count(), " s");
}

}  // namespace

bool RunState::CanRequalify() const {
  return timeouts_.preflight.enabled && preflight_median_.has_value();
}

std::optional<std::string> RunState::StillSetAside(const JoinRequest& request) const {
  for (const std::string& id : {request.node.node_id, request.node.formerly_node_id}) {
    auto it = set_aside_ids_.find(id);
    if (!id.empty() && it != set_aside_ids_.end()) return it->second;
  }
  if (request.resume.has_value() && !request.resume->set_aside.empty()) {
    // A server that restarted, or succeeded the agent that hosted the run: it has no preflight
    // figures, and closes the node as evicted (SetAside).
    return absl::StrCat("this node was set aside before it re-registered (the server said then: ",
                        request.resume->set_aside, ")");
  }
  return std::nullopt;
}

void RunState::SetAside(Node& node, const std::string& why, TimePoint now, Outbox* out) {
  if (!CanRequalify()) {
    out->push_back({node.conn, CloseNotice{EvictedStop(why)}});
    RemoveNode(node.conn);
    return;
  }
  const Duration interval = timeouts_.preflight.requalify_interval;
  node.set_aside = Node::SetAside{why, now + interval};
  node.spare = false;
  node.group_rank = -1;  // its place is the spare's now
  set_aside_.insert(node.conn);
  if (set_aside_ids_.size() < kMaxUntaken || set_aside_ids_.count(node.info.node_id) > 0) {
    set_aside_ids_[node.info.node_id] = why;
  }
  out->push_back(
      {node.conn, StandbyNotice{round_, members_in_round(), -1,
                                absl::StrCat(why, "; it measures again in ", SecondsText(interval),
                                             " and is a spare once it passes")}});
}

void RunState::TickSetAside(TimePoint now, Outbox* out) {
  // Asking and failing a try leave the set as it is (only a passed report, not a tick, seats).
  for (ConnId conn : set_aside_) {
    Node& node = nodes_.at(conn);
    const Node::SetAside& aside = *node.set_aside;
    if (aside.generation == 0 && now >= aside.next_try) {
      AskToRequalify(node, now, out);
    } else if (aside.generation != 0 && now >= aside.report_due) {
      FailRequalification(node, "it sent no preflight report before the deadline", now, out);
    }
  }
}

void RunState::AskToRequalify(Node& node, TimePoint now, Outbox* out) {
  // Two nodes of the run that listen for probes: spares first (they are idle), then members
  // (a probe costs a member's link 0.4 s of traffic shared with its training).
  std::vector<const Node*> peers;
  for (const auto& [conn, other] : nodes_) {
    if (conn != node.conn && !other.set_aside.has_value() && other.info.preflight_port > 0) {
      peers.push_back(&other);
    }
  }
  std::stable_sort(peers.begin(), peers.end(), [](const Node* a, const Node* b) {
    if (a->in_round != b->in_round) return !a->in_round;
    return a->arrival < b->arrival;
  });
  PreflightRequest request;
  request.generation = ++preflight_generation_;
  const bool some_remote = SomeNodeRemote();
  for (const Node* peer : peers) {
    if (request.targets.size() == PreflightRound::kTargetsPerNode) break;
    request.targets.push_back(
        {peer->info.node_id, AddressForPeers(*peer, some_remote), peer->info.preflight_port});
  }
  node.set_aside->generation = request.generation;
  node.set_aside->report_due = now + timeouts_.preflight.deadline;
  out->push_back({node.conn, std::move(request)});
}

void RunState::FailRequalification(Node& node, const std::string& why, TimePoint now, Outbox* out) {
  const Duration interval = timeouts_.preflight.requalify_interval;
  node.set_aside->why = absl::StrCat("it did not pass the preflight again: ", why);
  node.set_aside->generation = 0;
  node.set_aside->next_try = now + interval;
  log_.push_back(absl::StrCat("run '", run_id_, "': ", Describe(node), " stays set aside: ", why,
                              "; next try in ", SecondsText(interval)));
  out->push_back({node.conn, StandbyNotice{round_, members_in_round(), -1,
                                           absl::StrCat(node.set_aside->why, "; next try in ",
                                                        SecondsText(interval))}});
}

void RunState::Requalify(Node& node, const PreflightReport& report, TimePoint now, Outbox* out) {
  const PreflightVerdict verdict =
      JudgeRequalification({node.info.node_id, node.info.hostname, report}, *preflight_median_,
                           timeouts_.preflight.margin);
  if (verdict.slow()) {
    FailRequalification(node, absl::StrJoin(verdict.shortfalls, "; "), now, out);
    return;
  }
  log_.push_back(absl::StrCat("run '", run_id_, "': ", Describe(node),
                              " passed the preflight again: ", DescribeVerdict(verdict)));
  set_aside_ids_.erase(node.info.node_id);
  set_aside_.erase(node.conn);
  node.set_aside.reset();
  if (SeatTakesAPlace()) {
    // Told at once that it is set aside no more, before the assignment of the round that forms
    // or restarts for it: until then its re-registration would still claim it set aside. (Seat
    // tells a node that waits as a spare itself.)
    out->push_back({node.conn, StandbyNotice{round_, members_in_round(), 0}});
  }
  Seat(node.conn, absl::StrCat(Describe(node), " passed the preflight again"), Cause::kNodeJoined,
       now, out);
}

}  // namespace ddprun::rendezvous
