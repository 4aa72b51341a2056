// One preflight on this node (issue 41, docs/design.md §3d): the compute probe, then the pair
// probes to the targets the server chose, into the report the agent sends. Runs on a thread of
// its own (PreflightRun), so that the agent's loop goes on while it measures: about a second.
#ifndef DDPRUN_LAUNCHER_PREFLIGHT_PREFLIGHT_RUNNER_H_
#define DDPRUN_LAUNCHER_PREFLIGHT_PREFLIGHT_RUNNER_H_

#include <functional>
#include <optional>
#include <thread>

#include "rendezvous/api/preflight.h"

namespace ddprun::launcher {

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
