// SlowNodeJudge: which node of a synchronous job is persistently slower than the others (issue
// 41, docs/design.md §3b). A synchronous job runs at the speed of its slowest rank, and the
// others wait for it inside the step's collective: so the figure that tells a slow node apart is
// how long each rank *computed* before it waited (ddp-train reports it per step; the agent sends
// each rank's median over a few seconds). The judge compares each node (its slowest rank) with
// the job's median node and names one that stays more than `margin` slower for `windows`
// reports in a row: one noisy step, or one noisy report, names nobody.
//
// Pure: no I/O, no clock reads. Not thread-safe (one per run, on the server's loop).
#ifndef DDPRUN_RENDEZVOUS_STRAGGLERS_SLOW_NODE_JUDGE_H_
#define DDPRUN_RENDEZVOUS_STRAGGLERS_SLOW_NODE_JUDGE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"

namespace ddprun::rendezvous {

struct SlowNodeOptions {
  // A node is slow while its compute time exceeds the job's median node by more than this
  // fraction (the default margin, 20 %).
  double margin = 0.2;
  // Reports in a row above the margin before the node is named (and below it before the name
  // is withdrawn). Agents report every 5 s: 3 reports name a slow node within about 15 s.
  int windows = 3;
  // A report older than this is no figure of the job any more (its node stopped reporting).
  Duration stale_after = std::chrono::seconds(20);
  // Below this the steps are too short for their times to tell nodes apart (timer and
  // scheduling noise): nobody is named.
  double min_compute_ms = 1.0;
  // Fewer nodes with a fresh figure than this: no median worth the name.
  int min_nodes = 2;
};

// One node's figure for the window that just ended: the median compute time of its slowest
// local rank (ms) and the steps it covers.
struct NodeComputeReport {
  std::string node_id;
  double compute_ms = 0;
  int64_t steps = 0;
};

// What the judge thinks of one node now.
struct NodeComputeStanding {
  double compute_ms = 0;  // its latest figure
  double ratio = 0;       // to the job's median node when it was judged; 0: not judged
  bool slow = false;      // named
};

// A change of the judge's verdict on one node, for the log and the events.
struct SlowNodeChange {
  std::string node_id;
  bool slow = false;  // named now (true) or cleared (false)
  double compute_ms = 0;
  double median_ms = 0;
  double ratio = 0;
  int windows = 0;  // reports in a row that decided it
  std::string Describe() const;
};

class SlowNodeJudge {
 public:
  explicit SlowNodeJudge(SlowNodeOptions options = {}) : options_(options) {}

  // A node's report at `now`; the verdict on that node when it changed.
  std::optional<SlowNodeChange> Report(const NodeComputeReport& report, TimePoint now);
  // The node left the job (lost, stepped out, or a new round without it): its figures go.
  void Forget(const std::string& node_id);
  // A new round: steps of different worlds do not compare; every streak starts again.
  void Clear() { nodes_.clear(); }

  std::optional<NodeComputeStanding> StandingOf(const std::string& node_id) const;
  std::vector<std::string> SlowNodes() const;
  // The job's median node figure among fresh reports at `now` (nullopt: too few).
  std::optional<double> MedianMs(TimePoint now) const;

 private:
  struct Node {
    double compute_ms = 0;
    TimePoint at{};
    double ratio = 0;
    int above = 0;  // reports in a row above the margin
    int below = 0;  // reports in a row within it
    bool slow = false;
  };

  const SlowNodeOptions options_;
  std::map<std::string, Node> nodes_;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_STRAGGLERS_SLOW_NODE_JUDGE_H_
