#include "rendezvous/core/server_metrics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace ddprun::rendezvous {
namespace {

// From a loopback round (a millisecond) to a join_timeout-long wait for a lost node.
const std::vector<double> kLatencyBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                            0.5,   1,      2.5,   5,    10,    30,   60,  300};

// "# HELP" and "# TYPE" of one metric family.
void Family(const char* name, const char* type, const char* help, std::string* out) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

// The agents' recoveries (recovery_ledger.h), for the runs in `runs`. Only the (mode, cause)
// and (mode, phase) pairs a run has seen get a series: the label sets are fixed, but 3 modes
// x 9 causes of zeros for every run would bury the few that happen.
void FormatRecoveryMetrics(const std::map<std::string, RecoveryLedger>& ledgers,
                           const std::vector<RunStatus>& runs, std::string* out) {
  std::vector<std::pair<std::string, const RecoveryLedger*>> of_runs;  // (escaped id, ledger)
  for (const RunStatus& r : runs) {
    auto it = ledgers.find(r.run_id);
    if (it != ledgers.end()) of_runs.emplace_back(EscapeLabelValue(r.run_id), &it->second);
  }
  Family("ddprun_rdzv_recoveries_total", "counter",
         "Recoveries from a failure the run's agents reported, one per agent that recovered, "
         "by mode (in-process, cold) and cause (worker_exit, worker_signal, hang, "
         "remote_failure, node_lost_stream, node_lost_lease, node_joined, node_left); "
         "anything else is other.",
         out);
  for (const auto& [id, ledger] : of_runs) {
    for (const auto& [key, n] : ledger->counts()) {
      absl::StrAppend(out, "ddprun_rdzv_recoveries_total{run_id=\"", id, "\",mode=\"", key.first,
                      "\",cause=\"", key.second, "\"} ", n, "\n");
    }
  }
  // A histogram rather than a summary: Prometheus can add histograms up across agents and runs
  // and take quantiles of the sum (histogram_quantile over sum by (le)); a summary's quantiles
  // cannot be combined, and would make the server keep a sliding window of every phase. The
  // buckets are fixed (10 ms to 30 min), so a series costs 19 lines whatever the traffic.
  Family("ddprun_rdzv_recovery_seconds", "histogram",
         "Each phase of the agents' recoveries, from the failure's detection on that agent "
         "(detect: how long the cause took to be noticed; stop, rendezvous, start, restore: "
         "until the workers stopped, the next round formed, the workers started, their state "
         "was restored; first_step: until the first step after it, the whole recovery).",
         out);
  for (const auto& [id, ledger] : of_runs) {
    for (const auto& [key, histogram] : ledger->phase_seconds()) {
      histogram.Render("ddprun_rdzv_recovery_seconds", out,
                       absl::StrCat("run_id=\"", id, "\",mode=\"", key.first, "\",phase=\"",
                                    RecoveryPhaseName(key.second), "\""));
    }
  }
  Family("ddprun_rdzv_recovery_steps_lost_total", "counter",
         "Training steps done again after recoveries (for each restart, the most any agent "
         "recovering from it reported), by mode.",
         out);
  for (const auto& [id, ledger] : of_runs) {
    for (const auto& [mode, n] : ledger->steps_lost()) {
      absl::StrAppend(out, "ddprun_rdzv_recovery_steps_lost_total{run_id=\"", id, "\",mode=\"",
                      mode, "\"} ", n, "\n");
    }
  }
  Family("ddprun_rdzv_effective_training_ratio", "gauge",
         "The latest effective training ratio each agent reported: time on steps that count "
         "over the wall time since it started.",
         out);
  for (const auto& [id, ledger] : of_runs) {
    for (const auto& [node, ratio] : ledger->effective_ratios()) {
      absl::StrAppend(out, "ddprun_rdzv_effective_training_ratio{run_id=\"", id, "\",node=\"",
                      EscapeLabelValue(node), "\"} ", SampleValue(ratio.ratio), "\n");
    }
  }
}

// The checkpoint advice's gauges (issue 41), for the runs that have one (a save time was
// reported).
void AppendCheckpointAdvice(const std::vector<RunStatus>& runs, std::string* out_text) {
  std::string& out = *out_text;
  struct AdviceGauge {
    const char* name;
    const char* help;
    double (*value)(const CheckpointAdvice&);
  };
  const AdviceGauge advice_gauges[] = {
      {"ddprun_rdzv_checkpoint_interval_advice_seconds",
       "Seconds of training between checkpoints that maximise effective training time (Daly's "
       "optimum for the run's measured MTBF and save time).",
       [](const CheckpointAdvice& a) { return a.interval_s; }},
      {"ddprun_rdzv_mtbf_seconds",
       "The run's mean time between failures as the advice estimates it (its failures over its "
       "training time, with the mtbf= prior as one).",
       [](const CheckpointAdvice& a) { return a.mtbf_s; }},
      {"ddprun_rdzv_checkpoint_save_seconds", "Median of the latest checkpoint saves.",
       [](const CheckpointAdvice& a) { return a.save_s; }},
      {"ddprun_rdzv_checkpoint_advice_predicted_ratio",
       "Effective training time over wall time that Daly's model predicts at the advised "
       "interval (each node's measured one: ddprun_rdzv_effective_training_ratio).",
       [](const CheckpointAdvice& a) { return a.predicted_ratio; }},
  };
  for (const AdviceGauge& g : advice_gauges) {
    Family(g.name, "gauge", g.help, &out);
    for (const RunStatus& r : runs) {
      if (!r.checkpoint_advice.has_value()) continue;
      absl::StrAppend(&out, g.name, "{run_id=\"", EscapeLabelValue(r.run_id), "\"} ",
                      SampleValue(g.value(*r.checkpoint_advice)), "\n");
    }
  }
}

