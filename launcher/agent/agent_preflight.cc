// Agent: the preflight (issue 41, docs/design.md §3d). From before the join to the end, the
// probe listener peers probe (the preflight's, then those of a node set aside that measures
// again); when the server asks, the measurement on a thread of its own, and its report to the
// rendezvous, the log (one line) and events.jsonl.

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "launcher/agent/agent.h"

namespace ddprun::launcher {
namespace {

// "cpu 3.1 GFLOP/s; to n3 (10.213.0.3): rtt 0.09 ms, send 9412 Mbit/s, recv 9120 Mbit/s; 0.9 s"
std::string DescribeReport(const rendezvous::PreflightReport& report,
                           const rendezvous::PreflightRequest& request) {
  std::vector<std::string> parts = {absl::StrFormat("cpu %.3g GFLOP/s", report.cpu_gflops)};
  for (size_t i = 0; i < report.pairs.size(); ++i) {
    const rendezvous::PairProbe& p = report.pairs[i];
    const std::string peer = i < request.targets.size()
                                 ? absl::StrCat(p.peer_node_id, " (", request.targets[i].addr, ")")
                                 : p.peer_node_id;
    parts.push_back(p.error.empty()
                        ? absl::StrFormat("to %s: rtt %.3g ms, send %.0f Mbit/s, recv %.0f Mbit/s",
                                          peer, p.rtt_ms, p.send_mbps, p.recv_mbps)
                        : absl::StrCat("to ", peer, ": failed: ", p.error));
  }
  if (report.health_check_s.has_value()) {
    parts.push_back(absl::StrFormat("health check passed in %.2g s", *report.health_check_s));
  }
  return absl::StrCat(absl::StrJoin(parts, "; "),
                      absl::StrFormat("; measured in %.2f s", report.elapsed_s));
}

}  // namespace

absl::Status Agent::StartProbeListener() {
  if (!PreflightEnabled(options_)) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<ProbeListener>> listener = ProbeListener::Start();
  if (!listener.ok()) return listener.status();
  probe_listener_ = std::move(*listener);
  return absl::OkStatus();
}

void Agent::OnPreflight(const rendezvous::PreflightRequest& request) {
  if (preflight_run_ != nullptr) {
    // One measurement at a time (a second ask comes only from a server that restarted during
    // the first): its deadline names this node if the first report does not count.
    LogWarning("preflight: asked again while measuring; the first measurement is reported");
    return;
  }
  LogInfo(absl::StrCat(
      "preflight: measuring this node ",
      state_.set_aside() ? "to pass the preflight again" : "before the first round", " (",
      request.targets.size(), " peer probe", request.targets.size() == 1 ? "" : "s", ")"));
  preflight_run_ = std::make_unique<PreflightRun>(
      request, health_check_s_, [this, request](const rendezvous::PreflightReport& report) {
        loop_.Post([this, report, request] { OnPreflightMeasured(report, request); });
      });
}

void Agent::OnPreflightMeasured(const rendezvous::PreflightReport& report,
                                const rendezvous::PreflightRequest& request) {
  preflight_run_.reset();  // its thread posted this as its last act: joined at once
  rendezvous_->ReportPreflight(report);
  const std::string line = DescribeReport(report, request);
  LogInfo(absl::StrCat("preflight: ", line));
  StepEvent step{Step::kPreflight};
  step.detail = line;
  step.preflight = report;
  RecordStep(std::move(step));
}

}  // namespace ddprun::launcher
