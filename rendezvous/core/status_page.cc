#include "rendezvous/core/status_page.h"

#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "rendezvous/checkpoints/checkpoint_advisor.h"

namespace ddprun::rendezvous {
namespace {

std::string Seconds(double s) {
  char buf[32];
  if (s < 0.01) {
    snprintf(buf, sizeof(buf), "%.1f ms", s * 1000);
  } else if (s < 1) {
    snprintf(buf, sizeof(buf), "%.0f ms", s * 1000);
  } else {
    snprintf(buf, sizeof(buf), "%.1f s", s);
  }
  return buf;
}

double Since(TimePoint then, TimePoint now) {
  return std::chrono::duration<double>(now - then).count();
}

// A member's compute time per step and its ratio to the job's median node (the slow-node judge):
// "31.2 ms (1.02x)", "95.0 ms (3.05x) slow", or empty when its workers report none.
std::string ComputeCell(const MemberStatus& m) {
  if (m.compute_ms <= 0) return "<td></td>";
  char buf[64];
  if (m.compute_ratio > 0) {
    snprintf(buf, sizeof(buf), "%.1f ms (%.2fx)", m.compute_ms, m.compute_ratio);
  } else {
    snprintf(buf, sizeof(buf), "%.1f ms", m.compute_ms);
  }
  return absl::StrCat(m.slow ? "<td class=\"slow\">" : "<td>", buf, m.slow ? " slow" : "", "</td>");
}

// A field of an agent's step, or `fallback` when it is absent or of another type (json::value
// would throw for a field of the wrong type, and an agent may send anything).
std::string StringField(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}
int64_t IntField(const nlohmann::json& j, const char* key, int64_t fallback) {
  auto it = j.find(key);
  // Integers only: a float beyond int64's range would convert with undefined behaviour.
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

// A page for a person: a 10,000-node run lists its first members, not all.
constexpr size_t kMaxMembersShown = 256;

const char kStyle[] =
    "body{font:14px system-ui,sans-serif;margin:1.5em;color:#1d2330}"
    "h1{font-size:1.3em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.6em 0 .4em}"
    ".muted{color:#667}table{border-collapse:collapse;margin:.3em 0 .8em}"
    "th,td{text-align:left;padding:.25em .8em;border-bottom:1px solid #dde}"
    "th{background:#f3f4f8}.phase{display:inline-block;padding:.05em .5em;border-radius:.6em;"
    "font-size:.9em;background:#e6e8ef}.running{background:#d7f5dd}.closed{background:#eee}"
    ".joining,.recovering{background:#fdf0c8}";

// The run's recoveries (what its agents' goodput ledgers reported), newest first, and each
// node's latest effective training ratio. Everything in them came from an agent: escaped.
void RenderRecoveries(const RecoveryLedger& ledger, TimePoint now, std::string* out) {
  if (ledger.latest().empty() && ledger.effective_ratios().empty()) return;
  absl::StrAppend(out,
                  "<details open class=\"recoveries\"><summary>Recoveries (phases from the "
                  "failure's detection on that agent; first step: the whole recovery)</summary>");
  if (!ledger.latest().empty()) {
    absl::StrAppend(out,
                    "<table class=\"recoveries\"><tr><th>reported</th><th>node</th><th>round</th>"
                    "<th>mode</th><th>cause</th>");
    for (RecoveryPhase phase : kRecoveryPhases) {
      absl::StrAppend(out, "<th>", RecoveryPhaseName(phase), "</th>");
    }
    absl::StrAppend(out, "<th>steps lost</th><th>restored step</th></tr>");
    for (auto it = ledger.latest().rbegin(); it != ledger.latest().rend(); ++it) {
      absl::StrAppend(out, "<tr class=\"recovery\"><td>", Seconds(Since(it->received, now)),
                      " ago</td><td>", HtmlEscape(it->node), "</td><td>",
                      it->round >= 0 ? absl::StrCat(it->round) : std::string("-"), "</td><td>",
                      HtmlEscape(it->mode), "</td><td>", HtmlEscape(it->cause_as_sent), "</td>");
      for (const std::optional<double>& ms : it->phase_ms) {
        absl::StrAppend(out, "<td>", ms ? absl::StrCat("+", Seconds(*ms / 1000)) : "-", "</td>");
      }
      absl::StrAppend(
          out, "<td>", it->steps_lost ? absl::StrCat(*it->steps_lost) : std::string("-"),
          "</td><td>", it->restored_step ? absl::StrCat(*it->restored_step) : std::string("-"),
          "</td></tr>");
    }
    absl::StrAppend(out, "</table>");
  }
  if (!ledger.effective_ratios().empty()) {
    absl::StrAppend(out,
                    "<table class=\"effective\"><tr><th>node</th><th>effective training ratio"
                    "</th><th>reported</th></tr>");
    size_t shown = 0;
    for (const auto& [node, ratio] : ledger.effective_ratios()) {
      if (++shown > kMaxMembersShown) {
        absl::StrAppend(out, "<tr><td colspan=\"3\">&hellip; and ",
                        ledger.effective_ratios().size() - kMaxMembersShown,
                        " more (all of them: /metrics)</td></tr>");
        break;
      }
      char percent[32];
      snprintf(percent, sizeof(percent), "%.1f%%", ratio.ratio * 100);
      absl::StrAppend(out, "<tr class=\"ratio\"><td>", HtmlEscape(node), "</td><td>", percent,
                      "</td><td>", Seconds(Since(ratio.updated, now)), " ago</td></tr>");
    }
    absl::StrAppend(out, "</table>");
  }
  absl::StrAppend(out, "</details>");
}

// The run's checkpoint advice (issue 41), once it has one.
std::string AdviceParagraph(const RunStatus& run) {
  if (!run.checkpoint_advice.has_value()) return "";
  return absl::StrCat("<p class=\"advice\">",
                      HtmlEscape(DescribeCheckpointAdvice(*run.checkpoint_advice)), "</p>");
}

// The run's preflight (issue 41): each node's figures and verdict, once it has them.
std::string PreflightTable(const RunStatus& run) {
  if (!run.preflight.has_value()) return "";
  const PreflightSummary& p = *run.preflight;
  if (p.running) return "<p class=\"preflight\">preflight: measuring the nodes&hellip;</p>";
  std::string out = absl::StrCat(
      "<details open><summary>preflight (", Seconds(p.took_s),
      ")</summary><table class=\"preflight\"><tr><th>host</th><th>cpu GFLOP/s</th><th>send "
      "Mbit/s</th><th>recv Mbit/s</th><th>rtt ms</th><th>verdict</th><th>node id</th></tr>");
  auto cell = [](double value, double ratio) {
    if (value <= 0) return std::string("<td></td>");
    char buf[64];
    snprintf(buf, sizeof(buf), "<td>%.4g (%.2fx)</td>", value, ratio);
    return std::string(buf);
  };
  size_t shown = 0;
  for (const PreflightVerdict& v : p.verdicts) {
    if (++shown > kMaxMembersShown) {
      absl::StrAppend(&out, "<tr><td colspan=\"7\">&hellip; and ",
                      p.verdicts.size() - kMaxMembersShown, " more</td></tr>");
      break;
    }
    const std::string verdict = !v.slow()    ? "ok"
                                : v.kept_out ? absl::StrCat("kept out: ", v.shortfalls.front())
                                             : absl::StrCat("slow: ", v.shortfalls.front());
    absl::StrAppend(&out, "<tr class=\"", v.slow() ? "slow" : "ok", "\"><td>",
                    HtmlEscape(v.hostname), "</td>",
                    cell(v.figures.cpu_gflops, v.ratios.cpu_gflops),
                    cell(v.figures.send_mbps, v.ratios.send_mbps),
                    cell(v.figures.recv_mbps, v.ratios.recv_mbps),
                    cell(v.figures.rtt_ms, v.ratios.rtt_ms), "<td>", HtmlEscape(verdict),
                    "</td><td class=\"muted\">", HtmlEscape(v.node_id), "</td></tr>");
  }
  absl::StrAppend(&out, "</table></details>");
  return out;
}

}  // namespace

std::string HtmlEscape(const std::string& text) {
  return absl::StrReplaceAll(
      text, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}, {"'", "&#39;"}});
}

