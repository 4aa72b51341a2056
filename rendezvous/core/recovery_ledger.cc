#include "rendezvous/core/recovery_ledger.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rendezvous/api/cause.h"

namespace ddprun::rendezvous {
namespace {

// A recovery's phases run from a few milliseconds (an in-process abort on loopback) to many
// minutes (a hang's detection, a cold start that loads a large checkpoint).
const std::vector<double> kRecoveryBounds = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                             5,    10,    30,   60,  120,  300, 600, 1800};

constexpr size_t kMaxNodeBytes = 128;
constexpr size_t kMaxCauseBytes = 64;

// A value for a label and the page: at most `max` bytes, cut on a UTF-8 character's boundary
// (the exposition format wants valid UTF-8), control characters replaced.
std::string Clean(const std::string& text, size_t max) {
  size_t n = text.size();
  if (n > max) {
    n = max;
    while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  }
  std::string out = text.substr(0, n);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

// The field as a finite number in [0, max]; nullopt when absent or anything else.
std::optional<double> Number(const nlohmann::json& j, const char* key, double max) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0 || v > max) return std::nullopt;
  return v;
}

// The same, and a whole number.
std::optional<int64_t> WholeNumber(const nlohmann::json& j, const char* key, double max) {
  std::optional<double> v = Number(j, key, max);
  if (!v || *v != std::trunc(*v)) return std::nullopt;
  return static_cast<int64_t>(*v);
}

std::string String(const nlohmann::json& j, const char* key, size_t max) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  return Clean(it->get<std::string>(), max);
}

template <size_t N>
std::string Label(const std::string& value, const char* const (&known)[N]) {
  for (const char* k : known) {
    if (value == k) return value;
  }
  return kRecoveryOther;
}

}  // namespace

const char* RecoveryPhaseName(RecoveryPhase phase) {
  switch (phase) {
    case RecoveryPhase::kDetect:
      return "detect";
    case RecoveryPhase::kStop:
      return "stop";
    case RecoveryPhase::kRendezvous:
      return "rendezvous";
    case RecoveryPhase::kStart:
      return "start";
    case RecoveryPhase::kRestore:
      return "restore";
    case RecoveryPhase::kFirstStep:
      return "first_step";
  }
  return "unknown";
}

bool RecoveryLedger::Add(const std::string& json, TimePoint now) {
  // Most steps are neither: skip parsing them.
  if (!absl::StrContains(json, "recovered") && !absl::StrContains(json, "effective_ratio")) {
    return false;
  }
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  const std::string node = String(j, "node", kMaxNodeBytes);
  const std::optional<double> ratio = Number(j, "effective_ratio", 1.0);
  if (ratio && !node.empty()) SetRatio(node, *ratio, now);
  auto step = j.find("step");
  if (step == j.end() || !step->is_string() || *step != "recovered") return false;

  RecoveryRecord r;
  r.received = now;
  r.node = node;
  // Rounds are int64 on the server; 2^53 keeps the conversion from a double exact.
  r.round = WholeNumber(j, "round", 9007199254740992.0).value_or(-1);
  r.mode = Label(String(j, "mode", kMaxCauseBytes), kRecoveryModes);
  r.cause_as_sent = String(j, "cause", kMaxCauseBytes);
  const std::optional<Cause> cause = CauseFromLabel(r.cause_as_sent);
  r.cause = cause && CauseIsIn(*cause, kRecoveryCauses) ? CauseLabel(*cause) : kRecoveryOther;
  for (RecoveryPhase phase : kRecoveryPhases) {
    const std::string key = absl::StrCat(RecoveryPhaseName(phase), "_ms");
    r.phase_ms[static_cast<size_t>(phase)] = Number(j, key.c_str(), kMaxRecoveryMs);
  }
  r.steps_lost = WholeNumber(j, "steps_lost", kMaxStepsLost);
  r.restored_step = WholeNumber(j, "restored_step", 9007199254740992.0);
  r.effective_ratio = ratio;

  ++counts_[{r.mode, r.cause}];
  for (RecoveryPhase phase : kRecoveryPhases) {
    if (const std::optional<double>& ms = r.phase_ms[static_cast<size_t>(phase)]) {
      phase_seconds_.try_emplace({r.mode, phase}, kRecoveryBounds)
          .first->second.Observe(*ms / 1000);
    }
  }
  if (r.steps_lost) {
    int64_t add = *r.steps_lost;
    if (r.round >= 0) {
      // Every agent of a restart recovers into the same round and lost the same steps: count
      // the most any of them said, once.
      int64_t& counted = lost_in_round_[r.round];
      add = std::max<int64_t>(0, *r.steps_lost - counted);
      counted = std::max(counted, *r.steps_lost);
      if (lost_in_round_.size() > kMaxRecoveryRecords) lost_in_round_.erase(lost_in_round_.begin());
    }
    steps_lost_[r.mode] += static_cast<uint64_t>(add);
  }
  latest_.push_back(std::move(r));
  if (latest_.size() > kMaxRecoveryRecords) latest_.pop_front();
  return true;
}

void RecoveryLedger::SetRatio(const std::string& node, double ratio, TimePoint now) {
  auto it = ratios_.find(node);
  if (it == ratios_.end() && ratios_.size() >= kMaxRatioNodes) {
    // Full: the node heard from longest ago makes room (a linear scan, only when full).
    auto stalest = ratios_.begin();
    for (auto i = ratios_.begin(); i != ratios_.end(); ++i) {
      if (i->second.updated < stalest->second.updated) stalest = i;
    }
    ratios_.erase(stalest);
  }
  ratios_[node] = NodeRatio{ratio, now};
}

}  // namespace ddprun::rendezvous
