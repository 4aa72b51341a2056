// What the kernel says when it kills a process, parsed from one kernel log message (the text
// of a /dev/kmsg record, kmsg_record.h): the OOM killer's victim line and its summary, a memory
// cgroup's usage at the OOM, a segfault or trap, an NVIDIA Xid. The formats are the kernel's
// (mm/oom_kill.c, mm/memcontrol.c, arch/x86/mm/fault.c, arch/x86/kernel/traps.c; 5.x and 6.x,
// with the 4.x "Killed process" line too) and NVIDIA's driver's. Anything else: nullopt. Pure.
#ifndef DDPRUN_LAUNCHER_CAUSES_KERNEL_MESSAGE_H_
#define DDPRUN_LAUNCHER_CAUSES_KERNEL_MESSAGE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "absl/strings/string_view.h"

namespace ddprun::launcher {

// "Out of memory: Killed process 4242 (python) total-vm:...kB, anon-rss:...kB, ...": the
// victim line, printed for every kill (the header and summary around it are rate-limited).
struct OomKill {
  enum class Scope { kSystem, kMemoryCgroup, kUnknown };
  Scope scope = Scope::kUnknown;  // "Out of memory", "Memory cgroup out of memory", neither
  int pid = 0;                    // in the initial pid namespace
  std::string comm;               // at most 15 bytes; may hold spaces and parentheses
  // -1 where the line does not say (kernels before 5.1 print fewer fields).
  int64_t total_vm_kb = -1;
  int64_t anon_rss_kb = -1;
  int64_t file_rss_kb = -1;
  int64_t shmem_rss_kb = -1;
};

// "oom-kill:constraint=CONSTRAINT_MEMCG,...,oom_memcg=/a,task_memcg=/a/b,task=NAME,pid=P,uid=U":
// which limit was hit (empty oom_memcg: the whole machine, "global_oom").
struct OomSummary {
  std::string constraint;  // CONSTRAINT_NONE, CONSTRAINT_MEMCG, ...
  std::string oom_memcg;   // the cgroup whose limit was reached; empty for a global OOM
  std::string task_memcg;  // the victim's cgroup
  std::string task;
  int pid = 0;
};

// "memory: usage 1048576kB, limit 1048576kB, failcnt 189": the memory cgroup at its OOM.
struct MemcgUsage {
  int64_t usage_kb = 0;
  int64_t limit_kb = 0;
  int64_t failcnt = 0;
};

// "python3[40923]: segfault at 100 ip ... sp ... error 4 in libamdhip64.so[7f27...+3f3000]" or
// "traps: python3[77] general protection fault ip:... sp:... error:0 in libc.so.6[...]".
struct Fault {
  std::string comm;
  int pid = 0;
  std::string what;     // "segfault at 100", "general protection fault", "invalid opcode"
  std::string library;  // the mapping the instruction pointer was in; empty when not a file
};

// "NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off the bus."
struct GpuXid {
  std::string pci;  // "0000:01:00"
  int xid = 0;
  std::optional<int> pid;    // absent, '<unknown>' or 'N/A': unset
  std::string process_name;  // empty when absent or <unknown>
  std::string detail;        // the rest of the line
};

using KernelMessage = std::variant<OomKill, OomSummary, MemcgUsage, Fault, GpuXid>;

std::optional<KernelMessage> ParseKernelMessage(absl::string_view text);

// What an Xid means, in a few words, for the failure line ("GPU has fallen off the bus");
// empty for codes not in NVIDIA's catalogue here.
absl::string_view XidMeaning(int xid);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CAUSES_KERNEL_MESSAGE_H_
