// The rules that name a worker's death from the kernel's records: only records written while it
// lived that name its pid count; unreadable or lost evidence is said, never guessed around.
#include "launcher/causes/death_cause.h"

#include <csignal>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun::launcher {
namespace {

using ::testing::HasSubstr;

KmsgRecord Record(int64_t us, const std::string& text) {
  KmsgRecord r;
  r.timestamp_us = us;
  r.text = text;
  return r;
}

// Worker pid 4242, alive from 100 s to 200 s, killed by SIGKILL.
WorkerDeath Killed(int signal = SIGKILL) {
  WorkerDeath d;
  d.pid = 4242;
  d.signal = signal;
  d.started_us = 100'000'000;
  d.died_us = 200'000'000;
  return d;
}

KernelEvidence Readable(std::vector<KmsgRecord> records) {
  KernelEvidence e;
  e.readable = true;
  e.records = std::move(records);
  return e;
}

TEST(DeathCauseTest, AMemoryCgroupOomNamesItsLimitAndTheVictimsMemory) {
  const DeathCause c = ExplainDeath(
      Killed(), Readable({
                    Record(199'000'000, "eth0: link up"),
                    Record(199'500'000, "memory: usage 67108864kB, limit 67108864kB, failcnt 12"),
                    Record(199'500'100,
                           "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
                           "mems_allowed=0,oom_memcg=/job,task_memcg=/job,task=python3,"
                           "pid=4242,uid=0"),
                    Record(199'500'200,
                           "Memory cgroup out of memory: Killed process 4242 (python3) "
                           "total-vm:70000000kB, anon-rss:66899148kB, file-rss:0kB, "
                           "shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0"),
                }));
  EXPECT_EQ(c.kind, DeathCauseKind::kOomKill);
  EXPECT_EQ(c.text,
            "killed by the OOM killer: memory cgroup limit 64.0 GiB reached (anon-rss 63.8 GiB)");
}

TEST(DeathCauseTest, AMachineWideOom) {
  const DeathCause c = ExplainDeath(
      Killed(), Readable({Record(150'000'000,
                                 "Out of memory: Killed process 4242 (pt_main_thread) "
                                 "total-vm:1kB, anon-rss:2048kB, file-rss:0kB, shmem-rss:0kB, "
                                 "UID:0 pgtables:0kB oom_score_adj:0")}));
  EXPECT_EQ(c.kind, DeathCauseKind::kOomKill);
  EXPECT_EQ(c.text, "killed by the OOM killer: the machine ran out of memory (anon-rss 2.0 MiB)");
}

// pid reuse: the same pid killed before this worker started (another process that had it) and
// an OOM of another pid while it lived are not its death.
TEST(DeathCauseTest, OtherPidsAndRecordsOutsideItsLifeAreNotItsDeath) {
  const DeathCause c = ExplainDeath(
      Killed(),
      Readable({
          Record(10'000'000, "Out of memory: Killed process 4242 (old) anon-rss:1kB"),
          Record(150'000'000, "Out of memory: Killed process 4243 (python3) anon-rss:1kB"),
          Record(150'000'001, "python3[4243]: segfault at 0 ip 0 sp 0 error 4"),
          Record(209'000'000, "Out of memory: Killed process 4242 (late) anon-rss:1kB"),
      }));
  EXPECT_EQ(c.kind, DeathCauseKind::kFromOutside);
  EXPECT_EQ(c.text,
            "sent from outside ddprun (no kernel record: not the OOM killer, no fault; Slurm, an "
            "administrator or another process sent it)");
}

// The same pid and a time within the slack, but another name: the pid reused at once after the
// death, or a record of another pid namespace with the same number. The worker's own name at
// death (a shell script that exec'd python3 is python3 by then) matches, cut at 15 bytes as the
// kernel cuts it; an unknown name on either side matches on pid and time alone.
TEST(DeathCauseTest, ARecordForTheSamePidUnderAnotherNameIsNotItsDeath) {
  WorkerDeath death = Killed();
  death.comm = "python3";
  const std::vector<KmsgRecord> other = {
      Record(200'500'000, "Out of memory: Killed process 4242 (postgres) anon-rss:1kB"),
      Record(200'600'000, "postgres[4242]: segfault at 0 ip 0 sp 0 error 4 in libc.so.6[1+2]"),
      Record(200'700'000, "NVRM: Xid (PCI:0000:01:00): 79, pid=4242, name=postgres, fell off"),
  };
  EXPECT_EQ(ExplainDeath(death, Readable(other)).kind, DeathCauseKind::kFromOutside);

  const KernelEvidence own = Readable({Record(150'000'000,
                                              "Out of memory: Killed process 4242 (python3) "
                                              "anon-rss:2048kB")});
  EXPECT_EQ(ExplainDeath(death, own).kind, DeathCauseKind::kOomKill);
  death.comm.clear();  // the name could not be read: pid and time decide
  EXPECT_EQ(ExplainDeath(death, Readable(other)).kind, DeathCauseKind::kOomKill);

  death.comm = "data_loader_wor";  // /proc/PID/comm of "data_loader_worker_0", 15 bytes
  EXPECT_EQ(ExplainDeath(death, Readable({Record(150'000'000,
                                                 "Out of memory: Killed process 4242 "
                                                 "(data_loader_wor) anon-rss:1kB")}))
                .kind,
            DeathCauseKind::kOomKill);
}

// The memory cgroup's count is evidence too: where the kernel log (readable) has no record of
// the kill, and only for SIGKILL (the OOM killer's signal); a kernel record wins over it.
TEST(DeathCauseTest, AMemoryCgroupsOomCountNamesAKillTheLogDoesNotHave) {
  WorkerDeath death = Killed();
  death.cgroup = CgroupOomCount{"/job_42", 4, 6, std::nullopt};
  DeathCause c = ExplainDeath(death, Readable({}));
  EXPECT_EQ(c.kind, DeathCauseKind::kOomKill);
  EXPECT_EQ(c.text,
            "killed by the OOM killer: its memory cgroup /job_42 counted 2 OOM kills while it "
            "lived (the kernel log has no record of it)");
  death.signal = SIGTERM;
  EXPECT_EQ(ExplainDeath(death, Readable({})).kind, DeathCauseKind::kFromOutside);
  death.signal = SIGKILL;
  death.cgroup->kills_after = 4;
  EXPECT_EQ(ExplainDeath(death, Readable({})).kind, DeathCauseKind::kFromOutside);
  death.cgroup->kills_after = 5;
  c = ExplainDeath(death, Readable({Record(150'000'000,
                                           "Out of memory: Killed process 4242 (python3) "
                                           "anon-rss:2048kB")}));
  EXPECT_EQ(c.text, "killed by the OOM killer: the machine ran out of memory (anon-rss 2.0 MiB)");
}

TEST(DeathCauseTest, ASegfaultNamesTheLibrary) {
  const DeathCause c = ExplainDeath(
      Killed(SIGSEGV),
      Readable({Record(200'000'500,  // just after the death: within the clocks' slack
                       "python3[4242]: segfault at 0 ip 00007efeb1aa2ad8 sp 00007ffe51bbc498 "
                       "error 4 in libc.so.6[167ad8,7efeb1961000+156000] likely on CPU 1 (core 1, "
                       "socket 0)")}));
  EXPECT_EQ(c.kind, DeathCauseKind::kFault);
  EXPECT_EQ(c.text, "segfault at 0 in libc.so.6");
}

TEST(DeathCauseTest, AGpuXidNamingThePid) {
  const DeathCause c = ExplainDeath(
      Killed(), Readable({Record(190'000'000,
                                 "NVRM: Xid (PCI:0000:01:00): 79, pid=4242, GPU has fallen off "
                                 "the bus.")}));
  EXPECT_EQ(c.kind, DeathCauseKind::kGpuError);
  EXPECT_EQ(c.text, "GPU error: Xid 79 on PCI:0000:01:00 (GPU has fallen off the bus)");
}

TEST(DeathCauseTest, WhatCannotBeKnownIsSaid) {
  KernelEvidence unreadable;
  unreadable.unreadable_because = "kernel log /dev/kmsg not readable: Permission denied";
  EXPECT_EQ(ExplainDeath(Killed(), unreadable).text,
            "cause unknown: kernel log /dev/kmsg not readable: Permission denied");
  KernelEvidence lost = Readable({});
  lost.lost_records = true;
  EXPECT_EQ(ExplainDeath(Killed(), lost).kind, DeathCauseKind::kUnknown);
  EXPECT_THAT(ExplainDeath(Killed(), lost).text, HasSubstr("overwritten"));
  // A fault the kernel did not log (the worker's own handler re-raised it): not "from outside".
  const DeathCause abort = ExplainDeath(Killed(SIGABRT), Readable({}));
  EXPECT_EQ(abort.kind, DeathCauseKind::kUnknown);
  EXPECT_THAT(abort.text, HasSubstr("the kernel logged no fault"));
}

TEST(DeathCauseTest, ExitsAndTheAgentsOwnStopsNeedNoEvidence) {
  WorkerDeath exited = Killed(0);
  EXPECT_EQ(ExplainDeath(exited, {}).kind, DeathCauseKind::kNone);
  WorkerDeath stopped = Killed(SIGTERM);
  stopped.killed_by_agent = true;
  EXPECT_EQ(ExplainDeath(stopped, {}).text, "stopped by ddprun");
  EXPECT_STREQ(DeathCauseLabel(ExplainDeath(stopped, {}).kind), "stopped_by_ddprun");
  EXPECT_STREQ(DeathCauseLabel(DeathCauseKind::kOomKill), "oom_kill");
}

TEST(DeathCauseTest, SizesReadAsPeopleSayThem) {
  EXPECT_EQ(FormatKilobytes(512), "512 kB");
  EXPECT_EQ(FormatKilobytes(1536), "1.5 MiB");
  EXPECT_EQ(FormatKilobytes(67108864), "64.0 GiB");
}

}  // namespace
}  // namespace ddprun::launcher
