#include "launcher/hangs/hang_detector.h"

#include <climits>
#include <nlohmann/json.hpp>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ddprun::launcher {
namespace {

std::string Seconds(Duration d) {
  return absl::StrFormat("%.1f s", std::chrono::duration<double>(d).count());
}

}  // namespace

absl::StatusOr<StepReport> ParseStepReport(absl::string_view line) {
  const nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr,
                                                 /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  auto pid = j.find("pid");
  auto step = j.find("step");
  if (pid == j.end() || !pid->is_number_integer() || pid->get<int64_t>() <= 0 ||
      pid->get<int64_t>() > (1 << 22)) {
    return absl::InvalidArgumentError("no valid \"pid\"");
  }
  if (step == j.end() || !step->is_number_integer() || step->get<int64_t>() < 0) {
    return absl::InvalidArgumentError("no valid \"step\"");
  }
  StepReport report{static_cast<int>(pid->get<int64_t>()), step->get<int64_t>(), std::nullopt,
                    std::nullopt};
  // Optional: a line without them (an older worker) or with a bad value still reports the step.
  auto milliseconds = [&j](const char* key) -> std::optional<double> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number() || !(it->get<double>() >= 0) ||
        it->get<double>() >= 1e9) {
      return std::nullopt;
    }
    return it->get<double>();
  };
  report.compute_ms = milliseconds("compute_ms");
  report.checkpoint_ms = milliseconds("checkpoint_ms");
  return report;
}

std::string HangVerdict::Describe() const {
  switch (kind) {
    case Kind::kTimerExpired:
      return absl::StrCat("FileTimer scope ", scope, " expired");
    case Kind::kNoProgress:
      return at_start ? absl::StrCat("no sign of life for ", Seconds(idle),
                                     " since its start (--hang-startup-timeout)")
                      : absl::StrCat("no progress for ", Seconds(idle), " (--hang-timeout)");
    case Kind::kUninterruptible:
      return absl::StrCat("in uninterruptible sleep (D state) for ", Seconds(idle),
                          " (TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT)");
  }
  return "hung";
}

HangDetector::HangDetector(Config config, int nproc) : config_(config), ranks_(nproc) {}

void HangDetector::Reset(TimePoint now) {
  for (Rank& r : ranks_) {
    r = Rank{};  // every field its default: no field added later is missed
    r.last_progress = now;
  }
}

HangDetector::Rank* HangDetector::At(int local_rank) {
  if (local_rank < 0 || local_rank >= static_cast<int>(ranks_.size())) return nullptr;
  return &ranks_[local_rank];
}

void HangDetector::OnOutput(int local_rank, TimePoint now) {
  if (Rank* r = At(local_rank)) {
    r->last_progress = now;
    r->alive = true;
  }
}

void HangDetector::OnStep(int local_rank, int64_t step, TimePoint now) {
  if (Rank* r = At(local_rank)) {
    r->last_progress = now;
    r->alive = true;
    r->step = step;
  }
}

void HangDetector::OnTimerMessage(int local_rank, TimePoint now) { OnOutput(local_rank, now); }

void HangDetector::OnProcessState(int local_rank, char state, TimePoint now) {
  Rank* r = At(local_rank);
  if (r == nullptr) return;
  r->stopped = state == 'T' || state == 't';
  if (state != 'D') {
    r->uninterruptible_since.reset();
  } else if (!r->uninterruptible_since.has_value()) {
    r->uninterruptible_since = now;
  }
}

void HangDetector::OnExited(int local_rank) {
  if (Rank* r = At(local_rank)) r->exited = true;
}

std::optional<HangVerdict> HangDetector::Check(TimePoint now) const {
  // Which of several silent ranks is the hung one matters when only it is replaced (in-process
  // recovery): the others are usually waiting for it inside a collective. A stopped process
  // first, then the rank furthest behind (a rank stuck outside the collective has not reported
  // starting the step its peers wait in), then the longest silence.
  std::optional<HangVerdict> worst;
  auto rank_of = [&](const HangVerdict& v) {
    const Rank& r = ranks_[v.local_rank];
    return std::make_tuple(r.stopped ? 0 : 1, r.step >= 0 ? r.step : INT64_MAX, -v.idle.count());
  };
  auto consider = [&](HangVerdict v) {
    if (!worst.has_value() || rank_of(v) < rank_of(*worst)) worst = std::move(v);
  };
  for (int lr = 0; lr < static_cast<int>(ranks_.size()); ++lr) {
    const Rank& r = ranks_[lr];
    if (r.exited) continue;
    const bool at_start = !r.alive && config_.startup_timeout.count() > 0;
    const Duration allowed = at_start ? config_.startup_timeout : config_.no_progress_timeout;
    if (config_.no_progress_timeout.count() > 0 && now - r.last_progress >= allowed) {
      HangVerdict v;
      v.kind = HangVerdict::Kind::kNoProgress;
      v.local_rank = lr;
      v.idle = now - r.last_progress;
      v.at_start = at_start;
      consider(std::move(v));
    }
    if (config_.uninterruptible_timeout.count() > 0 && r.uninterruptible_since.has_value() &&
        now - *r.uninterruptible_since >= config_.uninterruptible_timeout) {
      HangVerdict v;
      v.kind = HangVerdict::Kind::kUninterruptible;
      v.local_rank = lr;
      v.idle = now - *r.uninterruptible_since;
      consider(std::move(v));
    }
  }
  return worst;
}

std::vector<LocalProgress> HangDetector::Progress(TimePoint now) const {
  std::vector<LocalProgress> out;
  for (int lr = 0; lr < static_cast<int>(ranks_.size()); ++lr) {
    const Rank& r = ranks_[lr];
    if (r.exited) continue;
    out.push_back({lr, r.step, now - r.last_progress});
  }
  return out;
}

}  // namespace ddprun::launcher
