// The preflight (issue 41, point 1; docs/design.md §3d): before the first round starts its
// workers, every node measures its compute and its network to other nodes of the run, on the
// address its workers will use, and the server compares each node with the job's median. What
// the server asks of a node, what the node reports, and what the run does with the verdicts.
#ifndef DDPRUN_RENDEZVOUS_API_PREFLIGHT_H_
#define DDPRUN_RENDEZVOUS_API_PREFLIGHT_H_

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"

namespace ddprun::rendezvous {

// The run's preflight (--preflight, --preflight-margin); the first agent to join sets it, as the
// timeouts.
struct PreflightSettings {
  bool enabled = false;
  // A node whose figure is worse than the job's median by more than this fraction is named
  // slow: 0.2 names a node that takes 1.2x the median's time (or moves 1/1.2 of its bytes).
  double margin = 0.2;
  // How long the server waits for the reports, from the requests out. The agents' probes take
  // well under a second; a node that has not reported by then is named for it.
  Duration deadline = std::chrono::seconds(10);
  // A node the preflight kept out, or --evict-slow evicted, is asked to measure again this long
  // after, and after each try it fails: it becomes a spare once it passes (--rdzv-conf
  // requalify_interval=).
  Duration requalify_interval = std::chrono::seconds(30);
};

// A margin above this (a node 11x slower than the median passes) leaves nothing worth naming.
inline constexpr double kMaxPreflightMargin = 10;
inline bool ValidPreflightMargin(double margin) {
  return margin > 0 && margin <= kMaxPreflightMargin;
}

// A node set aside measures again at most once a second (each try costs it a few seconds of
// probes), at least once a day.
inline bool ValidRequalifyInterval(Duration interval) {
  return interval >= std::chrono::seconds(1) && interval <= std::chrono::hours(24);
}

// A peer a node probes: another node of the run, at the address its workers will use.
struct PreflightPeer {
  std::string node_id;
  std::string addr;
  int port = 0;  // the peer agent's probe listener (NodeInfo::preflight_port)
};

// The longest a direction of a throughput probe sends, whatever a request or a peer's hello
// says: a hostile one costs 2 s.
inline constexpr std::chrono::milliseconds kMaxProbeTime{2000};

// What the server asks of one node.
struct PreflightRequest {
  int64_t generation = 0;  // echoed in the report, so that a late report of an earlier ask is
                           // told apart
  std::vector<PreflightPeer> targets;
  // How long each direction of a throughput probe sends.
  Duration probe_time = std::chrono::milliseconds(200);
};

// One probe of a pair, as its initiator measured it: the initiator sent to the target for
// probe_time (send_mbps, as the target counted it), then the target sent back (recv_mbps).
struct PairProbe {
  std::string peer_node_id;
  double rtt_ms = 0;     // median round trip of small messages
  double send_mbps = 0;  // initiator to target, megabits a second
  double recv_mbps = 0;  // target to initiator
  std::string error;     // the probe failed (no figures): why
};

// What one node measured.
struct PreflightReport {
  int64_t generation = 0;
  // A fixed single-threaded float GEMM's rate, GFLOP/s: the best of a few blocks each longer than
  // the CFS period, so a CPU quota shows and a moment's preemption does not.
  double cpu_gflops = 0;
  std::vector<PairProbe> pairs;  // the probes this node started
  // --health-check: it passed before this node joined (a failing check keeps a node from
  // joining at all); how long it took. Unset: no check.
  std::optional<double> health_check_s;
  double elapsed_s = 0;  // the whole preflight on this node
};

// One node's figures as the server judged them: each the best the node showed in any pair it
// took part in (either end), so that a slow peer does not make its neighbours look slow.
struct PreflightFigures {
  double cpu_gflops = 0;
  double send_mbps = 0;  // 0: no pair measured it
  double recv_mbps = 0;
  double rtt_ms = 0;
};

// The verdict on one node.
struct PreflightVerdict {
  std::string node_id;
  std::string hostname;
  bool reported = false;
  PreflightFigures figures;
  // Each figure over the job's median (1: the median; below 1 worse, for rtt above 1 worse);
  // 0 where not measured.
  PreflightFigures ratios;
  std::optional<double> health_check_s;
  // What is worse than the margin allows, one phrase each ("send 95 Mbit/s, 0.10x the job's
  // median"); empty: passed.
  std::vector<std::string> shortfalls;
  // The worst ratio (1 for a node that passed; 0 for one that did not report): the order in
  // which slow nodes are kept out.
  double worst_ratio = 1;
  bool kept_out = false;  // a spare took its place
  bool slow() const { return !shortfalls.empty(); }
};

// The run's preflight, for the status page, `ddprun status` and /metrics.
struct PreflightSummary {
  bool running = false;  // the probes run; verdicts come when they end
  double took_s = 0;     // from the requests to the verdicts
  std::vector<PreflightVerdict> verdicts;
  // The job's median node as this preflight measured it: what a node set aside has to match
  // again to become a spare.
  PreflightFigures median;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_API_PREFLIGHT_H_
