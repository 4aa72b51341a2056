#include "launcher/agent/run_timeline.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/message_limit.h"

namespace ddprun::launcher {

using rendezvous::Cause;

namespace {

int64_t MillisBetween(TimePoint from, TimePoint to) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
}

// "rank 5 on n2 exited 1", "node n3 was lost: ...", from a failure step.
std::string DescribeFailureStep(const StepEvent& e) {
  if (e.rank >= 0) {
    return absl::StrCat("rank ", e.rank, e.host.empty() ? "" : " on ", e.host, " ", e.detail);
  }
  if (!e.detail.empty()) return e.detail;
  return e.cause.has_value() ? rendezvous::CauseLabel(*e.cause) : "";
}

// kPreflight's figures: rounded as people read them, the pairs as this node probed them.
void AddPreflight(const rendezvous::PreflightReport& r, nlohmann::ordered_json* j) {
  auto round3 = [](double v) { return std::round(v * 1000) / 1000; };
  (*j)["cpu_gflops"] = round3(r.cpu_gflops);
  nlohmann::ordered_json pairs = nlohmann::ordered_json::array();
  for (const rendezvous::PairProbe& p : r.pairs) {
    nlohmann::ordered_json pair;
    pair["peer"] = p.peer_node_id;
    if (!p.error.empty()) {
      pair["error"] = p.error;
    } else {
      pair["rtt_ms"] = round3(p.rtt_ms);
      pair["send_mbps"] = round3(p.send_mbps);
      pair["recv_mbps"] = round3(p.recv_mbps);
    }
    pairs.push_back(std::move(pair));
  }
  (*j)["pairs"] = std::move(pairs);
  if (r.health_check_s.has_value()) (*j)["health_check_s"] = round3(*r.health_check_s);
  (*j)["elapsed_s"] = round3(r.elapsed_s);
}

}  // namespace

const char* StepName(Step step) {
  switch (step) {
    case Step::kJoining:
      return "joining";
    case Step::kRoundComplete:
      return "round_complete";
    case Step::kWorkersStarted:
      return "workers_started";
    case Step::kFirstProgress:
      return "first_progress";
    case Step::kFailureDetected:
      return "failure_detected";
    case Step::kStopBegun:
      return "stop_begun";
    case Step::kStacksTaken:
      return "stacks_taken";
    case Step::kStopFinished:
      return "stop_finished";
    case Step::kResumed:
      return "resumed";
    case Step::kClosed:
      return "closed";
    case Step::kRoundAborted:
      return "round_aborted";
    case Step::kStateRestored:
      return "state_restored";
    case Step::kRecovered:
      return "recovered";
    case Step::kPreflight:
      return "preflight";
  }
  return "unknown";
}

Cause HeardCause(Cause told, bool hang) {
  if (told == Cause::kUnspecified && hang) return Cause::kHang;
  return told == Cause::kWorkerFailure ? Cause::kRemoteFailure : told;
}

std::string RunTimeline::Add(const StepEvent& e) {
  events_.push_back(e);
  nlohmann::ordered_json j;
  j["ts_ms"] = e.unix_ms;
  j["run_id"] = run_id_;
  j["node"] = node_;
  j["step"] = StepName(e.step);
  if (e.round >= 0) j["round"] = e.round;
  if (e.world_size >= 0) j["world_size"] = e.world_size;
  if (e.group_rank >= 0) j["group_rank"] = e.group_rank;
  if (e.workers >= 0) j["workers"] = e.workers;
  if (e.kept >= 0) j["kept"] = e.kept;
  if (e.state_step >= 0) j["state_step"] = e.state_step;
  if (e.restart_count >= 0) j["restart_count"] = e.restart_count;
  if (e.cause.has_value()) j["cause"] = rendezvous::CauseLabel(*e.cause);
  if (e.rank >= 0) j["rank"] = e.rank;
  if (!e.host.empty()) j["host"] = e.host;
  if (!e.detail.empty()) j["detail"] = AbbreviateMessage(e.detail);  // message_limit.h
  if (e.detect_ms.has_value()) j["detect_ms"] = *e.detect_ms;
  if (e.spare_used) j["spare_used"] = true;
  if (e.recovery.has_value()) {
    const RecoveryRecord& r = *e.recovery;
    j["mode"] = r.mode;
    auto put = [&j](const char* key, const std::optional<int64_t>& v) {
      if (v.has_value()) j[key] = *v;
    };
    put("detect_ms", r.detect_ms);
    put("stop_ms", r.stop_ms);
    put("rendezvous_ms", r.rendezvous_ms);
    put("start_ms", r.start_ms);
    put("restore_ms", r.restore_ms);
    j["first_step_ms"] = r.first_step_ms;
    put("steps_lost", r.steps_lost);
    put("restored_step", r.restored_step);
    if (r.spare_used) j["spare_used"] = true;
  }
  if (e.effective_ratio.has_value()) {
    j["effective_ratio"] = std::round(*e.effective_ratio * 10000) / 10000;
  }
  if (e.preflight.has_value()) AddPreflight(*e.preflight, &j);
  return j.dump();
}

