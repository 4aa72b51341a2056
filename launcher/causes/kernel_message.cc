#include "launcher/causes/kernel_message.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ddprun::launcher {
namespace {

// "1234kB" -> 1234; -1 when not a number of kB.
int64_t Kilobytes(absl::string_view v) {
  int64_t out = -1;
  if (!absl::ConsumeSuffix(&v, "kB") || !absl::SimpleAtoi(v, &out)) return -1;
  return out;
}

std::optional<KernelMessage> ParseOomKill(absl::string_view text) {
  constexpr absl::string_view kKilled = "Killed process ";
  const size_t at = text.find(kKilled);
  if (at == absl::string_view::npos) return std::nullopt;
  OomKill k;
  const absl::string_view prefix = text.substr(0, at);
  k.scope = absl::StartsWith(prefix, "Memory cgroup out of memory") ? OomKill::Scope::kMemoryCgroup
            : absl::StartsWith(prefix, "Out of memory")             ? OomKill::Scope::kSystem
                                                                    : OomKill::Scope::kUnknown;
  absl::string_view rest = text.substr(at + kKilled.size());
  const size_t open = rest.find(" (");
  if (open == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, open), &k.pid)) {
    return std::nullopt;
  }
  rest = rest.substr(open + 2);
  // The name may itself hold ") ": it ends at the last ')' before the fields (or the line).
  size_t close = rest.rfind(") total-vm:");
  if (close == absl::string_view::npos) close = rest.rfind(')');
  if (close == absl::string_view::npos) return std::nullopt;
  k.comm = std::string(rest.substr(0, close));
  for (absl::string_view field : absl::StrSplit(rest.substr(close + 1), ' ', absl::SkipEmpty())) {
    absl::ConsumeSuffix(&field, ",");
    const size_t colon = field.find(':');
    if (colon == absl::string_view::npos) continue;
    const absl::string_view key = field.substr(0, colon);
    const int64_t kb = Kilobytes(field.substr(colon + 1));
    if (key == "total-vm") k.total_vm_kb = kb;
    if (key == "anon-rss") k.anon_rss_kb = kb;
    if (key == "file-rss") k.file_rss_kb = kb;
    if (key == "shmem-rss") k.shmem_rss_kb = kb;
  }
  return k;
}

std::optional<KernelMessage> ParseOomSummary(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, "oom-kill:")) return std::nullopt;
  OomSummary s;
  // The task name may hold commas: take task, pid and uid from the end.
  const size_t uid = text.rfind(",uid=");
  const size_t pid = text.rfind(",pid=", uid);
  const size_t task = text.rfind(",task=", pid);
  if (uid == absl::string_view::npos || pid == absl::string_view::npos ||
      task == absl::string_view::npos ||
      !absl::SimpleAtoi(text.substr(pid + 5, uid - pid - 5), &s.pid)) {
    return std::nullopt;
  }
  s.task = std::string(text.substr(task + 6, pid - task - 6));
  for (absl::string_view field : absl::StrSplit(text.substr(0, task), ',')) {
    if (absl::ConsumePrefix(&field, "constraint=")) s.constraint = std::string(field);
    if (absl::ConsumePrefix(&field, "oom_memcg=")) s.oom_memcg = std::string(field);
    if (absl::ConsumePrefix(&field, "task_memcg=")) s.task_memcg = std::string(field);
  }
  return s;
}

std::optional<KernelMessage> ParseMemcgUsage(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, "memory: usage ")) return std::nullopt;
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ", ");
  if (parts.size() != 3) return std::nullopt;
  MemcgUsage u;
  u.usage_kb = Kilobytes(parts[0]);
  absl::string_view limit = parts[1];
  absl::string_view failcnt = parts[2];
  if (!absl::ConsumePrefix(&limit, "limit ") || !absl::ConsumePrefix(&failcnt, "failcnt ") ||
      !absl::SimpleAtoi(failcnt, &u.failcnt)) {
    return std::nullopt;
  }
  u.limit_kb = Kilobytes(limit);
  if (u.usage_kb < 0 || u.limit_kb < 0) return std::nullopt;
  return u;
}

// "COMM[PID]" at the end of `head` (the name may hold '[').
bool TakeCommAndPid(absl::string_view head, Fault* f) {
  if (!absl::ConsumeSuffix(&head, "]")) return false;
  const size_t open = head.rfind('[');
  if (open == absl::string_view::npos || !absl::SimpleAtoi(head.substr(open + 1), &f->pid)) {
    return false;
  }
  f->comm = std::string(head.substr(0, open));
  return true;
}