std::string RenderStatusPage(const std::vector<RunStatus>& runs, const ServerMetrics& metrics,
                             const std::string& server, TimePoint now) {
  std::string out = absl::StrCat(
      "<!doctype html><html><head><meta charset=\"utf-8\">"
      "<meta http-equiv=\"refresh\" content=\"2\"><title>ddprun-rdzv ",
      HtmlEscape(server), "</title><style>", kStyle, "</style></head><body><h1>ddprun-rdzv ",
      HtmlEscape(server), "</h1><p class=\"muted\">", runs.size(), " run(s), ", metrics.joins,
      " join(s), ", metrics.heartbeats,
      " heartbeat(s) received; refreshes every 2 s; numbers for Prometheus at "
      "<a href=\"/metrics\">/metrics</a></p>");
  if (runs.empty()) absl::StrAppend(&out, "<p>No run yet.</p>");
  for (const RunStatus& run : runs) {
    const std::string phase = RunPhaseName(run.phase);
    absl::StrAppend(&out, "<h2 id=\"run-", HtmlEscape(run.run_id), "\">run ",
                    HtmlEscape(run.run_id), " <span class=\"phase ", phase, "\">", phase,
                    "</span></h2><p>round ", run.round, " &middot; nodes ", run.min_nodes, ":",
                    run.max_nodes, " &middot; restarts used ", run.restarts_used, " of ",
                    run.max_restarts, " &middot; spares ", run.spares, " (used ", run.spares_used,
                    ") &middot; slow nodes ", run.slow_nodes, "</p>");
    if (!run.close_message.empty()) {
      absl::StrAppend(&out, "<p>closed: ", HtmlEscape(run.close_message), "</p>");
    }
    absl::StrAppend(&out, AdviceParagraph(run));
    absl::StrAppend(&out, PreflightTable(run));
    absl::StrAppend(&out,
                    "<table class=\"members\"><tr><th>host</th><th>address</th><th>group rank"
                    "</th><th>global ranks</th><th>last heartbeat</th><th>state</th>"
                    "<th>compute per step</th><th>node id</th></tr>");
    size_t shown = 0;
    for (const MemberStatus& m : run.members) {
      if (++shown > kMaxMembersShown) {
        absl::StrAppend(&out, "<tr><td colspan=\"8\">&hellip; and ",
                        run.members.size() - kMaxMembersShown,
                        " more (all of them: ddprun status --json)</td></tr>");
        break;
      }
      // Global ranks follow the group ranks: every node has nproc_per_node workers.
      const std::string ranks = m.group_rank < 0
                                    ? "-"
                                    : absl::StrCat(m.group_rank * m.nproc_per_node, "-",
                                                   (m.group_rank + 1) * m.nproc_per_node - 1);
      absl::StrAppend(&out, "<tr class=\"member\"><td>", HtmlEscape(m.hostname), "</td><td>",
                      HtmlEscape(m.addr), "</td><td>",
                      m.group_rank < 0 ? std::string("waiting") : absl::StrCat(m.group_rank),
                      "</td><td>", ranks, "</td><td>", Seconds(Since(m.last_seen, now)),
                      " ago</td><td>", HtmlEscape(m.state), "</td>", ComputeCell(m),
                      "<td class=\"muted\">", HtmlEscape(m.node_id), "</td></tr>");
    }
    absl::StrAppend(&out, "</table>");
    if (!run.steps.empty()) {
      // The agents' own timelines, newest first (their events.jsonl steps).
      absl::StrAppend(&out,
                      "<details open><summary>timeline (the agents' latest steps)</summary>"
                      "<table class=\"timeline\"><tr><th>time</th><th>node</th><th>step</th>"
                      "<th>round</th><th>detail</th></tr>");
      for (auto it = run.steps.rbegin(); it != run.steps.rend(); ++it) {
        const nlohmann::json step = nlohmann::json::parse(*it, nullptr, false);
        if (!step.is_object()) continue;
        const int64_t ms = IntField(step, "ts_ms", 0);
        const std::time_t secs = static_cast<std::time_t>(ms / 1000);
        std::tm tm{};
        gmtime_r(&secs, &tm);
        char when[32];
        snprintf(when, sizeof(when), "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
                 static_cast<int>(ms % 1000));
        std::string detail = StringField(step, "cause");
        const std::string more = StringField(step, "detail");
        if (!more.empty()) absl::StrAppend(&detail, detail.empty() ? "" : ": ", more);
        const int64_t round = IntField(step, "round", -1);
        absl::StrAppend(&out, "<tr class=\"step\"><td>", when, "</td><td>",
                        HtmlEscape(StringField(step, "node")), "</td><td>",
                        HtmlEscape(StringField(step, "step")), "</td><td>",
                        round >= 0 ? absl::StrCat(round) : std::string(), "</td><td>",
                        HtmlEscape(detail), "</td></tr>");
      }
      absl::StrAppend(&out, "</table></details>");
    }
    if (!run.restarts.empty()) {
      absl::StrAppend(&out,
                      "<table class=\"restarts\"><tr><th>when</th><th>round</th><th>cause</th>"
                      "<th>lost node silent</th><th>next round formed</th><th>spare</th>"
                      "<th>reason</th></tr>");
      for (auto it = run.restarts.rbegin(); it != run.restarts.rend(); ++it) {
        absl::StrAppend(&out, "<tr class=\"restart\"><td>", Seconds(Since(it->when, now)),
                        " ago</td><td>", it->round, "</td><td>", CauseLabel(it->cause), "</td><td>",
                        it->lost_silent_s ? Seconds(*it->lost_silent_s) : std::string(),
                        "</td><td>",
                        it->formed_after_s ? absl::StrCat("+", Seconds(*it->formed_after_s))
                                           : std::string("not yet"),
                        "</td><td>", it->spare_used ? "taken" : "", "</td><td>",
                        HtmlEscape(it->reason), "</td></tr>");
      }
      absl::StrAppend(&out, "</table>");
    }
    auto ledger = metrics.recoveries.find(run.run_id);
    if (ledger != metrics.recoveries.end()) RenderRecoveries(ledger->second, now, &out);
  }
  absl::StrAppend(&out, "</body></html>");
  return out;
}

}  // namespace ddprun::rendezvous
