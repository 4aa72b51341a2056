// The kernel's messages about killed processes, from recorded lines of real kernels (5.4-6.8)
// and NVIDIA drivers (sources in the comments; docs/research/failure-causes.md has more).
#include "launcher/causes/kernel_message.h"

#include "gtest/gtest.h"

namespace ddprun::launcher {
namespace {

template <typename T>
T Parsed(absl::string_view text) {
  auto m = ParseKernelMessage(text);
  EXPECT_TRUE(m.has_value()) << text;
  if (!m.has_value()) return T{};
  EXPECT_TRUE(std::holds_alternative<T>(*m)) << text;
  return std::holds_alternative<T>(*m) ? std::get<T>(*m) : T{};
}

TEST(KernelMessageTest, OomVictimOfAMemoryCgroup) {
  // reportportal/kubernetes#203 (5.4.0-77)
  const OomKill k = Parsed<OomKill>(
      "Memory cgroup out of memory: Killed process 63214 (uwsgi) total-vm:3149468kB, "
      "anon-rss:164992kB, file-rss:52176kB, shmem-rss:92kB, UID:0 pgtables:1372kB "
      "oom_score_adj:986");
  EXPECT_EQ(k.scope, OomKill::Scope::kMemoryCgroup);
  EXPECT_EQ(k.pid, 63214);
  EXPECT_EQ(k.comm, "uwsgi");
  EXPECT_EQ(k.total_vm_kb, 3149468);
  EXPECT_EQ(k.anon_rss_kb, 164992);
  EXPECT_EQ(k.file_rss_kb, 52176);
  EXPECT_EQ(k.shmem_rss_kb, 92);
}

TEST(KernelMessageTest, OomVictimOfTheWholeMachineWithASpaceInItsName) {
  const OomKill k = Parsed<OomKill>(
      "Out of memory: Killed process 561123 (npm ci) total-vm:1456584kB, anon-rss:311600kB, "
      "file-rss:128kB, shmem-rss:0kB, UID:0 pgtables:4316kB oom_score_adj:0");
  EXPECT_EQ(k.scope, OomKill::Scope::kSystem);
  EXPECT_EQ(k.comm, "npm ci");
  EXPECT_EQ(k.anon_rss_kb, 311600);
}

TEST(KernelMessageTest, OomVictimNamesWithParenthesesAndOlderKernels) {
  const OomKill odd = Parsed<OomKill>(
      "Out of memory: Killed process 7 (a) (b)) total-vm:10kB, anon-rss:5kB, file-rss:0kB, "
      "shmem-rss:0kB, UID:0 pgtables:0kB oom_score_adj:0");
  EXPECT_EQ(odd.comm, "a) (b)");
  EXPECT_EQ(odd.anon_rss_kb, 5);
  // 4.x: the victim line without a prefix and with fewer fields.
  const OomKill old = Parsed<OomKill>(
      "Killed process 28438 (java) total-vm:2847032kB, anon-rss:1030180kB, file-rss:0kB");
  EXPECT_EQ(old.scope, OomKill::Scope::kUnknown);
  EXPECT_EQ(old.pid, 28438);
  EXPECT_EQ(old.shmem_rss_kb, -1);
}

TEST(KernelMessageTest, OomSummaryNamesTheCgroupWhoseLimitWasReached) {
  // leptonai/gpud#70: a PyTorch worker (torch 2.3-2.4 name their main thread pt_main_thread).
  const OomSummary s = Parsed<OomSummary>(
      "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=cri.scope,mems_allowed=0-1,"
      "oom_memcg=/kubepods.slice/pod1.slice,task_memcg=/kubepods.slice/pod1.slice/cri.scope,"
      "task=pt_main_thread,pid=461754,uid=0");
  EXPECT_EQ(s.constraint, "CONSTRAINT_MEMCG");
  EXPECT_EQ(s.oom_memcg, "/kubepods.slice/pod1.slice");
  EXPECT_EQ(s.task_memcg, "/kubepods.slice/pod1.slice/cri.scope");
  EXPECT_EQ(s.task, "pt_main_thread");
  EXPECT_EQ(s.pid, 461754);
  const OomSummary global = Parsed<OomSummary>(
      "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
      "task_memcg=/user.slice/session-51052.scope,task=npm, ci,pid=561123,uid=0");
  EXPECT_EQ(global.oom_memcg, "");
  EXPECT_EQ(global.task, "npm, ci");
  EXPECT_EQ(global.pid, 561123);
}

TEST(KernelMessageTest, MemoryCgroupUsageAtTheOom) {
  const MemcgUsage u = Parsed<MemcgUsage>("memory: usage 1048576kB, limit 1048576kB, failcnt 189");
  EXPECT_EQ(u.usage_kb, 1048576);
  EXPECT_EQ(u.limit_kb, 1048576);
  EXPECT_EQ(u.failcnt, 189);
}

TEST(KernelMessageTest, SegfaultsNameTheLibrary) {
  // esnet/iperf#1694 (6.8, with the CPU suffix)
  const Fault f = Parsed<Fault>(
      "iperf3[1525756]: segfault at 2d0 ip 00007b49bd09a8fd sp 00007fff39e19e80 error 4 in "
      "libc.so.6[7b49bd028000+188000] likely on CPU 12 (core 24, socket 0)");
  EXPECT_EQ(f.comm, "iperf3");
  EXPECT_EQ(f.pid, 1525756);
  EXPECT_EQ(f.what, "segfault at 2d0");
  EXPECT_EQ(f.library, "libc.so.6");
  // clearlinux/distribution#1022 (older kernel, a jump to 0)
  const Fault jump = Parsed<Fault>(
      "python3[7777]: segfault at 0 ip 0000000000000000 sp 00007ffdb10ad908 error 14 in "
      "python3.7[55c288ff2000+5c000]");
  EXPECT_EQ(jump.library, "python3.7");
  // No file mapping at the instruction pointer: no library.
  const Fault anon =
      Parsed<Fault>("a[b[9]: segfault at 8 ip 00007f0000001000 sp 00007ffd00000000 error 6");
  EXPECT_EQ(anon.comm, "a[b");
  EXPECT_EQ(anon.pid, 9);
  EXPECT_EQ(anon.library, "");
}

TEST(KernelMessageTest, TrapsAreFaultsToo) {
  const Fault f = Parsed<Fault>(
      "traps: python3[4141] general protection fault ip:7f3a2b1c0d0e sp:7ffd1e2f3a40 error:0 in "
      "libtorch_cpu.so[7f3a20000000+1c000000]");
  EXPECT_EQ(f.comm, "python3");
  EXPECT_EQ(f.pid, 4141);
  EXPECT_EQ(f.what, "general protection fault");
  EXPECT_EQ(f.library, "libtorch_cpu.so");
}

TEST(KernelMessageTest, XidLinesOfSeveralDrivers) {
  // leptonai/gpud#46
  const GpuXid a = Parsed<GpuXid>(
      "NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, "
      "errorString CTX SWITCH TIMEOUT, Info 0x58005");
  EXPECT_EQ(a.pci, "0000:cb:00");
  EXPECT_EQ(a.xid, 109);
  EXPECT_EQ(a.pid, 1797828);
  EXPECT_EQ(a.process_name, "pt_main_thread");
  EXPECT_EQ(a.detail, "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005");
  const GpuXid unknown = Parsed<GpuXid>(
      "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
      "Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter");
  EXPECT_FALSE(unknown.pid.has_value());
  EXPECT_EQ(unknown.process_name, "");
  EXPECT_EQ(unknown.xid, 13);
  // An older driver: neither pid nor name.
  const GpuXid old = Parsed<GpuXid>(
      "NVRM: Xid (PCI:0000:08:00): 31, Ch 0000003b, intr 10000000. MMU Fault: ENGINE GRAPHICS");
  EXPECT_FALSE(old.pid.has_value());
  EXPECT_EQ(old.detail, "Ch 0000003b, intr 10000000. MMU Fault: ENGINE GRAPHICS");
  const GpuXid bus =
      Parsed<GpuXid>("NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off the bus.");
  EXPECT_EQ(bus.pid, 1122);
  EXPECT_EQ(bus.detail, "GPU has fallen off the bus.");
  EXPECT_EQ(XidMeaning(79), "GPU has fallen off the bus");
  const GpuXid na = Parsed<GpuXid>(
      "NVRM: Xid (PCI:0000:65:00): 119, pid='N/A', Timeout waiting for RPC from GSP");
  EXPECT_FALSE(na.pid.has_value());
  EXPECT_EQ(na.detail, "Timeout waiting for RPC from GSP");
  EXPECT_EQ(XidMeaning(12345), "");
}

TEST(KernelMessageTest, UnrelatedAndNearMissLinesAreNotEvidence) {
  for (const char* line : {
           "",
           "eth0: link up",
           "uwsgi invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=986",
           "oom_reaper: reaped process 63214 (uwsgi), now anon-rss:0kB, file-rss:0kB",
           "Memory cgroup out of memory: Kill process 24572 (java) score 0 or sacrifice child",
           "Killed process x (y) total-vm:1kB",
           "oom-kill:constraint=CONSTRAINT_NONE,task=x,pid=notanumber,uid=0",
           "memory: usage 1kB",
           "NVRM: Xid (PCI:0000:01:00): abc, pid=1",
           "NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.",
           "x: segfault at",
       }) {
    EXPECT_FALSE(ParseKernelMessage(line).has_value()) << line;
  }
}

}  // namespace
}  // namespace ddprun::launcher
