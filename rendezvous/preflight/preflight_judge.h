// The preflight's judge (issue 41, docs/design.md §3d): each node's figures against the job's
// median node. A node is judged by the best it showed in any pair it took part in, at either
// end: a ring of pairs puts every node in two, so a slow link shows on both of its node's pairs
// while each neighbour still has one good pair. (A node whose link is slow one way only is seen
// in that direction's figure: send and receive are judged apart.)
//
// Pure: no I/O. Thread-compatible.
#ifndef DDPRUN_RENDEZVOUS_PREFLIGHT_PREFLIGHT_JUDGE_H_
#define DDPRUN_RENDEZVOUS_PREFLIGHT_PREFLIGHT_JUDGE_H_

#include <optional>
#include <string>
#include <vector>

#include "rendezvous/api/preflight.h"

namespace ddprun::rendezvous {

// One participant of the preflight and what it reported (nullopt: nothing before the deadline).
struct PreflightEntry {
  std::string node_id;
  std::string hostname;
  std::optional<PreflightReport> report;
};

// A round trip this much above the median is never named, however large the ratio: below it,
// scheduling on a busy host moves the figure more than any link that slows a job does.
inline constexpr double kRttFloorMs = 1.0;

// The least margin the network's throughput is judged with: a TCP probe of 200 ms moves by a
// quarter between runs on a busy host (measured on loopback, 4 nodes on 2 cores: 0.77x to 1.23x
// of the median for healthy nodes, each judged by its best of four pairs), so a link is named
// only below half the job's median (a margin of 1), or further below when --preflight-margin
// asks for more. A link limited to a tenth, a port negotiated at 25 of 100 Gbit/s, is far below.
inline constexpr double kThroughputMarginFloor = 1.0;

// The verdict on every entry, in the entries' order. `margin`: PreflightSettings::margin. A node
// every pair of which failed "reached no peer" while most nodes reached one; where most probes
// failed (a lossy network, every link alike) nobody is named for it.
std::vector<PreflightVerdict> JudgePreflight(const std::vector<PreflightEntry>& entries,
                                             double margin);

// The job's median node: each figure's median over the entries' best figures (0 where no entry
// measured it).
PreflightFigures MedianFigures(const std::vector<PreflightEntry>& entries);

// The verdict on a node set aside (kept out by the preflight, or evicted as slow) that measured
// again: its figures, from its own pairs, against `median` (the run's preflight's), by
// JudgePreflight's rules. Its targets are nodes of the run at work: one it could not reach
// counts against it.
PreflightVerdict JudgeRequalification(const PreflightEntry& entry, const PreflightFigures& median,
                                      double margin);

// "cpu 12.1 GFLOP/s (1.00x), send 941 Mbit/s (0.98x), recv 950 Mbit/s (1.01x), rtt 0.08 ms
// (1.10x), health check 0.2 s: ok" — the summary line of one node (the server logs one a node).
std::string DescribeVerdict(const PreflightVerdict& verdict);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_PREFLIGHT_PREFLIGHT_JUDGE_H_
