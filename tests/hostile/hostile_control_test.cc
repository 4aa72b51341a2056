// Workers that attack the agent's local channels (issue 43 D1, D3-D6 and the NUL byte): the
// control socket of --restart-mode=in-process, the step-report pipes, the preload spares'
// sockets, and the agent's own /proc entries. Real ddprun, real Python workers
// (scripts/hostile_control.py); each test fails on the behaviour before the fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_text.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using testing::BinPath;
using testing::CountMatches;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::SourcePath;
using testing::Subprocess;
using testing::TempDir;
using testing::WaitUntil;

std::vector<std::string> Job(const TempDir& out, const std::string& mode,
                             std::vector<std::string> flags) {
  std::vector<std::string> argv = {BinPath("ddprun"), "--standalone", "--nproc-per-node=2"};
  for (auto& f : flags) argv.push_back(std::move(f));
  for (const std::string& a :
       {std::string("--no-python"), testing::SystemPython(),
        SourcePath("tests/integration/scripts/hostile_control.py"), mode, out.path()}) {
    argv.push_back(a);
  }
  return argv;
}

bool WaitForFile(const TempDir& dir, const std::string& name, std::chrono::milliseconds timeout) {
  return WaitUntil([&] { return std::filesystem::exists(dir.File(name)); }, timeout);
}

// Waits for the attack's result file `name`, then tells the workers to stop; the job's exit
// (nullopt: no result, or no exit, within 30 s).
std::optional<testing::ExitStatus> StopAfter(Subprocess* job, const TempDir& out,
                                             const std::string& name) {
  if (!WaitForFile(out, name, 30s)) return std::nullopt;
  testing::WriteFile(out.File("stop"), "");
  return job->Wait(30s);
}

int Lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// kB of resident memory of `pid` (VmRSS); 0 when unreadable.
int64_t ResidentKb(pid_t pid) {
  for (absl::string_view line :
       absl::StrSplit(ReadTextFile(absl::StrCat("/proc/", pid, "/status")), '\n')) {
    if (!absl::ConsumePrefix(&line, "VmRSS:")) continue;
    int64_t kb = 0;
    absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(line), " kB"), &kb);
    return kb;
  }
  return 0;
}

// The children of `pid` (/proc/PID/task/*/children).
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> out;
  for (const auto& task :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"))) {
    for (absl::string_view c :
         absl::StrSplit(ReadTextFile(task.path().string() + "/children"), ' ', absl::SkipEmpty())) {
      pid_t child = 0;
      if (absl::SimpleAtoi(c, &child)) out.push_back(child);
    }
  }
  return out;
}

// D4: a worker's child joins rank 0's process group (the session allows it) and says hello as
// local rank 0. Before: accepted, and the real rank 0 lost its channel (exit 7).
TEST(HostileControlTest, AWorkersChildCannotSayHelloAsAnotherRank) {
  TempDir out;
  Subprocess job(Job(out, "impersonate", {"--restart-mode=in-process", "--max-restarts=0"}));
  auto st = StopAfter(&job, out, "impersonation");
  ASSERT_TRUE(st.has_value()) << job.err();
  const std::string all = job.out() + job.err();
  EXPECT_EQ(ReadTextFile(out.File("impersonation")), "refused") << all;
  EXPECT_EQ(st->exit_code, 0) << all;
  EXPECT_THAT(all, Not(HasSubstr("lost its channel"))) << all;
  EXPECT_THAT(job.err(), HasSubstr("said it is local rank 0, but it belongs to local rank 1"));
}

// Minor: a hello ending in a NUL byte. Before: accepted as a valid message.
TEST(HostileControlTest, AControlLineWithANulByteIsRefused) {
  TempDir out;
  Subprocess job(Job(out, "nul-hello", {"--restart-mode=in-process", "--max-restarts=0"}));
  auto st = StopAfter(&job, out, "nul-hello");
  ASSERT_TRUE(st.has_value()) << job.err();
  EXPECT_EQ(ReadTextFile(out.File("nul-hello")), "refused") << job.err();
  EXPECT_THAT(job.err(), HasSubstr("a bad message (a NUL byte at offset"));
}

