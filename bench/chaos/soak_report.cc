#include "bench/chaos/soak_report.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace ddprun::chaos {
namespace {

using Json = nlohmann::ordered_json;

std::optional<int64_t> OptInt(const Json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<int64_t>();
}

std::optional<double> Percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

std::string Fmt(std::optional<double> v, int decimals = 2) {
  return v ? absl::StrFormat("%.*f", decimals, *v) : "-";
}

std::string Percent(std::optional<double> ratio) {
  return ratio ? absl::StrFormat("%.1f%%", *ratio * 100) : "-";
}

Json OrNull(std::optional<double> v) { return v ? Json(*v) : Json(nullptr); }

// The node that trained again last in the fault's first round: its record stands for the
// fault's recovery. Later rounds before the next fault are other events (a lost node that comes
// back and scales the run up again); the soak's own recovery time covers those.
const LedgerRecovery* Slowest(const FaultRecord& f) {
  int64_t first_round = INT64_MAX;
  for (const LedgerRecovery& r : f.ledger) first_round = std::min(first_round, r.round);
  const LedgerRecovery* out = nullptr;
  for (const LedgerRecovery& r : f.ledger) {
    if (r.round != first_round) continue;
    if (out == nullptr || r.first_step_ms > out->first_step_ms) out = &r;
  }
  return out;
}

int64_t LedgerStepsLost(const FaultRecord& f) {
  int64_t lost = 0;
  for (const LedgerRecovery& r : f.ledger) lost = std::max(lost, r.steps_lost.value_or(0));
  return lost;
}

// The figures of one fault kind.
struct KindFigures {
  int count = 0;
  std::vector<double> recovery_s;     // the soak's
  std::vector<double> first_step_ms;  // the ledger's, slowest node
  std::vector<double> stop_ms, rendezvous_ms, start_ms, restore_ms;
  int64_t recomputed = 0, steps_lost = 0;
  int in_process = 0, cold = 0;  // ledger recoveries by mode (every node's)
};

KindFigures FiguresOf(Kind k, const std::vector<FaultRecord>& faults) {
  KindFigures out;
  auto push = [](std::vector<double>* v, const std::optional<int64_t>& ms) {
    if (ms) v->push_back(static_cast<double>(*ms));
  };
  for (const FaultRecord& f : faults) {
    if (f.kind != k) continue;
    ++out.count;
    if (f.recovery_s >= 0) out.recovery_s.push_back(f.recovery_s);
    out.recomputed += f.recomputed;
    out.steps_lost += LedgerStepsLost(f);
    for (const LedgerRecovery& r : f.ledger) ++(r.mode == "in-process" ? out.in_process : out.cold);
    if (const LedgerRecovery* r = Slowest(f)) {
      out.first_step_ms.push_back(static_cast<double>(r->first_step_ms));
      push(&out.stop_ms, r->stop_ms);
      push(&out.rendezvous_ms, r->rendezvous_ms);
      push(&out.start_ms, r->start_ms);
      push(&out.restore_ms, r->restore_ms);
    }
  }
  return out;
}

std::vector<double> Mib(const std::map<pid_t, int64_t>& kb) {
  std::vector<double> out;
  for (const auto& [pid, v] : kb) out.push_back(v / 1024.0);
  return out;
}

std::optional<double> Max(const std::vector<double>& v) {
  if (v.empty()) return std::nullopt;
  return *std::max_element(v.begin(), v.end());
}

std::optional<double> SoakRatio(const TrainingFigures& t) {
  if (t.steady_steps <= 0 || t.wall_s <= 0) return std::nullopt;
  return t.steps * (t.steady_s / t.steady_steps) / t.wall_s;
}

}  // namespace

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kKillWorker:
      return "SIGKILL a worker";
    case Kind::kSegvWorker:
      return "SIGSEGV a worker";
    case Kind::kKillAgent:
      return "SIGKILL an agent, start it again";
    case Kind::kStopAgent:
      return "SIGSTOP/SIGCONT an agent";
    case Kind::kCutLink:
      return "cut and heal a link";
    case Kind::kRestartServer:
      return "kill -9 and restart ddprun-rdzv";
    case Kind::kHangRank:
      return "hang a rank (SIGSTOP a worker)";
  }
  return "?";
}

const char* KindKey(Kind k) {
  switch (k) {
    case Kind::kKillWorker:
      return "kill_worker";
    case Kind::kSegvWorker:
      return "segv_worker";
    case Kind::kKillAgent:
      return "kill_agent";
    case Kind::kStopAgent:
      return "stop_agent";
    case Kind::kCutLink:
      return "cut_link";
    case Kind::kRestartServer:
      return "restart_server";
    case Kind::kHangRank:
      return "hang_rank";
  }
  return "?";
}

