#include "rendezvous/detector/loss_confirmation.h"

#include <algorithm>
#include <utility>

namespace ddprun::rendezvous {

absl::Status ValidateConfirmationRule(const ConfirmationRule& rule) {
  if (rule.observers_required < 1) {
    return absl::InvalidArgumentError("failure detector: observers_required must be >= 1");
  }
  if (rule.suspicion_ttl <= Duration::zero()) {
    return absl::InvalidArgumentError("failure detector: suspicion_ttl must be > 0");
  }
  return absl::OkStatus();
}

LossConfirmation::LossConfirmation(ConfirmationRule rule) : rule_(std::move(rule)) {}

void LossConfirmation::Suspect(const std::string& observer, const std::string& suspect,
                               Evidence evidence, TimePoint now) {
  if (observer == suspect) return;
  reports_[suspect][observer] = Report{now, evidence};
}

void LossConfirmation::Withdraw(const std::string& observer, const std::string& suspect) {
  auto it = reports_.find(suspect);
  if (it == reports_.end()) return;
  it->second.erase(observer);
  if (it->second.empty()) reports_.erase(it);
}

void LossConfirmation::Forget(const std::string& node) {
  reports_.erase(node);
  for (auto it = reports_.begin(); it != reports_.end();) {
    it->second.erase(node);
    it = it->second.empty() ? reports_.erase(it) : std::next(it);
  }
}

LossDecision LossConfirmation::Decide(const std::string& suspect, int observers_available,
                                      TimePoint now) const {
  LossDecision d;
  auto it = reports_.find(suspect);
  if (it == reports_.end()) return d;
  for (const auto& [observer, report] : it->second) {
    // A report from the future (equal clocks across calls are allowed) stands like a fresh one.
    if (now - report.at > rule_.suspicion_ttl) continue;
    ++d.confirmations;
    if (rule_.decisive.count(report.evidence) > 0) d.decisive = true;
  }
  const int needed = std::min(rule_.observers_required, observers_available);
  d.lost = d.decisive || (needed > 0 && d.confirmations >= needed);
  return d;
}

}  // namespace ddprun::rendezvous