std::string FormatRecovery(const RecoveryRecord& r, double effective_ratio) {
  std::vector<std::string> parts;
  auto part = [&parts](const char* what, const std::optional<int64_t>& ms) {
    if (ms.has_value()) parts.push_back(absl::StrCat(what, " +", *ms, " ms"));
  };
  part("detected after", r.detect_ms);
  part("stopped", r.stop_ms);
  part("round formed", r.rendezvous_ms);
  part("started", r.start_ms);
  part("state restored", r.restore_ms);
  part("first step", r.first_step_ms);
  return absl::StrCat(
      "recovered (", r.mode.empty() ? "cold" : r.mode, ") from ", rendezvous::CauseLabel(r.cause),
      ": ", absl::StrJoin(parts, ", "),
      r.restored_step.has_value() ? absl::StrCat(" (from step ", *r.restored_step, ")") : "",
      r.steps_lost.has_value() ? absl::StrCat("; ", *r.steps_lost, " step(s) lost") : "",
      r.spare_used ? "; a spare took the lost node's place" : "",
      absl::StrFormat("; effective training time %.1f%%", effective_ratio * 100));
}

std::optional<std::string> RunTimeline::CycleLine() const {
  if (events_.empty() || events_.back().step != Step::kWorkersStarted) return std::nullopt;
  // The failure that began this cycle: the last one after the previous start of workers.
  size_t first = events_.size() - 1;
  std::optional<size_t> failure;
  while (first > 0) {
    --first;
    const Step s = events_[first].step;
    if (s == Step::kWorkersStarted) break;
    if (s == Step::kFailureDetected && !failure) failure = first;
  }
  if (!failure) return std::nullopt;  // the first start, not a restart
  // The earliest failure of the cycle is its cause; later ones are its consequences.
  for (size_t i = *failure; i > first; --i) {
    if (events_[i - 1].step == Step::kFailureDetected) failure = i - 1;
  }
  const StepEvent& cause = events_[*failure];
  const StepEvent& started = events_.back();
  std::vector<std::string> parts = {DescribeFailureStep(cause)};
  for (size_t i = *failure + 1; i < events_.size(); ++i) {
    const StepEvent& e = events_[i];
    const std::string after = absl::StrCat(" +", MillisBetween(cause.when, e.when), " ms");
    switch (e.step) {
      case Step::kStacksTaken:
        parts.push_back(absl::StrCat("stacks taken", after));
        break;
      case Step::kStopFinished:
        parts.push_back(absl::StrCat("all stopped", after));
        break;
      case Step::kRoundAborted:
        parts.push_back(absl::StrCat("survivors told", after));
        break;
      case Step::kRoundComplete:
        parts.push_back(absl::StrCat("round ", e.round, " complete", after));
        break;
      case Step::kWorkersStarted:
        if (e.kept >= 0) {
          parts.push_back(absl::StrCat(e.kept, " kept, ", e.workers, " started", after));
        } else {
          parts.push_back(
              absl::StrCat(e.workers, " worker", e.workers == 1 ? "" : "s", " running", after));
        }
        break;
      default:
        break;
    }
  }
  const std::string label = started.restart_count > 0 && cause.cause != Cause::kNodeJoined
                                ? absl::StrCat("restart ", started.restart_count)
                                : absl::StrCat("round ", started.round);
  return absl::StrCat(label, ": ", absl::StrJoin(parts, " -> "));
}

}  // namespace ddprun::launcher
