// The preflight's compute probe (issue 41, docs/design.md §3d): a fixed single-threaded float
// GEMM, timed by the thread's CPU time. Every node runs the same one, so the figure compares the
// cores of a job (their clock, a thermal or power cap, a slower model), not with any other
// machine's. CPU time, not wall time: a core shared with other work (several test "hosts" on one
// machine, a noisy neighbour) must not make its node look slow; the workers' own compute times
// during training find a node whose share of the CPU is short (rendezvous/stragglers/). Blocks
// its thread for at least kGemmBlocks x kGemmBlockTime.
#ifndef DDPRUN_LAUNCHER_PREFLIGHT_COMPUTE_PROBE_H_
#define DDPRUN_LAUNCHER_PREFLIGHT_COMPUTE_PROBE_H_

#include <chrono>

namespace ddprun::launcher {

// Each block runs GEMMs back to back for at least this much CPU time.
inline constexpr std::chrono::milliseconds kGemmBlockTime{100};
// The best block counts: caches a context switch emptied do not name a node.
inline constexpr int kGemmBlocks = 3;

// GFLOP/s of the best block.
double CpuGemmGflops();

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_PREFLIGHT_COMPUTE_PROBE_H_
