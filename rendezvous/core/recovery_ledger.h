// RecoveryLedger: the server's side of the agents' goodput ledger (launcher/agent/
// goodput_ledger.h), for one run. After every recovery from a failure an agent sends a
// "recovered" timeline step:
//
//   {"step":"recovered","node":"host","round":R,"mode":"in-process"|"cold","cause":"hang",
//    "detect_ms":N,"stop_ms":N,"rendezvous_ms":N,"start_ms":N,"restore_ms":N,
//    "first_step_ms":N,"steps_lost":N,"restored_step":N,"effective_ratio":0.93}
//
// (phases in ms from the failure's detection on that agent; detect_ms is how long the cause
// took to be noticed; first_step_ms is the whole recovery). The ledger keeps the latest
// kMaxRecoveryRecords of them for the status page and totals for /metrics; any step carrying
// "node" and "effective_ratio" (the final "closed" one does) updates that node's ratio.
//
// Agents are not trusted to send sense: a line that is not a JSON object is ignored, and so is
// a field of the wrong type, negative, not finite or beyond its bound (the line counts without
// it). Memory is bounded: the latest records, at most kMaxRatioNodes nodes' ratios, and label
// sets of fixed size (a mode or cause outside kRecoveryModes / kRecoveryCauses is "other").
//
// Pure: no I/O, no clock (`now` comes with every line). Not thread-safe: the server's loop owns
// it (ServerMetrics::recoveries, by run id).
#ifndef DDPRUN_RENDEZVOUS_CORE_RECOVERY_LEDGER_H_
#define DDPRUN_RENDEZVOUS_CORE_RECOVERY_LEDGER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "common/clock.h"
#include "rendezvous/core/histogram.h"

namespace ddprun::rendezvous {

// The phases of a recovery, each a "<name>_ms" field.
enum class RecoveryPhase { kDetect, kStop, kRendezvous, kStart, kRestore, kFirstStep };
inline constexpr size_t kNumRecoveryPhases = 6;
inline constexpr RecoveryPhase kRecoveryPhases[kNumRecoveryPhases] = {
    RecoveryPhase::kDetect, RecoveryPhase::kStop,    RecoveryPhase::kRendezvous,
    RecoveryPhase::kStart,  RecoveryPhase::kRestore, RecoveryPhase::kFirstStep};
// "detect", "stop", "rendezvous", "start", "restore", "first_step".
const char* RecoveryPhaseName(RecoveryPhase phase);

// The label values /metrics uses (modes, and causes: cause.h kRecoveryCauses); anything else
// is kRecoveryOther.
inline constexpr char kRecoveryOther[] = "other";
inline constexpr const char* kRecoveryModes[] = {"in-process", "cold"};

inline constexpr size_t kMaxRecoveryRecords = 20;
inline constexpr size_t kMaxRatioNodes = 4096;
// Bounds beyond which a field is not believed: 30 days in ms; a billion steps lost.
inline constexpr double kMaxRecoveryMs = 30.0 * 24 * 3600 * 1000;
inline constexpr int64_t kMaxStepsLost = 1000000000;

// One agent's recovery, as its line told it.
struct RecoveryRecord {
  TimePoint received{};
  std::string node;           // as the agent named itself (cut to 128 bytes)
  int64_t round = -1;         // the round it recovered into; -1: not said
  std::string mode;           // a kRecoveryModes value or "other"
  std::string cause;          // a kRecoveryCauses value or "other"
  std::string cause_as_sent;  // for the page (cut to 64 bytes)
  std::array<std::optional<double>, kNumRecoveryPhases> phase_ms;  // by RecoveryPhase
  std::optional<int64_t> steps_lost;
  std::optional<int64_t> restored_step;
  std::optional<double> effective_ratio;  // in [0, 1]
};

class RecoveryLedger {
 public:
  struct NodeRatio {
    double ratio = 0;  // time on steps that count / wall time since that agent started
    TimePoint updated{};
  };

  // One timeline step of an agent of the run (any step). Returns true when it was a recovery
  // (and was recorded).
  bool Add(const std::string& json, TimePoint now);

  // The latest recoveries, oldest first.
  const std::deque<RecoveryRecord>& latest() const { return latest_; }
  // Recoveries by (mode, cause): one per agent that recovered.
  const std::map<std::pair<std::string, std::string>, uint64_t>& counts() const { return counts_; }
  // Seconds of each phase, by (mode, phase).
  const std::map<std::pair<std::string, RecoveryPhase>, Histogram>& phase_seconds() const {
    return phase_seconds_;
  }
  // Training steps lost, by mode: for each round, the most that any agent recovering into it
  // reported (the run's steps, not each agent's: every agent of a job-wide restart lost them).
  const std::map<std::string, uint64_t>& steps_lost() const { return steps_lost_; }
  // The latest effective training ratio each node sent, by node.
  const std::map<std::string, NodeRatio>& effective_ratios() const { return ratios_; }

 private:
  void SetRatio(const std::string& node, double ratio, TimePoint now);

  std::deque<RecoveryRecord> latest_;
  std::map<std::pair<std::string, std::string>, uint64_t> counts_;
  std::map<std::pair<std::string, RecoveryPhase>, Histogram> phase_seconds_;
  std::map<std::string, uint64_t> steps_lost_;
  // Round -> the steps lost counted for it so far (the latest kMaxRecoveryRecords rounds).
  std::map<int64_t, int64_t> lost_in_round_;
  std::map<std::string, NodeRatio> ratios_;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CORE_RECOVERY_LEDGER_H_