// D3: a worker floods its channel with stale ready messages. Before: one log line each (2.4 M
// lines in 5 s). Now the flood closes the channel (the worker is replaced) and the log holds a
// handful of lines.
TEST(HostileControlTest, AFloodOfStaleReadiesCostsAFewLogLines) {
  TempDir out;
  Subprocess job(Job(out, "stale-ready", {"--restart-mode=in-process", "--max-restarts=1"}));
  ASSERT_TRUE(WaitForFile(out, "rank0.pid", 30s)) << job.err();
  // The flood lasts 2 s unless the agent ends it: the channel closed, the worker replaced.
  job.WaitForOutputContains("in-process recovery", 8s);
  ASSERT_TRUE(job.WaitForOutput(
      [](const std::string& s) { return CountMatches(s, "rank=1 step=") > 0; }, 20s));
  testing::WriteFile(out.File("stop"), "");
  auto st = job.Wait(30s);
  ASSERT_TRUE(st.has_value());
  const std::string err = job.err();
  EXPECT_LE(CountMatches(err, "said ready for round"), 1) << err.substr(0, 4000);
  EXPECT_LT(Lines(err), 60) << err.substr(0, 4000);
  EXPECT_THAT(err, HasSubstr("(a flood)"));
  EXPECT_EQ(st->exit_code, 0) << err.substr(0, 4000);
}

// D3: step reports naming made-up pids, as fast as the pipe takes them. Before: one log line
// per pid and the agent's memory growing (1.4 M lines, 47 -> 186 MB in 4 s).
TEST(HostileControlTest, StepReportsUnderMadeUpPidsCostOneLineAndNoMemory) {
  TempDir out;
  Subprocess job(Job(out, "step-flood", {}));
  ASSERT_TRUE(WaitForFile(out, "rank0.pid", 30s)) << job.err();
  const int64_t before = ResidentKb(job.pid());
  ASSERT_TRUE(WaitForFile(out, "step-flood.done", 30s)) << job.err().substr(0, 4000);
  const int64_t after = ResidentKb(job.pid());
  testing::WriteFile(out.File("stop"), "");
  auto st = job.Wait(30s);
  ASSERT_TRUE(st.has_value());
  const std::string err = job.err();
  EXPECT_EQ(st->exit_code, 0) << err.substr(0, 4000);
  EXPECT_LT(Lines(err), 30) << err.substr(0, 4000);
  EXPECT_LE(CountMatches(err, "ignoring"), 1) << err.substr(0, 4000);
  EXPECT_LT(after - before, 20 * 1024) << "agent RSS " << before << " kB -> " << after << " kB";
}

// D5: rank 1 reports steps for rank 0's pid while rank 0 is silent. Before: rank 0 was never
// found hung. Now the report counts for the pipe's rank only if its pid is that rank's.
TEST(HostileControlTest, AWorkerCannotHideAnotherRanksHang) {
  TempDir out;
  Subprocess job(Job(out, "hide-hang", {"--hang-timeout=2", "--max-restarts=0"}));
  ASSERT_TRUE(WaitForFile(out, "hide-hang.done", 30s)) << job.err();
  const auto reporting = std::chrono::steady_clock::now();
  auto st = job.Wait(15s);
  ASSERT_TRUE(st.has_value()) << "rank 0's hang was never found: " << job.err();
  EXPECT_LT(std::chrono::steady_clock::now() - reporting, 8s);
  EXPECT_NE(st->exit_code, 0);
  EXPECT_THAT(job.err(), HasSubstr("local rank 0")) << job.err();
  EXPECT_THAT(job.err(), HasSubstr("no progress for")) << job.err();
  EXPECT_THAT(job.err(), HasSubstr("ignoring step reports on local rank 1's DDPRUN_PROGRESS_FILE"));
}

// D6: a process outside the job holds 70 connections to the control socket without a hello;
// then a worker fails and its replacement connects. Before: the limit of 64 was global, the
// replacement was refused and the job ended with exit 1.
TEST(HostileControlTest, ConnectionsHeldOpenElsewhereDoNotLockOutAReplacement) {
  TempDir out;
  Subprocess job(Job(out, "fail-on-go", {"--restart-mode=in-process", "--max-restarts=1"}));
  // Both workers have their channels (the attack is on a replacement, not on them).
  ASSERT_TRUE(WaitForFile(out, "ready.0.0", 30s)) << job.err();
  ASSERT_TRUE(WaitForFile(out, "ready.1.0", 30s)) << job.err();
  pid_t rank0 = 0;
  ASSERT_TRUE(absl::SimpleAtoi(ReadTextFile(out.File("rank0.pid")), &rank0));
  std::string socket;
  for (absl::string_view var :
       absl::StrSplit(ReadTextFile(absl::StrCat("/proc/", rank0, "/environ")), '\0')) {
    if (absl::ConsumePrefix(&var, "DDPRUN_CONTROL_SOCKET=")) socket = std::string(var);
  }
  ASSERT_FALSE(socket.empty());
  std::vector<int> held;
  for (int i = 0; i < 70; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, socket.c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    held.push_back(fd);
  }
  ASSERT_TRUE(job.WaitForOutputContains("connections without a hello", 10s)) << job.err();
  testing::WriteFile(out.File("go"), "");
  ASSERT_TRUE(job.WaitForOutputContains("in-process recovery", 10s)) << job.err();
  ASSERT_TRUE(job.WaitForOutput(
      [](const std::string& s) { return s.find("rank=1 step=") != std::string::npos; }, 10s));
  testing::WriteFile(out.File("stop"), "");
  auto st = job.Wait(30s);
  for (int fd : held) close(fd);
  ASSERT_TRUE(st.has_value()) << job.err();
  EXPECT_EQ(st->exit_code, 0) << job.out() << job.err();
  EXPECT_THAT(job.out(), Not(HasSubstr("no round from the agent")));
}

