#include "launcher/preflight/preflight_runner.h"

#include <chrono>
#include <utility>

#include "launcher/preflight/compute_probe.h"
#include "launcher/preflight/pair_probe.h"

namespace ddprun::launcher {

rendezvous::PreflightReport MeasurePreflight(const rendezvous::PreflightRequest& request,
                                             std::optional<double> health_check_s) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + kMeasureBudget;
  rendezvous::PreflightReport report;
  report.generation = request.generation;
  report.health_check_s = health_check_s;
  report.cpu_gflops = CpuGemmGflops();
  for (const rendezvous::PreflightPeer& peer : request.targets) {
    report.pairs.push_back(ProbePeer(peer, request.probe_time, deadline));
  }
  report.elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

PreflightRun::PreflightRun(rendezvous::PreflightRequest request,
                           std::optional<double> health_check_s,
                           std::function<void(const rendezvous::PreflightReport&)> done)
    : thread_([request = std::move(request), health_check_s, done = std::move(done)] {
        done(MeasurePreflight(request, health_check_s));
      }) {}

PreflightRun::~PreflightRun() { thread_.join(); }

}  // namespace ddprun::launcher
