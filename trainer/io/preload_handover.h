// ddprun --preload=native, the worker's side (docs/design.md §6a): a spare ddp-train is started
// ahead of a worker start with the worker's command line and the node-level environment plus
// DDPRUN_PRELOAD_FD, a SOCK_SEQPACKET socket to ddprun. It warms up (LibTorch is loaded by
// then; the warm-up reads the data set), says "ready", and waits. A start hands it the start's
// whole environment and its stdout and stderr; from then on it is the worker, exactly as if it
// had been started cold with them.
//
// The wire format is the Python hook's (launcher/preload/preload_hook.py), so one ddprun side
// serves both: to ddprun one message "ready", or "failed\0WHAT\0ERROR"; from ddprun
// "start\0" then KEY=VALUE\0 for every variable, with the stdout and stderr descriptors
// attached (SCM_RIGHTS). End of file, or anything else: ddprun is gone, and the spare exits 0
// without ever running as a worker with a spare's environment.
#ifndef DDPRUN_TRAINER_IO_PRELOAD_HANDOVER_H_
#define DDPRUN_TRAINER_IO_PRELOAD_HANDOVER_H_

#include <functional>

#include "absl/status/status.h"
#include "common/env_variables.h"

namespace ddprun::trainer {

inline constexpr const char* kPreloadFdEnv = kPreloadFdVariable.name;
inline constexpr const char* kPreloadIdleEnv = kPreloadIdleVariable.name;

// Returns at once when this process is no spare (DDPRUN_PRELOAD_FD unset). Otherwise runs
// `warm_up` on a thread of its own (at SCHED_IDLE when DDPRUN_PRELOAD_IDLE=1: a spare made
// while workers train must not slow them; ddprun raises it back before a hand-over), reports
// it, and returns once the hand-over has made this process the worker (`warm_up` finished,
// whatever it returned: a failed warm-up only means the worker does that work again, and its
// error is then the worker's). Exits the process (0) when ddprun goes away first.
// A DDPRUN_PRELOAD_FD that is not an open socket: an error, before anything else happens.
absl::Status BecomeWorkerIfSpare(const std::function<absl::Status()>& warm_up);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_PRELOAD_HANDOVER_H_
