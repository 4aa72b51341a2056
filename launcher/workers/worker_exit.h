// How one worker ended: what the worker group reports, the agent decides on and the failure
// report describes. A plain value.
#ifndef DDPRUN_LAUNCHER_WORKERS_WORKER_EXIT_H_
#define DDPRUN_LAUNCHER_WORKERS_WORKER_EXIT_H_

#include <string>

#include "common/clock.h"
#include "launcher/causes/death_cause.h"

namespace ddprun::launcher {

// Why a worker is known never to have begun the start it was given: its exit 0 is then no
// success but a failure (ok() is false), restarted as any other (docs/design.md §6a, §6b).
enum class NeverStarted {
  kNone,            // it began, or nothing tells otherwise: a cold start gives no sign
  kHandOverUnread,  // a --preload spare that ended without reading the start handed to it
  kNoHello,         // in-process recovery: a replacement that ended before its hello
};

struct WorkerExit {
  int local_rank = 0;
  int rank = 0;
  int pid = 0;
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // the signal that killed it, or 0
  std::string hang;   // non-empty: it did not exit, it hung ("no progress for 3.0 s", ...)
  TimePoint when{};
  TimePoint started{};              // when it was spawned (its kernel records come after)
  bool signalled_by_agent = false;  // the group had sent it a signal (a stop, a kill, stacks)
  // Its name at death (/proc/PID/comm of the zombie, read before the reap; a worker that exec'd
  // another program has that program's name); empty when it could not be read.
  std::string comm;
  // Why it died, from the kernel's evidence (death_cause.h); the agent fills it in for a
  // signal death. kNone for an exit.
  DeathCause cause;
  NeverStarted never_started = NeverStarted::kNone;
  bool ok() const {
    return signal == 0 && exit_code == 0 && hang.empty() && never_started == NeverStarted::kNone;
  }
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_WORKERS_WORKER_EXIT_H_
