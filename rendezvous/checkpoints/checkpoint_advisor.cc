#include "rendezvous/checkpoints/checkpoint_advisor.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/median.h"
#include "rendezvous/checkpoints/daly_model.h"

namespace ddprun::rendezvous {
namespace {

void Keep(std::deque<double>* kept, double value) {
  kept->push_back(value);
  if (kept->size() > CheckpointAdvisor::kKept) kept->pop_front();
}

// Seconds as people read them: 42.0 s, 12.5 min, 3.60 h.
std::string Span(double s) {
  if (s < 120) return absl::StrFormat("%.1f s", s);
  if (s < 7200) return absl::StrFormat("%.1f min", s / 60);
  return absl::StrFormat("%.2f h", s / 3600);
}

}  // namespace

std::string DescribeCheckpointAdvice(const CheckpointAdvice& a) {
  std::string out = absl::StrFormat(
      "checkpoint every %s (MTBF %s: %d failure%s in %s trained%s; save %.2f s, recovery %.2f s); "
      "effective training time %.1f %% predicted",
      Span(a.interval_s), Span(a.mtbf_s), a.failures, a.failures == 1 ? "" : "s", Span(a.trained_s),
      a.prior ? ", with the mtbf= prior" : "", a.save_s, a.recovery_s, 100 * a.predicted_ratio);
  if (a.measured_ratio.has_value()) {
    absl::StrAppend(&out, absl::StrFormat(", %.1f %% measured", 100 * *a.measured_ratio));
  }
  return out;
}

void CheckpointAdvisor::Started(TimePoint now) {
  if (!started_.has_value()) started_ = now;
}

void CheckpointAdvisor::Failure() { ++failures_; }

void CheckpointAdvisor::Report(const std::string& node_id, const CheckpointReport& report) {
  if (report.save_s.has_value() && *report.save_s >= 0) Keep(&saves_, *report.save_s);
  if (report.recovery_s.has_value() && *report.recovery_s >= 0) {
    Keep(&recoveries_, *report.recovery_s);
  }
  if (report.effective_ratio.has_value()) {
    ratios_[node_id] = std::clamp(*report.effective_ratio, 0.0, 1.0);
  }
}

std::optional<CheckpointAdvice> CheckpointAdvisor::Advise(TimePoint now) const {
  if (saves_.empty()) return std::nullopt;
  CheckpointAdvice a;
  a.trained_s = started_.has_value() ? std::chrono::duration<double>(now - *started_).count() : 0;
  a.prior = prior_.has_value();
  const double prior_s = prior_.has_value() ? std::chrono::duration<double>(*prior_).count() : 0;
  a.failures = failures_;
  a.mtbf_s = (a.trained_s + prior_s) / (failures_ + 1);
  if (a.mtbf_s <= 0) return std::nullopt;
  a.save_s = Median(saves_);
  a.recovery_s = recoveries_.empty() ? 0 : Median(recoveries_);
  a.interval_s = DalyInterval(a.save_s, a.mtbf_s);
  a.predicted_ratio = DalyEfficiency(a.interval_s, a.save_s, a.recovery_s, a.mtbf_s);
  if (!ratios_.empty()) {
    std::vector<double> ratios;
    for (const auto& [node, ratio] : ratios_) ratios.push_back(ratio);
    a.measured_ratio = Median(ratios);
  }
  return a;
}

}  // namespace ddprun::rendezvous
