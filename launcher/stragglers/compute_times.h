// ComputeTimes: each local worker's compute time per step (how long it computed before it
// waited on the step's collective, DDPRUN_PROGRESS_FILE's "compute_ms"), gathered between two
// reports of the agent to the rendezvous, which judges the node against the job (issue 41,
// rendezvous/stragglers/). A report carries each rank's median over the window: one slow step
// (a page fault, a checkpoint) moves nothing.
//
// Pure; not thread-safe (the agent's loop).
#ifndef DDPRUN_LAUNCHER_STRAGGLERS_COMPUTE_TIMES_H_
#define DDPRUN_LAUNCHER_STRAGGLERS_COMPUTE_TIMES_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace ddprun::launcher {

// One local rank's window.
struct LocalCompute {
  int local_rank = 0;
  double median_ms = 0;
  int64_t steps = 0;
};

class ComputeTimes {
 public:
  // Times kept per rank and window: a worker reporting 10,000 steps in one window is far
  // beyond any real step rate; the window's first ones stand for it.
  static constexpr size_t kMaxPerWindow = 10000;

  // A step's compute time; negative or non-finite ones are ignored.
  void Add(int local_rank, double compute_ms);
  // Each rank's median since the last Take (ranks without a step left out), by local rank;
  // starts the next window.
  std::vector<LocalCompute> Take();
  // A new group or round: the times of the last one say nothing of the next.
  void Clear() { times_.clear(); }

 private:
  std::map<int, std::vector<double>> times_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_STRAGGLERS_COMPUTE_TIMES_H_
