#include "launcher/causes/death_cause.h"

#include <csignal>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "launcher/causes/kernel_message.h"
#include "rendezvous/api/run_status.h"

namespace ddprun::launcher {
namespace {

// Signals a process gets from its own execution (a fault, abort()), not from another process.
bool IsSynchronousSignal(int signal) {
  switch (signal) {
    case SIGSEGV:
    case SIGBUS:
    case SIGFPE:
    case SIGILL:
    case SIGABRT:
    case SIGTRAP:
    case SIGSYS:
      return true;
    default:
      return false;
  }
}

bool InLifetime(const KmsgRecord& r, const WorkerDeath& d) {
  return r.timestamp_us >= d.started_us - kDeathRecordSlackUs &&
         r.timestamp_us <= d.died_us + kDeathRecordSlackUs;
}

std::string OomText(const OomKill& kill, const std::optional<MemcgUsage>& usage) {
  std::string text = "killed by the OOM killer: ";
  if (kill.scope == OomKill::Scope::kMemoryCgroup && usage.has_value()) {
    absl::StrAppend(&text, "memory cgroup limit ", FormatKilobytes(usage->limit_kb), " reached");
  } else if (kill.scope == OomKill::Scope::kMemoryCgroup) {
    absl::StrAppend(&text, "memory cgroup limit reached");
  } else if (kill.scope == OomKill::Scope::kSystem) {
    absl::StrAppend(&text, "the machine ran out of memory");
  } else {
    absl::StrAppend(&text, "out of memory");
  }
  if (kill.anon_rss_kb >= 0) {
    absl::StrAppend(&text, " (anon-rss ", FormatKilobytes(kill.anon_rss_kb), ")");
  }
  return text;
}

}  // namespace

const char* DeathCauseLabel(DeathCauseKind kind) {
  switch (kind) {
    case DeathCauseKind::kNone:
      return rendezvous::kFailureExit;
    case DeathCauseKind::kOomKill:
      return rendezvous::kFailureOomKill;
    case DeathCauseKind::kFault:
      return rendezvous::kFailureFault;
    case DeathCauseKind::kGpuError:
      return rendezvous::kFailureGpuError;
    case DeathCauseKind::kByAgent:
      return rendezvous::kFailureStoppedByDdprun;
    case DeathCauseKind::kFromOutside:
      return rendezvous::kFailureExternalSignal;
    case DeathCauseKind::kUnknown:
      return rendezvous::kFailureUnknown;
  }
  return rendezvous::kFailureUnknown;
}

std::string FormatKilobytes(int64_t kb) {
  if (kb >= 1024 * 1024) return absl::StrFormat("%.1f GiB", kb / (1024.0 * 1024.0));
  if (kb >= 1024) return absl::StrFormat("%.1f MiB", kb / 1024.0);
  return absl::StrCat(kb, " kB");
}

DeathCause ExplainDeath(const WorkerDeath& death, const KernelEvidence& evidence) {
  if (death.signal == 0) return {};
  if (death.killed_by_agent) return {DeathCauseKind::kByAgent, "stopped by ddprun"};
  if (!evidence.readable) {
    return {DeathCauseKind::kUnknown, absl::StrCat("cause unknown: ", evidence.unreadable_because)};
  }
  // The memory cgroup's usage is printed just before its victim: the latest one seen wins.
  std::optional<MemcgUsage> usage;
  for (const KmsgRecord& r : evidence.records) {
    if (!InLifetime(r, death)) continue;
    const std::optional<KernelMessage> m = ParseKernelMessage(r.text);
    if (!m.has_value()) continue;
    if (const auto* u = std::get_if<MemcgUsage>(&*m)) usage = *u;
    if (const auto* kill = std::get_if<OomKill>(&*m); kill != nullptr && kill->pid == death.pid) {
      return {DeathCauseKind::kOomKill, OomText(*kill, usage)};
    }
    if (const auto* f = std::get_if<Fault>(&*m); f != nullptr && f->pid == death.pid) {
      return {DeathCauseKind::kFault,
              absl::StrCat(f->what, f->library.empty() ? "" : " in ", f->library)};
    }
    if (const auto* x = std::get_if<GpuXid>(&*m); x != nullptr && x->pid == death.pid) {
      const absl::string_view meaning = XidMeaning(x->xid);
      return {DeathCauseKind::kGpuError,
              absl::StrCat("GPU error: Xid ", x->xid, " on PCI:", x->pci, " (",
                           meaning.empty() ? x->detail : std::string(meaning), ")")};
    }
  }
  if (evidence.lost_records) {
    return {DeathCauseKind::kUnknown,
            "cause unknown: kernel log records were overwritten before they could be read"};
  }
  if (IsSynchronousSignal(death.signal)) {
    // A fault or abort the worker raised itself: the kernel logs faults only of processes with
    // no handler of their own, and never an abort().
    return {DeathCauseKind::kUnknown,
            "the kernel logged no fault for it (raised by the worker itself, an abort(), or a "
            "handler of its own such as Python's faulthandler re-raised it)"};
  }
  return {DeathCauseKind::kFromOutside,
          "sent from outside ddprun (no kernel record: not the OOM killer, no fault; Slurm, an "
          "administrator or another process sent it)"};
}

}  // namespace ddprun::launcher