std::vector<AgentLedger> ReadLedgers(const std::string& log_dir) {
  std::vector<AgentLedger> out;
  std::error_code ec;
  for (const auto& run : std::filesystem::directory_iterator(log_dir, ec)) {
    std::ifstream in(run.path() / "events.jsonl");
    if (!in) continue;
    AgentLedger ledger;
    for (std::string line; std::getline(in, line);) {
      const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object()) continue;
      const int64_t ts = OptInt(j, "ts_ms").value_or(0);
      if (ledger.first_ts_ms == 0) ledger.first_ts_ms = ts;
      const std::string step = j.value("step", "");
      if (step == "closed" && j.contains("effective_ratio")) {
        ledger.closed_ratio = j["effective_ratio"].get<double>();
      }
      if (step != "recovered") continue;
      LedgerRecovery r;
      r.ts_ms = ts;
      r.node = j.value("node", "");
      r.mode = j.value("mode", "");
      r.cause = j.value("cause", "");
      r.round = OptInt(j, "round").value_or(0);
      r.stop_ms = OptInt(j, "stop_ms");
      r.rendezvous_ms = OptInt(j, "rendezvous_ms");
      r.start_ms = OptInt(j, "start_ms");
      r.restore_ms = OptInt(j, "restore_ms");
      r.first_step_ms = OptInt(j, "first_step_ms").value_or(0);
      r.steps_lost = OptInt(j, "steps_lost");
      ledger.recoveries.push_back(std::move(r));
    }
    out.push_back(std::move(ledger));
  }
  return out;
}

void AttributeLedger(const std::vector<AgentLedger>& ledgers, std::vector<FaultRecord>* faults) {
  for (const AgentLedger& ledger : ledgers) {
    for (const LedgerRecovery& r : ledger.recoveries) {
      for (size_t i = 0; i < faults->size(); ++i) {
        const int64_t next = i + 1 < faults->size() ? (*faults)[i + 1].unix_ms : INT64_MAX;
        if (r.ts_ms >= (*faults)[i].unix_ms && r.ts_ms < next) {
          (*faults)[i].ledger.push_back(r);
          break;
        }
      }
    }
  }
}

void MemoryPeaks::Sample(pid_t agent, const std::vector<pid_t>& workers) {
  auto hwm_kb = [](pid_t pid) -> std::optional<int64_t> {
    std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("VmHWM:", 0) != 0) continue;
      std::istringstream fields(line.substr(6));
      int64_t kb = 0;
      if (fields >> kb) return kb;
    }
    return std::nullopt;
  };
  auto note = [&hwm_kb](std::map<pid_t, int64_t>* peaks, pid_t pid) {
    if (std::optional<int64_t> kb = hwm_kb(pid)) (*peaks)[pid] = std::max((*peaks)[pid], *kb);
  };
  note(&agents_kb_, agent);
  for (pid_t w : workers) note(&workers_kb_, w);
}

void MemoryPeaks::Merge(const MemoryPeaks& other) {
  for (const auto& [pid, kb] : other.agents_kb_) agents_kb_[pid] = std::max(agents_kb_[pid], kb);
  for (const auto& [pid, kb] : other.workers_kb_) {
    workers_kb_[pid] = std::max(workers_kb_[pid], kb);
  }
}

void TrainingFigures::Add(const TrainingFigures& o) {
  steps += o.steps;
  wall_s += o.wall_s;
  steady_steps += o.steady_steps;
  steady_s += o.steady_s;
  agent_ratios.insert(agent_ratios.end(), o.agent_ratios.begin(), o.agent_ratios.end());
}

std::vector<std::string> CheckInProcess(const std::vector<FaultRecord>& faults) {
  std::vector<std::string> out;
  for (const FaultRecord& f : faults) {
    if (f.ledger.empty()) continue;
    const bool all_in_process =
        std::all_of(f.ledger.begin(), f.ledger.end(),
                    [](const LedgerRecovery& r) { return r.mode == "in-process"; });
    if (!all_in_process) continue;
    if (f.recomputed > 0 || LedgerStepsLost(f) > 0) {
      out.push_back(absl::StrCat("recovered in-process from ", KindName(f.kind), " (", f.detail,
                                 ") yet ", f.recomputed,
                                 " step(s) recomputed (ledger: ", LedgerStepsLost(f), " lost)"));
    }
  }
  return out;
}