// The preflight's gauges (issue 41), for the runs that ran one: how long it took, how many nodes
// it named slow and kept out, and each node's worst figure against the job's median.
void AppendPreflight(const std::vector<RunStatus>& runs, std::string* out) {
  struct PreflightGauge {
    const char* name;
    const char* help;
    double (*value)(const PreflightSummary&);
  };
  const PreflightGauge gauges[] = {
      {"ddprun_rdzv_preflight_seconds",
       "How long the preflight before the first round took, from the requests to the verdicts.",
       [](const PreflightSummary& p) { return p.took_s; }},
      {"ddprun_rdzv_preflight_slow_nodes",
       "Nodes the preflight named slower than the job's median by more than the margin.",
       [](const PreflightSummary& p) {
         return static_cast<double>(std::count_if(p.verdicts.begin(), p.verdicts.end(),
                                                  [](const auto& v) { return v.slow(); }));
       }},
      {"ddprun_rdzv_preflight_kept_out_nodes",
       "Slow nodes the preflight kept out of the run for spares.",
       [](const PreflightSummary& p) {
         return static_cast<double>(std::count_if(p.verdicts.begin(), p.verdicts.end(),
                                                  [](const auto& v) { return v.kept_out; }));
       }},
  };
  for (const PreflightGauge& g : gauges) {
    Family(g.name, "gauge", g.help, out);
    for (const RunStatus& r : runs) {
      if (!r.preflight.has_value() || r.preflight->running) continue;
      absl::StrAppend(out, g.name, "{run_id=\"", EscapeLabelValue(r.run_id), "\"} ",
                      SampleValue(g.value(*r.preflight)), "\n");
    }
  }
  Family("ddprun_rdzv_preflight_worst_ratio", "gauge",
         "Each node's worst preflight figure over the job's median (1: the median; 0: no "
         "report).",
         out);
  for (const RunStatus& r : runs) {
    if (!r.preflight.has_value()) continue;
    for (const PreflightVerdict& v : r.preflight->verdicts) {
      absl::StrAppend(out, "ddprun_rdzv_preflight_worst_ratio{run_id=\"",
                      EscapeLabelValue(r.run_id), "\",node=\"", EscapeLabelValue(v.node_id), "\"} ",
                      SampleValue(v.worst_ratio), "\n");
    }
  }
}

}  // namespace

ServerMetrics::ServerMetrics()
    : round_completion(kLatencyBounds), failure_to_restart(kLatencyBounds) {}

void ServerMetrics::Add(const std::vector<RoundTiming>& timings, const std::vector<Cause>& causes) {
  for (const RoundTiming& t : timings) {
    round_completion.Observe(t.completion_s);
    if (t.after_failure_s) failure_to_restart.Observe(*t.after_failure_s);
  }
  for (Cause cause : causes) ++restarts[cause];
}

Cause CountedDeathCause(const WorkerFailure& failure) {
  if (CauseIsIn(failure.cause_kind, kDeathCauses)) return failure.cause_kind;
  if (failure.hang) return Cause::kHang;
  return failure.signal != 0 ? Cause::kUnknownSignal : Cause::kExit;
}

