// Issue 25 item 4, --health-check, with the real ddprun: two agents of an elastic job (1:2) on
// the built-in rendezvous and on etcd, node b's check failing while a file says it is sick. Before
// its first join, and again between rounds after a worker failure, b stays out (its check's output
// in its log, the reason in a's) while a runs a world of one; healed, b rejoins as a new node and
// the world is two again. Then standalone: a check that hangs is killed at its timeout and the
// agent gives up after join_timeout (exit 3); a command the shell cannot find is exit 2.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/file_text.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/reserved_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using testing::BinPath;
using ::testing::HasSubstr;
using testing::ReservedPort;
using testing::Subprocess;
using testing::TempDir;

// Waits until node `node`'s current worker (its file "world-NODE": "WORLD_SIZE PID", written
// whole) runs in a world of `size`; returns that worker's pid, 0 on timeout. Polls: no event
// says "a file was written" more simply, and each wait is bounded.
int WaitForWorld(const TempDir& dir, const std::string& node, int size,
                 std::chrono::milliseconds timeout = 60s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string prefix = absl::StrCat(size, " ");
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string line = ReadTextFile(dir.File("world-" + node));
    if (absl::StartsWith(line, prefix)) return std::stoi(line.substr(prefix.size()));
    usleep(50 * 1000);
  }
  return 0;
}

void Touch(const std::string& path) { std::ofstream(path).flush(); }

// The rendezvous of the elastic test: "c10d" (node a's agent hosts the built-in server) or
// "etcd" (a one-member cluster the test starts).
class HealthCheckElasticTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HealthCheckElasticTest, AFailingNodeStaysOutAndTheOthersGoOnUntilItHeals) {
  std::unique_ptr<testing::EtcdCluster> etcd;
  std::vector<std::string> rdzv;
  if (GetParam() == "etcd") {
    if (const std::string why = testing::EtcdCluster::Unavailable(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    etcd = std::make_unique<testing::EtcdCluster>(1);
    ASSERT_TRUE(etcd->WaitHealthy(30s));
    rdzv = {"--rdzv-backend=etcd", absl::StrCat("--rdzv-endpoint=", etcd->endpoints()),
            "--rdzv-conf=last_call_timeout=1,etcd_prefix=/health-test"};
  } else {
    int port = 0;
    {
      ReservedPort reserved;  // released before a's agent binds it
      port = reserved.port();
    }
    ASSERT_GT(port, 0);
    rdzv = {"--rdzv-backend=c10d", absl::StrCat("--rdzv-endpoint=127.0.0.1:", port),
            "--rdzv-conf=last_call_timeout=1"};
  }
  TempDir dir;
  // Each worker writes its world size and pid (one file, atomically) and runs until told to stop.
  const std::string worker = testing::WriteShellScript(
      dir, "worker.sh",
      absl::StrCat("D=", dir.path(), "\n",
                   "echo $WORLD_SIZE $$ > $D/world-$NODE.tmp && mv $D/world-$NODE.tmp "
                   "$D/world-$NODE\n",
                   "while [ ! -e $D/stop ]; do sleep 0.05; done\n"));
  const std::string sick = dir.File("sick");
  Touch(sick);
  auto agent = [&](const std::string& node, const std::string& check) {
    std::vector<std::string> argv = {BinPath("ddprun"), "--nnodes=1:2", "--nproc-per-node=1",
                                     "--rdzv-id=health", "--max-restarts=3"};
    argv.insert(argv.end(), rdzv.begin(), rdzv.end());
    argv.insert(argv.end(), {absl::StrCat("--health-check=", check), "--no-python", worker});
    return argv;
  };
  Subprocess a(agent("a", "true"), {{"NODE", "a"}});
  if (GetParam() == "c10d") {
    ASSERT_TRUE(a.WaitForOutputContains("hosting the rendezvous", 30s)) << a.err();
  }
  Subprocess b(
      agent("b", absl::StrCat("echo 'gpu 0: 12 uncorrectable ECC errors'; test ! -e ", sick)),
      {{"NODE", "b"}});

  // Before its first join: b stays out, a runs alone.
  ASSERT_GT(WaitForWorld(dir, "a", 1), 0) << a.err() << b.err();
  ASSERT_TRUE(b.WaitForOutputContains("stays out of the run", 30s)) << b.err();
  EXPECT_THAT(b.err(), HasSubstr("exit code 1 after"));
  EXPECT_THAT(b.err(), HasSubstr("gpu 0: 12 uncorrectable ECC errors"));

  // Healed: b joins at its next try, and both run in a world of two.
  unlink(sick.c_str());
  ASSERT_GT(WaitForWorld(dir, "b", 2), 0) << a.err() << b.err();
  const int a_worker = WaitForWorld(dir, "a", 2);
  ASSERT_GT(a_worker, 0) << a.err() << b.err();

  // Sick again, and a's worker fails: the restart's check keeps b out; a goes on alone.
  Touch(sick);
  ASSERT_EQ(kill(a_worker, SIGKILL), 0);
  ASSERT_GT(WaitForWorld(dir, "a", 1), 0) << a.err() << b.err();
  ASSERT_TRUE(b.WaitForOutputContains("the others go on without it", 30s)) << b.err();
  EXPECT_THAT(a.err(), HasSubstr("left: health check failed: --health-check"));

  // Healed again: b steps back in as a new node.
  unlink(sick.c_str());
  ASSERT_TRUE(b.WaitForOutputContains("rejoins the run as a new node", 30s)) << b.err();
  ASSERT_GT(WaitForWorld(dir, "a", 2), 0) << a.err() << b.err();

  Touch(dir.File("stop"));
  auto sa = a.Wait(60s);
  auto sb = b.Wait(60s);
  ASSERT_TRUE(sa.has_value() && sb.has_value()) << a.err() << b.err();
  EXPECT_EQ(sa->exit_code, 0) << a.err();
  EXPECT_EQ(sb->exit_code, 0) << b.err();
  if (getenv("DDPRUN_TEST_SHOW_LOGS") != nullptr) std::cout << a.err() << "----\n" << b.err();
}

INSTANTIATE_TEST_SUITE_P(Backends, HealthCheckElasticTest, ::testing::Values("c10d", "etcd"),
                         [](const auto& info) { return info.param; });

std::vector<std::string> Standalone(const TempDir& dir, std::vector<std::string> flags) {
  const std::string worker = testing::WriteShellScript(dir, "ok.sh", "exit 0\n");
  std::vector<std::string> argv = {BinPath("ddprun"), "--standalone", "--nproc-per-node=1"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("--no-python");
  argv.push_back(worker);
  return argv;
}

TEST(HealthCheckIntegrationTest, AHangingCheckIsKilledAtItsTimeoutAndTheAgentGivesUp) {
  TempDir dir;
  Subprocess p(Standalone(dir, {"--health-check=echo probing; sleep 300",
                                "--health-check-timeout=0.3", "--rdzv-conf=join_timeout=2"}));
  auto st = p.Wait(60s);
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 3) << p.err();
  EXPECT_THAT(p.err(), HasSubstr("timed out after 0."));
  EXPECT_THAT(p.err(), HasSubstr("(killed): probing"));
  EXPECT_THAT(p.err(), HasSubstr("the health check has failed for"));
}

TEST(HealthCheckIntegrationTest, ACheckThatFailsThenPassesStartsTheWorkersLate) {
  TempDir dir;
  // Fails at its first run (no mark yet), passes at the second, a second later.
  const std::string mark = dir.File("ran");
  Subprocess p(Standalone(
      dir, {absl::StrCat("--health-check=test -e ", mark, " || { touch ", mark, "; exit 1; }")}));
  auto st = p.Wait(60s);
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 0) << p.err();
  EXPECT_THAT(p.err(), HasSubstr("next try in 1.00 s"));
}

TEST(HealthCheckIntegrationTest, ACommandTheShellCannotFindIsExitTwo) {
  TempDir dir;
  Subprocess p(Standalone(dir, {"--health-check=ddprun-test-no-such-check --gpus"}));
  auto st = p.Wait(60s);
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 2) << p.err();
  EXPECT_THAT(p.err(), HasSubstr("cannot run it: exit code 127"));
  EXPECT_THAT(p.err(), HasSubstr("not found"));
}

