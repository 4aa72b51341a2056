// What a rendezvous server counts for /metrics (Prometheus's text exposition format 0.0.4):
// heartbeats, joins, refused calls by reason, restarts by cause, and how long rounds take to
// form, beside the gauges of every run it hosts and the recoveries its agents reported. Pure: the
// server's loop updates the counters; FormatMetrics renders them with the runs' status.
#ifndef DDPRUN_RENDEZVOUS_CORE_SERVER_METRICS_H_
#define DDPRUN_RENDEZVOUS_CORE_SERVER_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rendezvous/core/histogram.h"
#include "rendezvous/core/recovery_ledger.h"
#include "rendezvous/core/run_state.h"

namespace ddprun::rendezvous {

struct ServerMetrics {
  ServerMetrics();
  uint64_t heartbeats = 0;
  uint64_t joins = 0;
  uint64_t slow_nodes_named = 0;              // SlowNodeJudge verdicts naming a node, every run
  std::map<std::string, uint64_t> refused;    // reason -> calls or joins refused
  std::map<Cause, uint64_t> restarts;         // kRestartCauses -> restarts, every run
  std::map<Cause, uint64_t> worker_failures;  // kDeathCauses -> reports, every run
  Histogram round_completion;                 // seconds from a round's start to formed
  Histogram failure_to_restart;               // seconds from a failure to the next round formed
  // The agents' recoveries, by run id: ServerState feeds every timeline step of a run to its
  // ledger and drops the ledger when it forgets the run.
  std::map<std::string, RecoveryLedger> recoveries;
  // Records what a run reported since its last report (RunState::TakeRoundTimings, ...).
  void Add(const std::vector<RoundTiming>& timings, const std::vector<Cause>& causes);
};

// The cause a failure report counts under: its cause_kind when it is one of kDeathCauses (an
// agent's word is not a label the server lets grow), else what the report itself shows.
Cause CountedDeathCause(const WorkerFailure& failure);

// The whole /metrics page.
std::string FormatMetrics(const ServerMetrics& metrics, const std::vector<RunStatus>& runs);

// A label value with \, " and newline escaped, as the exposition format wants.
std::string EscapeLabelValue(const std::string& value);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CORE_SERVER_METRICS_H_
