// launcher/process/spawn: real fork/exec of /bin/sh children, their process group, signal mask,
// CPUs, kept descriptor, death with their parent, and exec failures coming back as a status.
#include "launcher/process/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "launcher/process/proc_info.h"
#include "tests/testing/child_exit.h"
#include "tests/testing/test_env.h"

namespace ddprun::launcher {
namespace {

using ::ddprun::testing::ReadUntilEof;
using ::ddprun::testing::TempDir;
using ::ddprun::testing::WaitForChild;
using std::chrono::milliseconds;

constexpr milliseconds kExitTimeout{10000};

// Whether `pid`, not a child of this process, is gone (or a zombie nobody reaps) within
// `timeout`. Children of ours that exit meanwhile are reaped.
bool DiesWithin(pid_t pid, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const char state = ProcessState(pid);
    if (state == '?' || state == 'Z') return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    WaitForChild(-1, milliseconds(10));  // paces the loop
  }
}

SpawnRequest Shell(const std::string& script) {
  SpawnRequest r;
  r.program = "sh";
  r.argv = {"sh", "-c", script};
  r.env = {{"PATH", "/usr/bin:/bin"}};
  return r;
}

// Spawns `request` with its stdout on a pipe; returns the child's output and wait status.
std::pair<std::string, int> RunForOutput(SpawnRequest request) {
  int out[2];
  EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
  request.stdout_fd = out[1];
  absl::StatusOr<pid_t> pid = Spawn(request);
  close(out[1]);
  if (!pid.ok()) {
    close(out[0]);
    ADD_FAILURE() << pid.status();
    return {"", -1};
  }
  std::string text = ReadUntilEof(out[0]);
  close(out[0]);
  std::optional<int> status = WaitForChild(*pid, kExitTimeout);
  EXPECT_TRUE(status.has_value());
  return {text, status.value_or(-1)};
}

TEST(SpawnTest, RunsTheProgramWithExactlyTheGivenEnvironment) {
  setenv("DDPRUN_SPAWN_TEST_LEAK", "from-the-agent", 1);
  SpawnRequest r = Shell("echo \"$GREETING:${DDPRUN_SPAWN_TEST_LEAK:-unset}\"; exit 7");
  r.env["GREETING"] = "hello world";
  auto [out, status] = RunForOutput(r);
  unsetenv("DDPRUN_SPAWN_TEST_LEAK");
  EXPECT_EQ(out, "hello world:unset\n");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

TEST(SpawnTest, ChildLeadsItsOwnProcessGroupFromTheStart) {
  SpawnRequest r = Shell("exec sleep 30");
  absl::StatusOr<pid_t> pid = Spawn(r);
  ASSERT_TRUE(pid.ok()) << pid.status();
  // Set by the parent before Spawn returns: a stop sent right away reaches the whole group.
  EXPECT_EQ(getpgid(*pid), *pid);
  EXPECT_NE(getpgid(*pid), getpgrp());
  EXPECT_EQ(ParentOf(*pid), getpid());
  ASSERT_EQ(kill(-*pid, SIGTERM), 0);
  std::optional<int> status = WaitForChild(*pid, kExitTimeout);
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFSIGNALED(*status));
  EXPECT_EQ(WTERMSIG(*status), SIGTERM);
}

TEST(SpawnTest, AGroupSignalReachesTheWorkersOwnChildren) {
  // The shell's background sleep is in the worker's group: one kill(-pgid) ends both.
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  SpawnRequest r = Shell("sleep 30 & echo $!; wait");
  r.stdout_fd = out[1];
  absl::StatusOr<pid_t> pid = Spawn(r);
  close(out[1]);
  ASSERT_TRUE(pid.ok()) << pid.status();
  char buf[32] = {};
  ASSERT_GT(read(out[0], buf, sizeof(buf) - 1), 0);
  close(out[0]);
  const pid_t grandchild = atoi(buf);
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(ProcessGroupOf(grandchild), *pid);
  ASSERT_EQ(kill(-*pid, SIGKILL), 0);
  ASSERT_TRUE(WaitForChild(*pid, kExitTimeout).has_value());
  EXPECT_TRUE(DiesWithin(grandchild, kExitTimeout));
}

TEST(SpawnTest, ChildStartsWithAnEmptySignalMaskAndDefaultSigpipe) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  sigaddset(&block, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &block, &old), 0);
  signal(SIGPIPE, SIG_IGN);
  // grep itself, not a shell (which may clear its mask on start): what it reads is the mask
  // and dispositions the exec kept.
  SpawnRequest grep;
  grep.program = "grep";
  grep.argv = {"grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"};
  grep.env = {{"PATH", "/usr/bin:/bin"}};
  auto [out, status] = RunForOutput(grep);
  signal(SIGPIPE, SIG_DFL);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  EXPECT_TRUE(absl::StrContains(out, "SigBlk:\t0000000000000000")) << out;
  // SIGPIPE is signal 13: bit 12 (0x1000) of SigIgn.
  const size_t ign = out.find("SigIgn:\t");
  ASSERT_NE(ign, std::string::npos) << out;
  const unsigned long long ignored = std::stoull(out.substr(ign + 8, 16), nullptr, 16);
  EXPECT_EQ(ignored & (1ULL << (SIGPIPE - 1)), 0u) << out;
}

