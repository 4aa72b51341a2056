// What the chaos soak measures and how it reports it: the faults it injected with its own
// outside measurements, the agents' goodput ledgers (LOG_DIR/*/events.jsonl "recovered" and
// "closed" lines, docs/design.md §6b) attributed to those faults, peak memory, and the Markdown
// and JSON reports. Pure except ReadLedgers and MemoryPeaks::Sample, which read files.
#ifndef DDPRUN_BENCH_CHAOS_SOAK_REPORT_H_
#define DDPRUN_BENCH_CHAOS_SOAK_REPORT_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::chaos {

enum class Kind {
  kKillWorker,
  kSegvWorker,
  kKillAgent,
  kStopAgent,
  kCutLink,
  kRestartServer,
  kHangRank
};
inline constexpr Kind kKinds[] = {Kind::kKillWorker, Kind::kSegvWorker, Kind::kKillAgent,
                                  Kind::kStopAgent,  Kind::kCutLink,    Kind::kRestartServer,
                                  Kind::kHangRank};
const char* KindName(Kind k);  // "SIGKILL a worker", for people
const char* KindKey(Kind k);   // "kill_worker", for the JSON report

// One recovery as an agent's goodput ledger recorded it (launcher/agent/goodput_ledger.h).
struct LedgerRecovery {
  int64_t ts_ms = 0;  // wall clock of the first step after it
  std::string node, mode, cause;
  int64_t round = 0;  // the round it recovered into
  std::optional<int64_t> stop_ms, rendezvous_ms, start_ms, restore_ms;
  int64_t first_step_ms = 0;
  std::optional<int64_t> steps_lost;
};

// One agent's events.jsonl.
struct AgentLedger {
  int64_t first_ts_ms = 0;  // its first event: when that agent process started
  std::vector<LedgerRecovery> recoveries;
  std::optional<double> closed_ratio;  // the "closed" line's effective_ratio
};

// Every LOG_DIR/*/events.jsonl (one per agent process: ddprun never reuses a run's log folder).
std::vector<AgentLedger> ReadLedgers(const std::string& log_dir);

struct FaultRecord {
  Kind kind = Kind::kKillWorker;
  std::string detail;
  double recovery_s = -1;  // fault -> training running again with every host in
  bool injected = true;    // false: nothing to hit (no worker alive for 5 s); not counted
  int64_t unix_ms = 0;     // when it was injected
  int64_t recomputed = 0;  // steps done again after it (the soak's own reading of the steps)
  std::vector<LedgerRecovery> ledger;  // the recoveries the agents recorded for it
};

// Gives each fault the ledger recoveries whose first step came between its injection and the
// next fault's (the soak injects the next one only once training runs again everywhere).
void AttributeLedger(const std::vector<AgentLedger>& ledgers, std::vector<FaultRecord>* faults);

// Peak resident memory (VmHWM) of every agent and worker process seen, sampled from /proc.
class MemoryPeaks {
 public:
  void Sample(pid_t agent, const std::vector<pid_t>& workers);
  const std::map<pid_t, int64_t>& agents_kb() const { return agents_kb_; }
  const std::map<pid_t, int64_t>& workers_kb() const { return workers_kb_; }
  void Merge(const MemoryPeaks& other);

 private:
  std::map<pid_t, int64_t> agents_kb_, workers_kb_;
};

// One job's training figures, the soak's own (not the ledger's).
struct TrainingFigures {
  int64_t steps = 0;                 // distinct steps completed
  double wall_s = 0;                 // agents started -> training over
  int64_t steady_steps = 0;          // steps completed in the steady gaps between faults
  double steady_s = 0;               // the length of those gaps
  std::vector<double> agent_ratios;  // closed effective_ratio of the agents that ran it all
  void Add(const TrainingFigures& o);
};

// The run's checkpoint advice as the server last showed it (`ddprun status --json`, issue 41).
struct AdviceFigures {
  double interval_s = 0, mtbf_s = 0, save_s = 0, recovery_s = 0, predicted_ratio = 0;
  int failures = 0;
  std::optional<double> measured_ratio;
};
// From `ddprun status --json`'s output; nullopt when it has no advice.
std::optional<AdviceFigures> ParseAdvice(const std::string& status_json);

struct SoakResult {
  std::string restart_mode;
  std::string preload;  // ddprun --preload ("": off)
  bool fixed = false;
  uint64_t seed = 0;
  double gap_min_s = 0, gap_max_s = 0;
  std::string checkpoint_every;         // steps, or "auto"
  std::optional<AdviceFigures> advice;  // the last segment's that had one
  int segments = 0;
  double wall_s = 0;
  std::vector<FaultRecord> faults;
  std::vector<int64_t> recomputed;  // every restart that went back, from the steps printed
  TrainingFigures training;
  MemoryPeaks memory;
  std::vector<std::string> violations;
  std::string identical;  // the fixed-world model check, when made
};

// The in-process invariants: a fault every agent recovered in-process from recomputes nothing
// (the soak's own reading and the ledger's); returns what broke them.
std::vector<std::string> CheckInProcess(const std::vector<FaultRecord>& faults);

std::string MarkdownReport(const SoakResult& r);
std::string JsonReport(const SoakResult& r);

}  // namespace ddprun::chaos

#endif  // DDPRUN_BENCH_CHAOS_SOAK_REPORT_H_
