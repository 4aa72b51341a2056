// The one vocabulary of causes: why a worker died, why the rendezvous ended a round, and why a
// cycle ended as one agent lived it. The agent, the server, the protocol (proto/rendezvous.proto
// `Cause`, the same numbers; rendezvous/grpc/proto_convert.h translates), the server's metrics,
// events.jsonl and the run summary all use this enum, and its labels (CauseLabel) are the only
// names it has. The human-readable reason that travels beside a cause is for people and logs:
// no decision and no label is ever read back from it.
//
// Pure values and functions; thread-safe.
#ifndef DDPRUN_RENDEZVOUS_API_CAUSE_H_
#define DDPRUN_RENDEZVOUS_API_CAUSE_H_

#include <cstddef>
#include <optional>

#include "absl/strings/string_view.h"

namespace ddprun::rendezvous {

enum class Cause {
  kUnspecified = 0,  // "other": not said (a peer from before this enum), or not known
  // Why a worker died, from the kernel's evidence (WorkerFailure::cause_kind,
  // launcher/causes/death_cause.h; the server's worker failures metric).
  kExit = 1,             // "exit": it exited non-zero
  kOomKill = 2,          // "oom_kill": the kernel's OOM killer
  kFault = 3,            // "fault": segfault, trap, bus error
  kGpuError = 4,         // "gpu_error": an NVIDIA Xid naming it
  kStoppedByDdprun = 5,  // "stopped_by_ddprun"
  kExternalSignal = 6,   // "external_signal": Slurm, an administrator
  kUnknownSignal = 7,    // "unknown": a signal, and no evidence to read
  // "hang": a worker gave no sign of life for too long. The same word for the worker's death,
  // the server's restart and the agent's timeline.
  kHang = 8,
  // Why the rendezvous ended a round (Restart.cause; the server's restarts metric).
  kWorkerFailure = 9,    // "worker_failure": a worker failed somewhere
  kNodeLostStream = 10,  // "node_lost_stream": its stream broke
  kNodeLostLease = 11,   // "node_lost_lease": silent past its lease, or given up (fenced)
  kNodeJoined = 12,      // "node_joined": a scale-up
  kNodeLeft = 13,        // "node_left"
  kServerRestart = 14,   // "server_restart": a restarted server's re-registrations disagreed
  // Why a cycle ended, as one agent saw it (events.jsonl failure_detected; the summary).
  kWorkerExit = 15,     // "worker_exit": a worker of this node exited non-zero
  kWorkerSignal = 16,   // "worker_signal": a worker of this node was killed by a signal
  kStopSignal = 17,     // "stop_signal": ddprun itself was told to stop
  kRemoteFailure = 18,  // "remote_failure": a kWorkerFailure on another node
  // Why the rendezvous ended a round, continued: its liveness heartbeats stopped (issue 40,
  // rendezvous/liveness/): found by the failure detector in a few hundred ms, not the lease.
  kNodeLostSilence = 19,  // "node_lost_silence"
  // Why the rendezvous ended a round, continued: a member persistently slower than the run's
  // median node was evicted for a spare (--evict-slow, issue 41, rendezvous/stragglers/).
  kNodeSlow = 20,  // "node_slow"
};
inline constexpr int kLastCause = 20;

inline const char* CauseLabel(Cause cause) {
  switch (cause) {
    case Cause::kUnspecified:
      return "other";
    case Cause::kExit:
      return "exit";
    case Cause::kOomKill:
      return "oom_kill";
    case Cause::kFault:
      return "fault";
    case Cause::kGpuError:
      return "gpu_error";
    case Cause::kStoppedByDdprun:
      return "stopped_by_ddprun";
    case Cause::kExternalSignal:
      return "external_signal";
    case Cause::kUnknownSignal:
      return "unknown";
    case Cause::kHang:
      return "hang";
    case Cause::kWorkerFailure:
      return "worker_failure";
    case Cause::kNodeLostStream:
      return "node_lost_stream";
    case Cause::kNodeLostLease:
      return "node_lost_lease";
    case Cause::kNodeJoined:
      return "node_joined";
    case Cause::kNodeLeft:
      return "node_left";
    case Cause::kServerRestart:
      return "server_restart";
    case Cause::kWorkerExit:
      return "worker_exit";
    case Cause::kWorkerSignal:
      return "worker_signal";
    case Cause::kStopSignal:
      return "stop_signal";
    case Cause::kRemoteFailure:
      return "remote_failure";
    case Cause::kNodeLostSilence:
      return "node_lost_silence";
    case Cause::kNodeSlow:
      return "node_slow";
  }
  return "other";
}

// The cause numbered `number` on the wire; nullopt for a number this build does not know (a
// newer peer's). 0 is kUnspecified.
inline std::optional<Cause> CauseFromNumber(int number) {
  if (number < 0 || number > kLastCause) return std::nullopt;
  return static_cast<Cause>(number);
}

// The cause whose label is `label` ("other" is kUnspecified); nullopt for any other string.
// For labels other programs wrote (an agent's events.jsonl step, an old agent's cause_kind).
inline std::optional<Cause> CauseFromLabel(absl::string_view label) {
  for (int n = 0; n <= kLastCause; ++n) {
    if (label == CauseLabel(static_cast<Cause>(n))) return static_cast<Cause>(n);
  }
  return std::nullopt;
}

// The subsets each metric's label set is made of, in the order /metrics lists them.
// Why workers died (ddprun_rdzv_worker_failures_total{cause}).
inline constexpr Cause kDeathCauses[] = {Cause::kExit,           Cause::kHang,
                                         Cause::kOomKill,        Cause::kFault,
                                         Cause::kGpuError,       Cause::kStoppedByDdprun,
                                         Cause::kExternalSignal, Cause::kUnknownSignal};
// Why the server restarted rounds (ddprun_rdzv_restarts_total{cause}).
inline constexpr Cause kRestartCauses[] = {
    Cause::kWorkerFailure,   Cause::kHang,     Cause::kNodeLostStream, Cause::kNodeLostLease,
    Cause::kNodeLostSilence, Cause::kNodeSlow, Cause::kNodeJoined,     Cause::kNodeLeft,
    Cause::kServerRestart};
// What agents recover from (ddprun_rdzv_recoveries_total{cause}): their timeline's causes, less
// stop_signal (never recovered from); a recovery after a server_restart counts as "other", as it
// did when agents could not name that cause.
inline constexpr Cause kRecoveryCauses[] = {
    Cause::kWorkerExit,      Cause::kWorkerSignal,   Cause::kHang,
    Cause::kRemoteFailure,   Cause::kNodeLostStream, Cause::kNodeLostLease,
    Cause::kNodeLostSilence, Cause::kNodeSlow,       Cause::kNodeJoined,
    Cause::kNodeLeft};

template <size_t N>
bool CauseIsIn(Cause cause, const Cause (&set)[N]) {
  for (Cause c : set) {
    if (c == cause) return true;
  }
  return false;
}

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_API_CAUSE_H_
