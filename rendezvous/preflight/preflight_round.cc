#include "rendezvous/preflight/preflight_round.h"

#include <utility>

namespace ddprun::rendezvous {

PreflightRound::PreflightRound(int64_t generation, std::vector<PreflightParticipant> participants,
                               const PreflightSettings& settings, TimePoint now)
    : generation_(generation),
      participants_(std::move(participants)),
      settings_(settings),
      started_(now),
      deadline_(now + settings.deadline),
      ring_size_(participants_.size()) {
  for (const PreflightParticipant& p : participants_) reports_[p.node_id];
}

PreflightRequest PreflightRound::Add(const PreflightParticipant& participant) {
  PreflightRequest request;
  request.generation = generation_;
  for (size_t i = 0; i < ring_size_ && request.targets.size() < kTargetsPerNode; ++i) {
    const PreflightParticipant& p = participants_[i];
    if (p.port > 0 && reports_.count(p.node_id) > 0) {
      request.targets.push_back({p.node_id, p.addr, p.port});
    }
  }
  participants_.push_back(participant);
  reports_[participant.node_id];
  return request;
}

std::vector<std::pair<std::string, PreflightRequest>> PreflightRound::Requests() const {
  std::vector<std::pair<std::string, PreflightRequest>> requests;
  const size_t n = ring_size_;
  for (size_t i = 0; i < n; ++i) {
    PreflightRequest request;
    request.generation = generation_;
    // The next kTargetsPerNode listeners after it in the ring (fewer in a smaller run).
    for (size_t step = 1; step < n && request.targets.size() < kTargetsPerNode; ++step) {
      const PreflightParticipant& next = participants_[(i + step) % n];
      if (next.port > 0) request.targets.push_back({next.node_id, next.addr, next.port});
    }
    requests.emplace_back(participants_[i].node_id, std::move(request));
  }
  return requests;
}

bool PreflightRound::Report(const std::string& node_id, const PreflightReport& report) {
  auto it = reports_.find(node_id);
  if (it == reports_.end() || report.generation != generation_ || it->second.has_value()) {
    return false;
  }
  it->second = report;
  return true;
}

void PreflightRound::Forget(const std::string& node_id) { reports_.erase(node_id); }

bool PreflightRound::Complete() const {
  for (const auto& [id, report] : reports_) {
    if (!report.has_value()) return false;
  }
  return true;
}

std::vector<PreflightEntry> PreflightRound::Entries() const {
  std::vector<PreflightEntry> entries;
  for (const PreflightParticipant& p : participants_) {
    auto it = reports_.find(p.node_id);
    if (it == reports_.end()) continue;  // left the run
    entries.push_back({p.node_id, p.hostname, it->second});
  }
  return entries;
}

std::vector<PreflightVerdict> PreflightRound::Judge() const {
  return JudgePreflight(Entries(), settings_.margin);
}

PreflightFigures PreflightRound::Median() const { return MedianFigures(Entries()); }

}  // namespace ddprun::rendezvous
