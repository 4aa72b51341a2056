// One preflight on this node (issue 41, docs/design.md §3d): the compute probe, then the pair
// probes to the targets the server chose, into the report the agent sends. Runs on a thread of
// its own (PreflightRun), so that the agent's loop goes on while it measures: about a second.
#ifndef DDPRUN_LAUNCHER_PREFLIGHT_PREFLIGHT_RUNNER_H_
#define DDPRUN_LAUNCHER_PREFLIGHT_PREFLIGHT_RUNNER_H_

#include <chrono>
#include <functional>
#include <optional>
#include <thread>

#include "rendezvous/api/preflight.h"

namespace ddprun::launcher {

// What one node's measurement may take in all, so that its report reaches the server within
// its deadline (PreflightSettings::deadline, 10 s) on a slow or lossy network too: a probe
// still running then ends with an error, and the figures measured so far are reported.
// (A probe starts only within it; its connect may take kIoTimeout more: 9 s at the worst.)
inline constexpr std::chrono::seconds kMeasureBudget{6};

// Measures now, on the calling thread.
rendezvous::PreflightReport MeasurePreflight(const rendezvous::PreflightRequest& request,
                                             std::optional<double> health_check_s);

// MeasurePreflight on a thread of its own; `done` gets the report there. The destructor waits
// for it (a second or so; a peer that stops answering, kIoTimeout more).
class PreflightRun {
 public:
  PreflightRun(rendezvous::PreflightRequest request, std::optional<double> health_check_s,
               std::function<void(const rendezvous::PreflightReport&)> done);
  ~PreflightRun();
  PreflightRun(const PreflightRun&) = delete;
  PreflightRun& operator=(const PreflightRun&) = delete;

 private:
  std::thread thread_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_PREFLIGHT_PREFLIGHT_RUNNER_H_