// On a node with nvidia-smi, a cold restart waits until the driver no longer lists the failed
// workers' processes. The nvidia-smi here is a script on ddprun's PATH that lists the first
// worker (with 4 GiB) for its first three answers.
TEST(HealthCheckIntegrationTest, ARestartWaitsUntilTheFailedWorkersGpuMemoryIsReleased) {
  TempDir dir;
  const std::string bin = dir.File("bin");
  ASSERT_EQ(mkdir(bin.c_str(), 0755), 0);
  const std::string asked = dir.File("asked");
  const std::string pid = dir.File("pid");
  testing::WriteShellScript(
      dir, "bin/nvidia-smi",
      absl::StrCat("n=$(cat ", asked, " 2>/dev/null || echo 0); n=$((n+1)); echo $n > ", asked,
                   "\n[ $n -le 3 ] && echo \"$(cat ", pid, "), 4096\"\nexit 0\n"));
  // The first attempt records its pid and fails; the second succeeds.
  const std::string worker =
      testing::WriteShellScript(dir, "worker.sh",
                                absl::StrCat("[ -e ", pid, " ] && exit 0\necho $$ > ", pid,
                                             ".tmp && mv ", pid, ".tmp ", pid, "\nexit 1\n"));
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=1", "--max-restarts=1",
                "--no-python", worker},
               {{"PATH", absl::StrCat(bin, ":", getenv("PATH"))}});
  auto st = p.Wait(60s);
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 0) << p.err();
  EXPECT_THAT(p.err(), HasSubstr("until the previous workers' GPU memory was released"));
  EXPECT_EQ(absl::StripAsciiWhitespace(ReadTextFile(asked)), "4") << p.err();
}

}  // namespace
}  // namespace ddprun