// " in libc.so.6[7b49bd028000+188000]" somewhere after the fault: the file the instruction
// pointer was in.
std::string LibraryOf(absl::string_view tail) {
  const size_t in = tail.rfind(" in ");
  if (in == absl::string_view::npos) return "";
  absl::string_view lib = tail.substr(in + 4);
  const size_t bracket = lib.rfind('[');
  if (bracket == absl::string_view::npos || lib.find('+', bracket) == absl::string_view::npos) {
    return "";
  }
  return std::string(lib.substr(0, bracket));
}

std::optional<KernelMessage> ParseFault(absl::string_view text) {
  Fault f;
  if (absl::ConsumePrefix(&text, "traps: ")) {
    // "traps: python3[77] general protection fault ip:7f.. sp:7f.. error:0 in libc.so.6[..]"
    const size_t space = text.find("] ");
    const size_t ip = text.find(" ip:");
    if (space == absl::string_view::npos || ip == absl::string_view::npos || ip < space ||
        !TakeCommAndPid(text.substr(0, space + 1), &f)) {
      return std::nullopt;
    }
    f.what = std::string(text.substr(space + 2, ip - space - 2));
    f.library = LibraryOf(text.substr(ip));
    return f;
  }
  const size_t at = text.find(": segfault at ");
  if (at == absl::string_view::npos || !TakeCommAndPid(text.substr(0, at), &f)) {
    return std::nullopt;
  }
  absl::string_view rest = text.substr(at + 2);
  const size_t ip = rest.find(" ip ");
  f.what = std::string(rest.substr(0, ip));
  f.library = ip == absl::string_view::npos ? "" : LibraryOf(rest.substr(ip));
  return f;
}

std::optional<KernelMessage> ParseXid(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, "NVRM: Xid (PCI:")) return std::nullopt;
  const size_t close = text.find("): ");
  if (close == absl::string_view::npos) return std::nullopt;
  GpuXid x;
  x.pci = std::string(text.substr(0, close));
  absl::string_view rest = text.substr(close + 3);
  const size_t comma = rest.find(',');
  if (!absl::SimpleAtoi(rest.substr(0, comma), &x.xid)) return std::nullopt;
  rest = comma == absl::string_view::npos
             ? ""
             : absl::StripLeadingAsciiWhitespace(rest.substr(comma + 1));
  // Optional "pid=P, " and "name=N, " in that order; a value of '<unknown>' or 'N/A' says nothing.
  for (const absl::string_view key : {"pid=", "name="}) {
    if (!absl::StartsWith(rest, key)) continue;
    const size_t end = rest.find(", ");
    const absl::string_view value =
        rest.substr(key.size(), (end == absl::string_view::npos ? rest.size() : end) - key.size());
    if (key == "pid=") {
      int pid = 0;
      if (absl::SimpleAtoi(value, &pid)) x.pid = pid;
    } else if (value != "<unknown>") {
      x.process_name = std::string(value);
    }
    rest = end == absl::string_view::npos ? "" : rest.substr(end + 2);
  }
  x.detail = std::string(rest);
  return x;
}

}  // namespace

std::optional<KernelMessage> ParseKernelMessage(absl::string_view text) {
  // Cheap tests first: a kernel log is mostly unrelated lines.
  if (absl::StartsWith(text, "NVRM: Xid ")) return ParseXid(text);
  if (absl::StartsWith(text, "oom-kill:")) return ParseOomSummary(text);
  if (absl::StartsWith(text, "memory: usage ")) return ParseMemcgUsage(text);
  if (absl::StartsWith(text, "traps: ") || absl::StrContains(text, ": segfault at ")) {
    return ParseFault(text);
  }
  if (absl::StrContains(text, "Killed process ")) return ParseOomKill(text);
  return std::nullopt;
}

absl::string_view XidMeaning(int xid) {
  switch (xid) {
    case 13:
      return "graphics engine exception (an illegal instruction or address in a kernel)";
    case 31:
      return "GPU memory page fault";
    case 43:
      return "GPU stopped processing";
    case 45:
      return "preemptive cleanup after an earlier error";
    case 48:
      return "double-bit ECC error";
    case 63:
      return "ECC page retirement or row remapping recorded";
    case 64:
      return "ECC page retirement or row remapping failed";
    case 74:
      return "NVLink error";
    case 79:
      return "GPU has fallen off the bus";
    case 92:
      return "high single-bit ECC error rate";
    case 94:
      return "contained ECC error";
    case 95:
      return "uncontained ECC error";
    case 109:
      return "context switch timeout";
    case 119:
      return "GSP RPC timeout";
    case 120:
      return "GSP error";
    default:
      return "";
  }
}

}  // namespace ddprun::launcher