std::string MarkdownReport(const SoakResult& r) {
  std::string out = absl::StrFormat(
      "Chaos soak: %s, --restart-mode=%s%s, seed %d, a fault every %.0f-%.0f s, %d segment(s), "
      "%d faults, %.0f s wall. ",
      r.fixed ? "fixed world (--nnodes=3)" : "elastic (--nnodes=2:3)", r.restart_mode,
      r.preload.empty() ? "" : absl::StrCat(" --preload=", r.preload), r.seed, r.gap_min_s,
      r.gap_max_s, r.segments, r.faults.size(), r.wall_s);
  absl::StrAppend(&out,
                  r.violations.empty() ? "Every invariant held"
                                       : absl::StrCat(r.violations.size(), " violation(s)"),
                  r.identical.empty() ? "" : absl::StrCat("; ", r.identical), ".\n\n");
  absl::StrAppend(&out,
                  "| fault | count | recovery p50 / p99 s (soak) | first step p50 / p99 s "
                  "(ledger, the fault's first round) | stop / rendezvous / start / restore ms "
                  "(medians) | steps "
                  "recomputed (soak / ledger) | recoveries in-process / cold |\n"
                  "|---|---|---|---|---|---|---|\n");
  for (Kind k : kKinds) {
    const KindFigures f = FiguresOf(k, r.faults);
    if (f.count == 0) continue;
    auto ms = [](const std::vector<double>& v) { return Fmt(Percentile(v, 0.5), 0); };
    std::vector<double> first_s;
    for (double v : f.first_step_ms) first_s.push_back(v / 1000);
    absl::StrAppend(&out, "| ", KindName(k), " | ", f.count, " | ",
                    Fmt(Percentile(f.recovery_s, 0.5)), " / ", Fmt(Percentile(f.recovery_s, 0.99)),
                    " | ", Fmt(Percentile(first_s, 0.5)), " / ", Fmt(Percentile(first_s, 0.99)),
                    " | ", ms(f.stop_ms), " / ", ms(f.rendezvous_ms), " / ", ms(f.start_ms), " / ",
                    ms(f.restore_ms), " | ", f.recomputed, " / ", f.steps_lost, " | ", f.in_process,
                    " / ", f.cold, " |\n");
  }
  int64_t total = 0, worst = 0;
  for (int64_t v : r.recomputed) {
    total += v;
    worst = std::max(worst, v);
  }
  absl::StrAppend(&out, "\nSteps recomputed (the soak's reading of the steps printed): ", total,
                  " in all; ", r.recomputed.size(),
                  " restart(s) went back to a checkpoint, at most ", worst,
                  " steps for one (--checkpoint-every ", r.checkpoint_every, ").\n");
  if (const std::optional<AdviceFigures>& a = r.advice) {
    absl::StrAppend(
        &out,
        absl::StrFormat("Checkpoint advice (the server's last): every %.2f s; MTBF %.1f s from %d "
                        "failure(s); save %.3f s; recovery %.2f s; effective training time %.1f %% "
                        "predicted (Daly)%s.\n",
                        a->interval_s, a->mtbf_s, a->failures, a->save_s, a->recovery_s,
                        100 * a->predicted_ratio,
                        a->measured_ratio ? absl::StrFormat(", %.1f %% by the agents' ledgers then",
                                                            100 * *a->measured_ratio)
                                          : std::string()));
  }
  const std::optional<double> agents = Percentile(r.training.agent_ratios, 0.5);
  absl::StrAppend(
      &out, "Effective training time: ", Percent(agents),
      " (the agents' final effective_ratio, median of ", r.training.agent_ratios.size(),
      " agents that ran a whole job); ", Percent(SoakRatio(r.training)),
      absl::StrFormat(
          " (the soak's: %d steps x %.3f s steady step time / %.0f s wall).\n", r.training.steps,
          r.training.steady_steps > 0 ? r.training.steady_s / r.training.steady_steps : 0.0,
          r.training.wall_s));
  const std::vector<double> agent_mib = Mib(r.memory.agents_kb()),
                            worker_mib = Mib(r.memory.workers_kb());
  absl::StrAppend(&out, "Peak RSS (VmHWM sampled each second): agents max ", Fmt(Max(agent_mib), 1),
                  " MiB (", agent_mib.size(), " processes); workers median ",
                  Fmt(Percentile(worker_mib, 0.5), 1), " MiB, max ", Fmt(Max(worker_mib), 1),
                  " MiB (", worker_mib.size(), " processes).\n");
  for (const std::string& v : r.violations) absl::StrAppend(&out, "- VIOLATION: ", v, "\n");
  return out;
}

