// The initiator's end of one preflight pair probe (probe_wire.h): connects to a peer's
// ProbeListener, measures the round trip and both directions' throughput, and returns them as the
// report carries them (rendezvous::PairProbe). Blocking: at most a few seconds.
#ifndef DDPRUN_LAUNCHER_PREFLIGHT_PAIR_PROBE_H_
#define DDPRUN_LAUNCHER_PREFLIGHT_PAIR_PROBE_H_

#include "common/clock.h"
#include "rendezvous/api/preflight.h"

namespace ddprun::launcher {

// Never fails: a probe that could not be made, or not by `deadline` (the node's budget), says
// why in `error`, with no figures.
rendezvous::PairProbe ProbePeer(const rendezvous::PreflightPeer& peer, Duration probe_time,
                                std::chrono::steady_clock::time_point deadline);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_PREFLIGHT_PAIR_PROBE_H_