// D3: a preload spare that repeats "ready". Before: one log line per message (583 k lines in
// 3 s). Now a spare's socket is read once.
TEST(HostileControlTest, ASpareRepeatingReadyCostsOneLine) {
  TempDir out;
  Subprocess job(Job(out, "spare-flood", {"--preload=native"}));
  auto st = job.Wait(30s);
  ASSERT_TRUE(st.has_value()) << job.err().substr(0, 4000);
  const std::string err = job.err();
  EXPECT_EQ(st->exit_code, 0) << err.substr(0, 4000);
  EXPECT_THAT(job.out(), HasSubstr("worker "));
  EXPECT_LE(CountMatches(err, "warmed up in"), 4) << err.substr(0, 4000);
  EXPECT_LT(Lines(err), 30) << err.substr(0, 4000);
}

// D1: the token in ddprun's environment. Before: a worker of a non-root user read it in
// /proc/$PPID/environ and in the orphan guard's. Now the initial environment block holds stars
// (what root sees too) and the agent is not dumpable (its /proc entries are root's).
TEST(HostileControlTest, WorkersCannotReadTheTokenFromTheAgentOrItsGuard) {
  TempDir out;
  chmod(out.path().c_str(), 0777);  // the worker runs as nobody
  const std::string token = absl::StrCat("hostile-control-token-", getpid());
  const std::string worker = absl::StrCat(
      // Every process's environment this user may read: the agent's, the guard's, ours.
      "for f in /proc/[0-9]*/environ; do if cat \"$f\" 2>/dev/null | tr '\\0' '\\n' | "
      "grep -q '^DDPRUN_RDZV_TOKEN=",
      token, "'; then echo \"LEAK $f\"; fi; done; ",
      "cat /proc/self/environ | tr '\\0' '\\n' | grep -q '^LOCAL_RANK=0' && echo SELF-READABLE; ",
      "head -c 1 /proc/$PPID/environ >/dev/null 2>&1 || echo AGENT-CLOSED; ", "touch ",
      out.File("scanned"), "; ", "n=0; while [ ! -e ", out.File("stop"),
      " ] && [ $n -lt 1000 ]; do sleep 0.02; n=$((n+1)); done");
  Subprocess job({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                  BinPath("ddprun"), "--standalone", "--nproc-per-node=1",
                  absl::StrCat("--health-check=env > ", out.File("health-check.env")),
                  "--no-python", "/bin/sh", "-c", worker},
                 {{"DDPRUN_RDZV_TOKEN", token}});
  ASSERT_TRUE(WaitForFile(out, "scanned", 30s)) << job.err();
  // As root (who may read any /proc entry): the agent's and the guard's environment blocks.
  std::vector<pid_t> agent_and_children = ChildrenOf(job.pid());
  agent_and_children.push_back(job.pid());
  EXPECT_GE(agent_and_children.size(), 3u);  // the agent, its guard, the worker
  for (pid_t pid : agent_and_children) {
    EXPECT_THAT(ReadTextFile(absl::StrCat("/proc/", pid, "/environ")), Not(HasSubstr(token)))
        << "pid " << pid;
  }
  testing::WriteFile(out.File("stop"), "");
  auto st = job.Wait(30s);
  ASSERT_TRUE(st.has_value()) << job.err();
  EXPECT_EQ(st->exit_code, 0) << job.err();
  EXPECT_THAT(job.out(), Not(HasSubstr("LEAK"))) << job.out();
  EXPECT_THAT(job.out(), HasSubstr("SELF-READABLE")) << job.out();  // the scan could read
  EXPECT_THAT(job.out(), HasSubstr("AGENT-CLOSED")) << job.out();
  // The agent's other children (here its health check) do not get it either.
  const std::string health_check_env = ReadTextFile(out.File("health-check.env"));
  EXPECT_THAT(health_check_env, HasSubstr("PATH=")) << "the health check did not run";
  EXPECT_THAT(health_check_env, Not(HasSubstr(token)));
}

}  // namespace
}  // namespace ddprun