std::optional<AdviceFigures> ParseAdvice(const std::string& status_json) {
  const nlohmann::json j = nlohmann::json::parse(status_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  // `ddprun status --json` prints the run's object (or, for several, an array of them).
  const nlohmann::json* run = &j;
  if (j.contains("runs") && j["runs"].is_array() && !j["runs"].empty()) run = &j["runs"][0];
  if (!run->contains("checkpoint_advice") || !(*run)["checkpoint_advice"].is_object()) {
    return std::nullopt;
  }
  const nlohmann::json& c = (*run)["checkpoint_advice"];
  AdviceFigures a;
  a.interval_s = c.value("interval_s", 0.0);
  a.mtbf_s = c.value("mtbf_s", 0.0);
  a.failures = c.value("failures", 0);
  a.save_s = c.value("save_s", 0.0);
  a.recovery_s = c.value("recovery_s", 0.0);
  a.predicted_ratio = c.value("predicted_ratio", 0.0);
  if (c.contains("measured_ratio") && c["measured_ratio"].is_number()) {
    a.measured_ratio = c["measured_ratio"].get<double>();
  }
  return a;
}

std::string JsonReport(const SoakResult& r) {
  Json j;
  j["restart_mode"] = r.restart_mode;
  j["preload"] = r.preload;
  j["fixed"] = r.fixed;
  j["seed"] = r.seed;
  j["fault_interval_s"] = {r.gap_min_s, r.gap_max_s};
  j["segments"] = r.segments;
  j["wall_s"] = r.wall_s;
  j["faults"] = r.faults.size();
  Json kinds = Json::object();
  for (Kind k : kKinds) {
    const KindFigures f = FiguresOf(k, r.faults);
    Json o;
    o["name"] = KindName(k);
    o["count"] = f.count;
    o["recovery_p50_s"] = OrNull(Percentile(f.recovery_s, 0.5));
    o["recovery_p99_s"] = OrNull(Percentile(f.recovery_s, 0.99));
    o["first_step_p50_ms"] = OrNull(Percentile(f.first_step_ms, 0.5));
    o["first_step_p99_ms"] = OrNull(Percentile(f.first_step_ms, 0.99));
    o["stop_ms"] = OrNull(Percentile(f.stop_ms, 0.5));
    o["rendezvous_ms"] = OrNull(Percentile(f.rendezvous_ms, 0.5));
    o["start_ms"] = OrNull(Percentile(f.start_ms, 0.5));
    o["restore_ms"] = OrNull(Percentile(f.restore_ms, 0.5));
    o["recomputed"] = f.recomputed;
    o["steps_lost"] = f.steps_lost;
    o["in_process"] = f.in_process;
    o["cold"] = f.cold;
    kinds[KindKey(k)] = o;
  }
  j["kinds"] = kinds;
  int64_t recomputed = 0;
  for (int64_t v : r.recomputed) recomputed += v;
  j["recomputed"] = recomputed;
  j["checkpoint_every"] = r.checkpoint_every;
  if (const std::optional<AdviceFigures>& a = r.advice) {
    j["advice"] = {{"interval_s", a->interval_s},
                   {"mtbf_s", a->mtbf_s},
                   {"failures", a->failures},
                   {"save_s", a->save_s},
                   {"recovery_s", a->recovery_s},
                   {"predicted_ratio", a->predicted_ratio},
                   {"measured_ratio", OrNull(a->measured_ratio)}};
  }
  j["effective_ratio_agents"] = OrNull(Percentile(r.training.agent_ratios, 0.5));
  j["effective_ratio_soak"] = OrNull(SoakRatio(r.training));
  j["steps"] = r.training.steps;
  j["train_wall_s"] = r.training.wall_s;
  j["steady_step_s"] =
      r.training.steady_steps > 0 ? Json(r.training.steady_s / r.training.steady_steps) : Json();
  const std::vector<double> agent_mib = Mib(r.memory.agents_kb()),
                            worker_mib = Mib(r.memory.workers_kb());
  j["agent_peak_mib_max"] = OrNull(Max(agent_mib));
  j["worker_peak_mib_median"] = OrNull(Percentile(worker_mib, 0.5));
  j["worker_peak_mib_max"] = OrNull(Max(worker_mib));
  j["worker_processes"] = worker_mib.size();
  j["violations"] = r.violations;
  j["identical"] = r.identical;
  return j.dump(1);
}

}  // namespace ddprun::chaos
