// Why a worker died, from the kernel's records around its death (kernel_log.h): the rules that
// turn "signal 9" into "killed by the OOM killer: memory cgroup limit 64.0 GiB reached
// (anon-rss 63.8 GiB)", and that refuse to guess when the evidence is not there. Pure.
//
// Matching: a record counts only if the kernel wrote it while the worker lived (from its start
// to its death, with kSlack either side: the kernel's clock and CLOCK_MONOTONIC drift a little),
// it names the worker's pid, and the process name it prints (when it prints one) is the
// worker's name at death (when the agent could read it). A pid cannot be reused before its
// parent reaps it, so within that window the pid is the worker's; the name rules out the slack
// after the death (the pid reused at once) and records of a pid namespace other than the
// agent's, whose pids may carry the same numbers (docs/research/failure-causes.md).
#ifndef DDPRUN_LAUNCHER_CAUSES_DEATH_CAUSE_H_
#define DDPRUN_LAUNCHER_CAUSES_DEATH_CAUSE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/causes/kmsg_record.h"
#include "rendezvous/api/cause.h"

namespace ddprun::launcher {

inline constexpr int64_t kDeathRecordSlackUs = 2'000'000;

// A memory cgroup's own count of OOM kills over a worker's life (memory_cgroup.h): evidence
// of an OOM kill where the kernel log has none. `kills_before`: the count when the agent first
// saw the worker in that cgroup; `kills_after`: at its death.
struct CgroupOomCount {
  std::string path;
  int64_t kills_before = 0;
  int64_t kills_after = 0;
  std::optional<int64_t> limit_bytes;  // unset: no limit, or not readable
};

// A worker's death as the agent saw it. Times are CLOCK_MONOTONIC microseconds.
struct WorkerDeath {
  int pid = 0;
  int signal = 0;  // 0: it exited (exit codes need no kernel evidence)
  int64_t started_us = 0;
  int64_t died_us = 0;
  bool killed_by_agent = false;          // the agent itself stopped the group (a restart, a signal)
  std::string comm;                      // its name at death (WorkerExit::comm); empty: unknown
  std::optional<CgroupOomCount> cgroup;  // its memory cgroup's OOM kills, when watched
};

enum class DeathCauseKind {
  kNone,         // it exited, or nothing to say
  kOomKill,      // the kernel's OOM killer chose it
  kFault,        // segfault or trap, named by the kernel
  kGpuError,     // an NVIDIA Xid naming its pid
  kByAgent,      // ddprun stopped it
  kFromOutside,  // a signal with no kernel record: someone else sent it (Slurm, an admin)
  kUnknown,      // the evidence could not be read
};

struct DeathCause {
  DeathCauseKind kind = DeathCauseKind::kNone;
  // One line that follows the signal ("signal SIGKILL (9): killed by the OOM killer: ..."),
  // without the rank, pid or signal.
  std::string text;
};

// The kind as a cause of the one vocabulary (rendezvous/api/cause.h kDeathCauses: exit,
// oom_kill, fault, gpu_error, stopped_by_ddprun, external_signal, unknown), and its label.
rendezvous::Cause DeathCauseOf(DeathCauseKind kind);
const char* DeathCauseLabel(DeathCauseKind kind);

// Whether a death may be the program's own deterministic failure, one the crash-loop breaker
// (rendezvous/api/crash_loop.h) may count: not a signal from outside (an admin's or a
// scheduler's kill -9), not the OOM killer (the node's memory, not the program, decided), and
// not a SIGKILL whose cause could not be read (nothing in a program sends itself SIGKILL as a
// matter of course). An exit, a fault, an abort, a GPU error may.
bool MayRepeatByItself(DeathCauseKind kind, int signal);

// Where the evidence came from: the records read, or why there are none.
struct KernelEvidence {
  bool readable = false;
  std::string unreadable_because;  // with !readable: "kernel log /dev/kmsg not readable: ..."
  bool lost_records = false;       // the ring overwrote records before they were read
  std::vector<KmsgRecord> records;
};

DeathCause ExplainDeath(const WorkerDeath& death, const KernelEvidence& evidence);

// 1536 -> "1.5 MiB"; 67108864 -> "64.0 GiB"; below a MiB in kB.
std::string FormatKilobytes(int64_t kb);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CAUSES_DEATH_CAUSE_H_
