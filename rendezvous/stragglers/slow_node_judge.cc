#include "rendezvous/stragglers/slow_node_judge.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ddprun::rendezvous {

std::string SlowNodeChange::Describe() const {
  if (!slow) {
    return absl::StrFormat(
        "node %s is no longer slow: its workers compute %.1f ms a step, %.2fx the job's median "
        "node (%.1f ms), %d reports in a row",
        node_id, compute_ms, ratio, median_ms, windows);
  }
  return absl::StrFormat(
      "node %s is slow: its workers compute %.1f ms a step before they wait for the others, "
      "%.2fx the job's median node (%.1f ms), %d reports in a row",
      node_id, compute_ms, ratio, median_ms, windows);
}

std::optional<double> SlowNodeJudge::MedianMs(TimePoint now) const {
  std::vector<double> fresh;
  for (const auto& [id, node] : nodes_) {
    if (now - node.at <= options_.stale_after) fresh.push_back(node.compute_ms);
  }
  if (static_cast<int>(fresh.size()) < std::max(2, options_.min_nodes)) return std::nullopt;
  // The lower median: with two nodes it is the faster one, so that one slow node of two is
  // measured against the other instead of against their average.
  const auto mid = fresh.begin() + static_cast<std::ptrdiff_t>((fresh.size() - 1) / 2);
  std::nth_element(fresh.begin(), mid, fresh.end());
  return *mid;
}

std::optional<SlowNodeChange> SlowNodeJudge::Report(const NodeComputeReport& report,
                                                    TimePoint now) {
  if (report.steps <= 0) return std::nullopt;  // no step in the window: nothing to compare
  Node& node = nodes_[report.node_id];
  node.compute_ms = report.compute_ms;
  node.at = now;
  const std::optional<double> median = MedianMs(now);
  if (!median.has_value() || *median < options_.min_compute_ms) {
    node.ratio = 0;
    return std::nullopt;
  }
  node.ratio = report.compute_ms / *median;
  const bool above = node.ratio > 1.0 + options_.margin;
  node.above = above ? node.above + 1 : 0;
  node.below = above ? 0 : node.below + 1;
  const int streak = above ? node.above : node.below;
  if (node.slow == above || streak < options_.windows) return std::nullopt;
  node.slow = above;
  SlowNodeChange change;
  change.node_id = report.node_id;
  change.slow = above;
  change.compute_ms = report.compute_ms;
  change.median_ms = *median;
  change.ratio = node.ratio;
  change.windows = streak;
  return change;
}

void SlowNodeJudge::Forget(const std::string& node_id) { nodes_.erase(node_id); }

std::optional<NodeComputeStanding> SlowNodeJudge::StandingOf(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return std::nullopt;
  return NodeComputeStanding{it->second.compute_ms, it->second.ratio, it->second.slow};
}

std::vector<std::string> SlowNodeJudge::SlowNodes() const {
  std::vector<std::string> out;
  for (const auto& [id, node] : nodes_) {
    if (node.slow) out.push_back(id);
  }
  return out;
}

}  // namespace ddprun::rendezvous