TEST(SpawnTest, KeepFdStaysOpenAtItsNumberAndOthersClose) {
  int kept[2], other[2];
  ASSERT_EQ(pipe2(kept, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(other, O_CLOEXEC), 0);
  SpawnRequest r =
      Shell(absl::StrCat("echo kept >&", kept[1], "; echo other >&", other[1], " || echo closed"));
  r.keep_fd = kept[1];
  auto [out, status] = RunForOutput(r);
  EXPECT_EQ(fcntl(kept[1], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC)
      << "the agent's copy stays close-on-exec";
  close(kept[1]);
  close(other[1]);
  EXPECT_EQ(ReadUntilEof(kept[0]), "kept\n");
  EXPECT_EQ(ReadUntilEof(other[0]), "");
  EXPECT_TRUE(absl::StrContains(out, "closed")) << out;
  close(kept[0]);
  close(other[0]);
}

TEST(SpawnTest, BindsToTheGivenCpus) {
  auto [out, status] = RunForOutput([] {
    SpawnRequest r = Shell("grep Cpus_allowed_list /proc/self/status");
    r.cpus = {0};
    return r;
  }());
  EXPECT_EQ(out, "Cpus_allowed_list:\t0\n");
}

TEST(SpawnTest, ImpossibleCpuIsAnErrorNamingIt) {
  SpawnRequest r = Shell("exit 0");
  r.cpus = {1000};  // no such CPU on this machine (CPU_SETSIZE is 1024)
  absl::StatusOr<pid_t> pid = Spawn(r);
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(pid.status().message(), "cannot bind to CPUs 1000"))
      << pid.status();
  EXPECT_FALSE(WaitForChild(-1, milliseconds(0)).has_value()) << "the child was reaped already";
}

TEST(SpawnTest, MissingProgramIsNotFound) {
  SpawnRequest r;
  r.program = "ddprun-no-such-program";
  r.argv = {r.program};
  r.env = {{"PATH", "/usr/bin:/bin"}};
  absl::StatusOr<pid_t> pid = Spawn(r);
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(pid.status().message(), "ddprun-no-such-program: not found in PATH");
}

TEST(SpawnTest, ExecFailureComesBackAsAStatusNotExit127) {
  TempDir dir;
  const std::string file = dir.File("not-executable");
  ddprun::testing::WriteFile(file, "#!/bin/sh\nexit 0\n", 0644);
  SpawnRequest r;
  r.program = file;  // a path: used as is, so the exec itself fails
  r.argv = {file};
  absl::StatusOr<pid_t> pid = Spawn(r);
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pid.status().message(), absl::StrCat("cannot execute ", file, ": Permission denied"));
  EXPECT_FALSE(WaitForChild(-1, milliseconds(0)).has_value()) << "the child was reaped already";
}

TEST(SpawnTest, ChildDiesWithTheProcessThatSpawnedIt) {
  // A middle process spawns a long sleep and exits; PR_SET_PDEATHSIG must SIGKILL the sleep.
  // As a subreaper, this test process gets the orphan and reads its wait status; where it
  // cannot be one (qemu-user refuses PR_SET_CHILD_SUBREAPER), it watches the orphan go.
  const bool subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
  const auto [middle, sleeper] = ddprun::testing::ForkMiddle([] {
    absl::StatusOr<pid_t> pid = Spawn(Shell("exec sleep 30"));
    return pid.ok() ? *pid : -1;
  });
  ASSERT_GT(sleeper, 0);
  ASSERT_TRUE(WaitForChild(middle, kExitTimeout).has_value());
  if (!subreaper) {
    EXPECT_TRUE(DiesWithin(sleeper, kExitTimeout)) << "the worker outlived its spawner";
    return;
  }
  std::optional<int> status = WaitForChild(sleeper, kExitTimeout);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  ASSERT_TRUE(status.has_value()) << "the worker outlived the process that spawned it";
  ASSERT_TRUE(WIFSIGNALED(*status));
  EXPECT_EQ(WTERMSIG(*status), SIGKILL);
}

TEST(FindProgramTest, SearchesPathInOrderAndSkipsWhatIsNotExecutable) {
  TempDir a, b;
  ddprun::testing::WriteFile(a.File("tool"), "plain file\n", 0644);
  ddprun::testing::WriteShellScript(b, "tool", "exit 0");
  absl::StatusOr<std::string> found =
      FindProgram("tool", absl::StrCat("/nonexistent:", a.path(), ":", b.path()));
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, b.File("tool"));
}

TEST(FindProgramTest, NameWithASlashIsReturnedAsIs) {
  EXPECT_EQ(FindProgram("./anything", "").value(), "./anything");
  EXPECT_EQ(FindProgram("/no/such/file", "/bin").value(), "/no/such/file");
}

TEST(FindProgramTest, EmptyPathEntryMeansTheCurrentDirectory) {
  TempDir dir;
  ddprun::testing::WriteShellScript(dir, "here-only", "exit 0");
  char old[4096];
  ASSERT_NE(getcwd(old, sizeof(old)), nullptr);
  ASSERT_EQ(chdir(dir.path().c_str()), 0);
  absl::StatusOr<std::string> found = FindProgram("here-only", "/nonexistent::/bin");
  absl::StatusOr<std::string> absent = FindProgram("here-only", "/nonexistent:/bin");
  ASSERT_EQ(chdir(old), 0);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, "./here-only");
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kNotFound);
}

TEST(FindProgramTest, EnvironmentWithoutPathUsesTheStandardDirectories) {
  const std::string found = FindProgramInEnv("sh", {}).value();
  EXPECT_TRUE(found == "/usr/local/bin/sh" || found == "/usr/bin/sh" || found == "/bin/sh")
      << found;
  EXPECT_EQ(FindProgramInEnv("sh", {{"PATH", "/bin"}}).value(), "/bin/sh");
  EXPECT_EQ(FindProgramInEnv("sh", {{"PATH", "/nonexistent"}}).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ddprun::launcher
