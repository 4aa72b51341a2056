// Memory cgroups as evidence: /proc/PID/cgroup, memory.events (v2) and memory.oom_control (v1)
// and the limits parsed from recorded files, the reader on recorded trees of both versions, and
// the DeathExplainer naming an OOM kill from the count alone when the kernel log is unreadable.
#include "launcher/causes/memory_cgroup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "launcher/causes/death_explainer.h"
#include "tests/testing/test_env.h"

namespace ddprun::launcher {
namespace {

// Recorded from a cgroup v2 machine (systemd, Slurm's cgroup/v2 plugin) and a v1 one.
constexpr char kV2ProcCgroup[] = "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n";
constexpr char kV1ProcCgroup[] =
    "12:pids:/slurm/uid_1000/job_42/step_0\n"
    "11:cpuset:/slurm/uid_1000/job_42/step_0\n"
    "4:memory:/slurm/uid_1000/job_42/step_0\n"
    "1:name=systemd:/user.slice\n"
    "0::/user.slice\n";
constexpr char kV2Events[] = "low 0\nhigh 0\nmax 312\noom 3\noom_kill 2\noom_group_kill 0\n";
constexpr char kV1OomControl[] = "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n";

TEST(MemoryCgroupTest, FindsTheMemoryCgroupOfEitherVersion) {
  auto v2 = MemoryCgroupOf(kV2ProcCgroup);
  ASSERT_TRUE(v2.has_value());
  EXPECT_EQ(v2->version, CgroupVersion::kV2);
  EXPECT_EQ(v2->path, "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0");
  auto v1 = MemoryCgroupOf(kV1ProcCgroup);  // a hybrid host: the v1 memory line wins
  ASSERT_TRUE(v1.has_value());
  EXPECT_EQ(v1->version, CgroupVersion::kV1);
  EXPECT_EQ(v1->path, "/slurm/uid_1000/job_42/step_0");
  EXPECT_EQ(MemoryCgroupOf("3:memory,hugetlb:/a:b\n")->path, "/a:b");
  EXPECT_FALSE(MemoryCgroupOf("5:cpu:/x\n").has_value());
  EXPECT_FALSE(MemoryCgroupOf("").has_value());
}

TEST(MemoryCgroupTest, ReadsTheOomKillCountAndTheLimit) {
  EXPECT_EQ(OomKillCount(kV2Events), 2);
  EXPECT_EQ(OomKillCount(kV1OomControl), 1);
  EXPECT_FALSE(OomKillCount("oom_kill_disable 0\nunder_oom 0\n").has_value());  // before 4.13
  EXPECT_EQ(MemoryLimitBytes("104857600\n"), 104857600);
  EXPECT_FALSE(MemoryLimitBytes("max\n").has_value());
  EXPECT_FALSE(MemoryLimitBytes("9223372036854771712\n").has_value());  // v1's "no limit"
}

// A recorded tree: PROC/<pid>/cgroup and the cgroup's files under ROOT (v1: ROOT/memory).
class RecordedCgroups {
 public:
  RecordedCgroups(CgroupVersion version, const std::string& path) : version_(version) {
    files_.proc_root = dir_.File("proc");
    files_.cgroup_root = dir_.File("cgroup");
    cgroup_dir_ = version == CgroupVersion::kV1 ? files_.cgroup_root + "/memory" + path
                                                : files_.cgroup_root + path;
    std::filesystem::create_directories(cgroup_dir_);
    path_ = path;
  }
  void Process(pid_t pid) {
    std::filesystem::create_directories(absl::StrCat(files_.proc_root, "/", pid));
    testing::WriteFile(absl::StrCat(files_.proc_root, "/", pid, "/cgroup"),
                       version_ == CgroupVersion::kV1 ? absl::StrCat("4:memory:", path_, "\n")
                                                      : absl::StrCat("0::", path_, "\n"));
  }
  void Counts(int oom_kills, const std::string& limit) {
    if (version_ == CgroupVersion::kV1) {
      testing::WriteFile(
          cgroup_dir_ + "/memory.oom_control",
          absl::StrCat("oom_kill_disable 0\nunder_oom 0\noom_kill ", oom_kills, "\n"));
      testing::WriteFile(cgroup_dir_ + "/memory.limit_in_bytes", limit + "\n");
    } else {
      testing::WriteFile(cgroup_dir_ + "/memory.events",
                         absl::StrCat("low 0\nhigh 0\nmax 9\noom 1\noom_kill ", oom_kills, "\n"));
      testing::WriteFile(cgroup_dir_ + "/memory.max", limit + "\n");
    }
  }
  const CgroupFiles& files() const { return files_; }

 private:
  testing::TempDir dir_;
  CgroupVersion version_;
  CgroupFiles files_;
  std::string cgroup_dir_, path_;
};

class MemoryCgroupVersionTest : public ::testing::TestWithParam<CgroupVersion> {};

TEST_P(MemoryCgroupVersionTest, TheReaderFindsTheFilesOfItsVersion) {
  RecordedCgroups tree(GetParam(), "/job_42/step_0");
  tree.Process(4242);
  tree.Counts(3, "104857600");
  MemoryCgroupReader reader(tree.files());
  auto cgroup = reader.Of(4242);
  ASSERT_TRUE(cgroup.has_value());
  EXPECT_EQ(cgroup->version, GetParam());
  EXPECT_EQ(reader.OomKills(*cgroup), 3);
  EXPECT_EQ(reader.LimitBytes(*cgroup), 104857600);
  EXPECT_FALSE(reader.Of(4243).has_value());
}

// The kernel log cannot be read (an unprivileged agent): a SIGKILL while the worker's cgroup
// counted an OOM kill is named from the count; without the count rising, it stays unknown.
TEST_P(MemoryCgroupVersionTest, ACountThatRoseWhileTheWorkerLivedIsAnOomKill) {
  RecordedCgroups tree(GetParam(), "/job_42/step_0");
  tree.Process(4242);
  tree.Counts(0, "104857600");
  DeathExplainer explainer(nullptr, "kernel log /dev/kmsg not readable: Permission denied",
                           tree.files());
  explainer.Watch({4242});
  tree.Counts(1, "104857600");
  WorkerDeath death;
  death.pid = 4242;
  death.signal = SIGKILL;
  DeathCause c = explainer.Explain(death);
  EXPECT_EQ(c.kind, DeathCauseKind::kOomKill);
  EXPECT_EQ(c.text,
            "killed by the OOM killer: its memory cgroup /job_42/step_0 (limit 100.0 MiB) counted "
            "1 OOM kill while it lived (kernel log /dev/kmsg not readable: Permission denied)");

  // Watched again from a count of 1: a plain SIGKILL from outside is not an OOM kill.
  DeathExplainer later(nullptr, "kernel log /dev/kmsg not readable: Permission denied",
                       tree.files());
  later.Watch({4242});
  c = later.Explain(death);
  EXPECT_EQ(c.kind, DeathCauseKind::kUnknown);
  EXPECT_EQ(c.text, "cause unknown: kernel log /dev/kmsg not readable: Permission denied");
}

INSTANTIATE_TEST_SUITE_P(Versions, MemoryCgroupVersionTest,
                         ::testing::Values(CgroupVersion::kV1, CgroupVersion::kV2),
                         [](const auto& info) {
                           return info.param == CgroupVersion::kV1 ? "v1" : "v2";
                         });

}  // namespace
}  // namespace ddprun::launcher
