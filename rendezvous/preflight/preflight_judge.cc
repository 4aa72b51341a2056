#include "rendezvous/preflight/preflight_judge.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/median.h"

namespace ddprun::rendezvous {
namespace {

// "9412", "3.14", "0.0122": whole numbers from 100 up, three significant digits below.
std::string Figure(double value) {
  return value >= 100 ? absl::StrFormat("%.0f", value) : absl::StrFormat("%.3g", value);
}

// Each node's best figures from every pair it took part in. Nodes are keyed by id; pairs that
// name a node outside the entries count for their initiator only.
std::map<std::string, PreflightFigures> BestFigures(const std::vector<PreflightEntry>& entries) {
  std::map<std::string, PreflightFigures> best;
  auto better = [](double* slot, double value, bool higher_is_better) {
    if (value <= 0) return;
    if (*slot == 0 || (higher_is_better ? value > *slot : value < *slot)) *slot = value;
  };
  for (const PreflightEntry& e : entries) {
    best[e.node_id];  // every entry has a row, measured or not
    if (!e.report.has_value()) continue;
    best[e.node_id].cpu_gflops = e.report->cpu_gflops;
  }
  for (const PreflightEntry& e : entries) {
    if (!e.report.has_value()) continue;
    for (const PairProbe& p : e.report->pairs) {
      if (!p.error.empty()) continue;
      PreflightFigures& mine = best[e.node_id];
      better(&mine.send_mbps, p.send_mbps, true);
      better(&mine.recv_mbps, p.recv_mbps, true);
      better(&mine.rtt_ms, p.rtt_ms, false);
      auto peer = best.find(p.peer_node_id);
      if (peer == best.end()) continue;
      // The target's end of the same pair: what it received is what the initiator sent.
      better(&peer->second.send_mbps, p.recv_mbps, true);
      better(&peer->second.recv_mbps, p.send_mbps, true);
      better(&peer->second.rtt_ms, p.rtt_ms, false);
    }
  }
  return best;
}

// Pair probes the entry started that failed, as one phrase; empty when none did.
std::string FailedPairs(const PreflightEntry& e) {
  if (!e.report.has_value()) return "";
  std::vector<std::string> failed;
  for (const PairProbe& p : e.report->pairs) {
    if (!p.error.empty()) failed.push_back(absl::StrCat(p.peer_node_id, ": ", p.error));
  }
  return absl::StrJoin(failed, "; ");
}

PreflightFigures MedianOf(const std::map<std::string, PreflightFigures>& best) {
  std::vector<double> cpu, send, recv, rtt;
  for (const auto& [id, f] : best) {
    if (f.cpu_gflops > 0) cpu.push_back(f.cpu_gflops);
    if (f.send_mbps > 0) send.push_back(f.send_mbps);
    if (f.recv_mbps > 0) recv.push_back(f.recv_mbps);
    if (f.rtt_ms > 0) rtt.push_back(f.rtt_ms);
  }
  return PreflightFigures{Median(cpu), Median(send), Median(recv), Median(rtt)};
}

// The verdict on one entry whose best figures are `figures`. `peers_reachable`: most nodes
// reached a peer, so that one which reached none is the odd one out (on a network where most
// probes fail, failing is the median).
PreflightVerdict JudgeEntry(const PreflightEntry& e, const PreflightFigures& figures,
                            const PreflightFigures& median, double margin, bool peers_reachable) {
  const double slowest_cpu = 1.0 / (1.0 + margin);  // of the median's rate
  const double slowest_link = 1.0 / (1.0 + std::max(margin, kThroughputMarginFloor));
  PreflightVerdict v;
  v.node_id = e.node_id;
  v.hostname = e.hostname;
  v.reported = e.report.has_value();
  if (!v.reported) {
    v.shortfalls.push_back("sent no preflight report before the deadline");
    v.worst_ratio = 0;
    return v;
  }
  v.health_check_s = e.report->health_check_s;
  v.figures = figures;
  auto rate = [&](double figure, double med, double slowest, double* ratio, const char* name,
                  const char* unit) {
    if (figure <= 0 || med <= 0) return;
    *ratio = figure / med;
    v.worst_ratio = std::min(v.worst_ratio, *ratio);
    if (*ratio < slowest) {
      v.shortfalls.push_back(absl::StrFormat("%s %s %s, %.2fx the job's median %s %s", name,
                                             Figure(figure), unit, *ratio, Figure(med), unit));
    }
  };
  rate(v.figures.cpu_gflops, median.cpu_gflops, slowest_cpu, &v.ratios.cpu_gflops, "cpu",
       "GFLOP/s");
  rate(v.figures.send_mbps, median.send_mbps, slowest_link, &v.ratios.send_mbps, "send", "Mbit/s");
  rate(v.figures.recv_mbps, median.recv_mbps, slowest_link, &v.ratios.recv_mbps, "recv", "Mbit/s");
  if (v.figures.rtt_ms > 0 && median.rtt_ms > 0) {
    v.ratios.rtt_ms = v.figures.rtt_ms / median.rtt_ms;
    if (v.ratios.rtt_ms > 1 + margin && v.figures.rtt_ms - median.rtt_ms > kRttFloorMs) {
      v.worst_ratio = std::min(v.worst_ratio, 1 / v.ratios.rtt_ms);
      v.shortfalls.push_back(absl::StrFormat("rtt %s ms, %.2fx the job's median %s ms",
                                             Figure(v.figures.rtt_ms), v.ratios.rtt_ms,
                                             Figure(median.rtt_ms)));
    }
  }
  const bool any_pair = !e.report->pairs.empty() || v.figures.send_mbps > 0;
  if (peers_reachable && any_pair && v.figures.send_mbps <= 0 && v.figures.recv_mbps <= 0) {
    // Every pair it took part in failed: the node is cut off from its peers.
    const std::string failed = FailedPairs(e);
    v.shortfalls.push_back(
        absl::StrCat("reached no peer", failed.empty() ? "" : absl::StrCat(" (", failed, ")")));
    v.worst_ratio = 0;
  }
  return v;
}

}  // namespace

PreflightFigures MedianFigures(const std::vector<PreflightEntry>& entries) {
  return MedianOf(BestFigures(entries));
}

std::vector<PreflightVerdict> JudgePreflight(const std::vector<PreflightEntry>& entries,
                                             double margin) {
  const std::map<std::string, PreflightFigures> best = BestFigures(entries);
  const PreflightFigures median = MedianOf(best);
  size_t reported = 0, reached = 0;
  for (const PreflightEntry& e : entries) {
    if (!e.report.has_value()) continue;
    ++reported;
    const PreflightFigures& f = best.at(e.node_id);
    reached += f.send_mbps > 0 || f.recv_mbps > 0 ? 1 : 0;
  }
  const bool most_reached_a_peer = 2 * reached > reported;
  std::vector<PreflightVerdict> verdicts;
  for (const PreflightEntry& e : entries) {
    verdicts.push_back(JudgeEntry(e, best.at(e.node_id), median, margin, most_reached_a_peer));
  }
  return verdicts;
}

PreflightVerdict JudgeRequalification(const PreflightEntry& entry, const PreflightFigures& median,
                                      double margin) {
  // Its own pairs only: the targets' ends of them say nothing about the node judged. Its peers
  // were reachable: they are nodes of the run, at work.
  const std::map<std::string, PreflightFigures> best = BestFigures({entry});
  return JudgeEntry(entry, best.at(entry.node_id), median, margin, /*peers_reachable=*/true);
}

std::string DescribeVerdict(const PreflightVerdict& v) {
  if (!v.reported) return absl::StrCat(v.shortfalls.empty() ? "" : v.shortfalls.front());
  std::vector<std::string> parts;
  auto figure = [&parts](const char* name, double value, double ratio, const char* unit) {
    if (value <= 0) return;
    parts.push_back(absl::StrFormat("%s %s %s (%.2fx)", name, Figure(value), unit, ratio));
  };
  figure("cpu", v.figures.cpu_gflops, v.ratios.cpu_gflops, "GFLOP/s");
  figure("send", v.figures.send_mbps, v.ratios.send_mbps, "Mbit/s");
  figure("recv", v.figures.recv_mbps, v.ratios.recv_mbps, "Mbit/s");
  figure("rtt", v.figures.rtt_ms, v.ratios.rtt_ms, "ms");
  if (v.health_check_s.has_value()) {
    parts.push_back(absl::StrFormat("health check passed in %.2g s", *v.health_check_s));
  }
  std::string line = absl::StrJoin(parts, ", ");
  if (!v.slow()) return absl::StrCat(line, ": ok");
  return absl::StrCat(line, ": SLOW: ", absl::StrJoin(v.shortfalls, "; "),
                      v.kept_out ? " (kept out: a spare takes its place)" : "");
}

}  // namespace ddprun::rendezvous