std::string EscapeLabelValue(const std::string& value) {
  return absl::StrReplaceAll(value, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

std::string FormatMetrics(const ServerMetrics& m, const std::vector<RunStatus>& runs) {
  std::string out;
  Family("ddprun_rdzv_runs", "gauge", "Runs this server hosts (closed ones until forgotten).",
         &out);
  absl::StrAppend(&out, "ddprun_rdzv_runs ", runs.size(), "\n");
  struct Gauge {  // a per-run sample (a counter where type says so)
    const char* name;
    const char* help;
    double (*value)(const RunStatus&);
    const char* type = "gauge";
  };
  const Gauge gauges[] = {
      {"ddprun_rdzv_run_nodes", "Agents connected to the run.",
       [](const RunStatus& r) { return static_cast<double>(r.num_nodes); }},
      {"ddprun_rdzv_run_round", "The run's current round (0 before the first).",
       [](const RunStatus& r) { return static_cast<double>(r.round); }},
      {"ddprun_rdzv_run_restarts_used", "Failure restarts spent of the run's budget.",
       [](const RunStatus& r) { return static_cast<double>(r.restarts_used); }},
      {"ddprun_rdzv_run_max_restarts", "The run's budget of failure restarts (--max-restarts).",
       [](const RunStatus& r) { return static_cast<double>(r.max_restarts); }},
      {"ddprun_rdzv_run_closed", "1 once the run has closed.",
       [](const RunStatus& r) { return r.phase == RunPhase::kClosed ? 1.0 : 0.0; }},
      {"ddprun_rdzv_spares", "Agents connected to the run but not in its running round.",
       [](const RunStatus& r) { return static_cast<double>(r.spares); }},
      {"ddprun_rdzv_spares_used_total",
       "Spares taken into a round of the run (since this server or coordinator took it).",
       [](const RunStatus& r) { return static_cast<double>(r.spares_used); }, "counter"},
      {"ddprun_rdzv_slow_nodes",
       "Running members persistently slower than the run's median node (their workers' compute "
       "time per step, the slow-node judge).",
       [](const RunStatus& r) { return static_cast<double>(r.slow_nodes); }},
  };
  for (const Gauge& g : gauges) {
    Family(g.name, g.type, g.help, &out);
    for (const RunStatus& r : runs) {
      absl::StrAppend(&out, g.name, "{run_id=\"", EscapeLabelValue(r.run_id), "\"} ",
                      SampleValue(g.value(r)), "\n");
    }
  }
  AppendCheckpointAdvice(runs, &out);
  AppendPreflight(runs, &out);
  Family("ddprun_rdzv_run_phase", "gauge",
         "1 for the run's phase (joining, running, recovering, closed).", &out);
  for (const RunStatus& r : runs) {
    absl::StrAppend(&out, "ddprun_rdzv_run_phase{run_id=\"", EscapeLabelValue(r.run_id),
                    "\",phase=\"", RunPhaseName(r.phase), "\"} 1\n");
  }
  Family("ddprun_rdzv_restarts_total", "counter",
         "Rounds restarted, every run, by cause (worker_failure, hang, node_lost_stream, "
         "node_lost_lease, node_joined, "
         "node_left, server_restart).",
         &out);
  for (Cause cause : kRestartCauses) {
    auto it = m.restarts.find(cause);
    absl::StrAppend(&out, "ddprun_rdzv_restarts_total{cause=\"", CauseLabel(cause), "\"} ",
                    it == m.restarts.end() ? 0 : it->second, "\n");
  }
  Family("ddprun_rdzv_worker_failures_total", "counter",
         "Worker failures reported by agents, every run, by cause from the kernel's evidence "
         "(exit, hang, oom_kill, fault, gpu_error, stopped_by_ddprun, external_signal, unknown).",
         &out);
  for (Cause cause : kDeathCauses) {
    auto it = m.worker_failures.find(cause);
    absl::StrAppend(&out, "ddprun_rdzv_worker_failures_total{cause=\"", CauseLabel(cause), "\"} ",
                    it == m.worker_failures.end() ? 0 : it->second, "\n");
  }
  Family("ddprun_rdzv_heartbeats_total", "counter", "Heartbeats received from agents.", &out);
  absl::StrAppend(&out, "ddprun_rdzv_heartbeats_total ", m.heartbeats, "\n");
  Family("ddprun_rdzv_slow_nodes_named_total", "counter",
         "Times the slow-node judge named a node slow, every run.", &out);
  absl::StrAppend(&out, "ddprun_rdzv_slow_nodes_named_total ", m.slow_nodes_named, "\n");
  Family("ddprun_rdzv_joins_total", "counter", "Joins accepted.", &out);
  absl::StrAppend(&out, "ddprun_rdzv_joins_total ", m.joins, "\n");
  Family("ddprun_rdzv_refused_total", "counter",
         "Calls and joins refused, by reason (unauthenticated, invalid_join, server_limit, "
         "member_key).",
         &out);
  for (const char* reason : {"unauthenticated", "invalid_join", "server_limit", "member_key"}) {
    auto it = m.refused.find(reason);
    absl::StrAppend(&out, "ddprun_rdzv_refused_total{reason=\"", reason, "\"} ",
                    it == m.refused.end() ? 0 : it->second, "\n");
  }
  Family("ddprun_rdzv_round_completion_seconds", "histogram",
         "From a round's start (the run's first join, or its restart) until it formed.", &out);
  m.round_completion.Render("ddprun_rdzv_round_completion_seconds", &out);
  Family("ddprun_rdzv_failure_to_restart_seconds", "histogram",
         "From a failure (a worker's, or a node lost) until the restarted round formed.", &out);
  m.failure_to_restart.Render("ddprun_rdzv_failure_to_restart_seconds", &out);
  FormatRecoveryMetrics(m.recoveries, runs, &out);
  return out;
}

}  // namespace ddprun::rendezvous
