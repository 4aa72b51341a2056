#include "launcher/causes/death_cause.h"

#include <csignal>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "launcher/causes/kernel_message.h"

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

// The kernel prints at most TASK_COMM_LEN - 1 = 15 bytes of a name, as /proc/PID/comm holds.
constexpr size_t kCommBytes = 15;

// A record's process name against the worker's at death; either unknown matches.
bool SameName(absl::string_view record, absl::string_view worker) {
  if (record.empty() || worker.empty()) return true;
  return record.substr(0, kCommBytes) == worker.substr(0, kCommBytes);
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

rendezvous::Cause DeathCauseOf(DeathCauseKind kind) {
  using rendezvous::Cause;
  switch (kind) {
    case DeathCauseKind::kNone:
      return Cause::kExit;
    case DeathCauseKind::kOomKill:
      return Cause::kOomKill;
    case DeathCauseKind::kFault:
      return Cause::kFault;
    case DeathCauseKind::kGpuError:
      return Cause::kGpuError;
    case DeathCauseKind::kByAgent:
      return Cause::kStoppedByDdprun;
    case DeathCauseKind::kFromOutside:
      return Cause::kExternalSignal;
    case DeathCauseKind::kUnknown:
      return Cause::kUnknownSignal;
  }
  return Cause::kUnknownSignal;
}

const char* DeathCauseLabel(DeathCauseKind kind) {
  return rendezvous::CauseLabel(DeathCauseOf(kind));
}

bool MayRepeatByItself(DeathCauseKind kind, int signal) {
  switch (kind) {
    case DeathCauseKind::kFromOutside:
    case DeathCauseKind::kOomKill:
      return false;
    case DeathCauseKind::kUnknown:
      return signal != SIGKILL;
    default:
      return true;
  }
}

std::string FormatKilobytes(int64_t kb) {
  if (kb >= 1024 * 1024) return absl::StrFormat("%.1f GiB", kb / (1024.0 * 1024.0));
  if (kb >= 1024) return absl::StrFormat("%.1f MiB", kb / 1024.0);
  return absl::StrCat(kb, " kB");
}

namespace {

// Killed by SIGKILL while its memory cgroup counted an OOM kill: the cgroup's counter is the
// evidence (another process of the same cgroup may have been a victim too: the text says what
// was counted, not more).
std::optional<DeathCause> CgroupOomKill(const WorkerDeath& death,
                                        const std::string& why_no_record) {
  if (death.signal != SIGKILL || !death.cgroup.has_value()) return std::nullopt;
  const CgroupOomCount& c = *death.cgroup;
  const int64_t kills = c.kills_after - c.kills_before;
  if (kills <= 0) return std::nullopt;
  std::string text = absl::StrCat("killed by the OOM killer: its memory cgroup ", c.path);
  if (c.limit_bytes.has_value()) {
    absl::StrAppend(&text, " (limit ", FormatKilobytes(*c.limit_bytes / 1024), ")");
  }
  absl::StrAppend(&text, " counted ", kills, kills == 1 ? " OOM kill" : " OOM kills",
                  " while it lived (", why_no_record, ")");
  return DeathCause{DeathCauseKind::kOomKill, std::move(text)};
}

}  // namespace

DeathCause ExplainDeath(const WorkerDeath& death, const KernelEvidence& evidence) {
  if (death.signal == 0) return {};
  if (death.killed_by_agent) return {DeathCauseKind::kByAgent, "stopped by ddprun"};
  if (!evidence.readable) {
    if (auto oom = CgroupOomKill(death, evidence.unreadable_because)) return *oom;
    return {DeathCauseKind::kUnknown, absl::StrCat("cause unknown: ", evidence.unreadable_because)};
  }
  // The memory cgroup's usage is printed just before its victim: the latest one seen wins.
  std::optional<MemcgUsage> usage;
  for (const KmsgRecord& r : evidence.records) {
    if (!InLifetime(r, death)) continue;
    const std::optional<KernelMessage> m = ParseKernelMessage(r.text);
    if (!m.has_value()) continue;
    if (const auto* u = std::get_if<MemcgUsage>(&*m)) usage = *u;
    if (const auto* kill = std::get_if<OomKill>(&*m);
        kill != nullptr && kill->pid == death.pid && SameName(kill->comm, death.comm)) {
      return {DeathCauseKind::kOomKill, OomText(*kill, usage)};
    }
    if (const auto* f = std::get_if<Fault>(&*m);
        f != nullptr && f->pid == death.pid && SameName(f->comm, death.comm)) {
      return {DeathCauseKind::kFault,
              absl::StrCat(f->what, f->library.empty() ? "" : " in ", f->library)};
    }
    if (const auto* x = std::get_if<GpuXid>(&*m);
        x != nullptr && x->pid == death.pid && SameName(x->process_name, death.comm)) {
      const absl::string_view meaning = XidMeaning(x->xid);
      return {DeathCauseKind::kGpuError,
              absl::StrCat("GPU error: Xid ", x->xid, " on PCI:", x->pci, " (",
                           meaning.empty() ? x->detail : std::string(meaning), ")")};
    }
  }
  if (auto oom = CgroupOomKill(death, "the kernel log has no record of it")) return *oom;
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
