// Static multi-node jobs (--rdzv-backend=static, and a platform's MASTER_ADDR / MASTER_PORT /
// RANK / WORLD_SIZE) coordinated through the rendezvous node 0's agent hosts at MASTER_ADDR on
// MASTER_PORT + 1 (issue 24 item 3): one restart budget, every node restarted together, a lost
// agent noticed, node 0's agent allowed to come back, and the workers' environment exactly as
// the uncoordinated static rendezvous gives it. Real agents and workers on loopback.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/reserved_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using testing::BinPath;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadFile;
using testing::Subprocess;
using testing::TempDir;
using testing::WaitUntil;
using testing::WriteFile;
using namespace std::chrono_literals;

// How a node learns its place: ddprun's flags, or a platform's environment variables.
enum class Placement { kFlags, kPlatformEnv };

class StaticJob {
 public:
  StaticJob(Placement placement, int nnodes, std::vector<std::string> flags)
      : placement_(placement), nnodes_(nnodes), flags_(std::move(flags)) {}
  bool ok() const { return ports_.port() != 0; }
  int master_port() const { return ports_.port(); }

  // Starts node `rank`'s agent running `program` (--no-python).
  std::unique_ptr<Subprocess> Node(int rank, const std::vector<std::string>& program) const {
    std::vector<std::string> argv = {BinPath("ddprun"), "--nproc-per-node=1"};
    std::map<std::string, std::string> env = {{"PYTHON_EXEC", testing::SystemPython()}};
    if (placement_ == Placement::kFlags) {
      argv.insert(argv.end(), {"--rdzv-backend=static", "--nnodes=" + std::to_string(nnodes_),
                               "--node-rank=" + std::to_string(rank), "--master-addr=127.0.0.1",
                               "--master-port=" + std::to_string(master_port())});
    } else {
      env["MASTER_ADDR"] = "127.0.0.1";
      env["MASTER_PORT"] = std::to_string(master_port());
      env["WORLD_SIZE"] = std::to_string(nnodes_);
      env["RANK"] = std::to_string(rank);
    }
    argv.insert(argv.end(), flags_.begin(), flags_.end());
    argv.push_back("--no-python");
    argv.insert(argv.end(), program.begin(), program.end());
    return std::make_unique<Subprocess>(argv, env);
  }

 private:
  Placement placement_;
  int nnodes_;
  std::vector<std::string> flags_;
  // MASTER_PORT and MASTER_PORT + 1 (the default port of the rendezvous), held until the job
  // binds them, so that the tests exercise the default port without racing another test.
  testing::ReservedPortPair ports_;
};

// A worker that exits 7 on node 1 in the first attempt and otherwise, on node 0 in the first
// attempt, runs until it is stopped: only a job-wide restart moves node 0 on. Later attempts
// succeed.
std::vector<std::string> FailOnNodeOneFirst() {
  return {"/bin/sh", "-c",
          "echo \"node=$GROUP_RANK restart=$TORCHELASTIC_RESTART_COUNT\"; "
          "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then "
          "  if [ $GROUP_RANK = 1 ]; then sleep 0.3; exit 7; fi; sleep 120 & wait $!; fi; "
          "exit 0"};
}

class StaticCoordinationTest : public ::testing::TestWithParam<Placement> {};

// pytorch issue 146371: a worker failing on one node must restart every node, not leave node 0's
// workers running into their collective timeout.
TEST_P(StaticCoordinationTest, AWorkerFailureOnOneNodeRestartsEveryNode) {
  StaticJob job(GetParam(), 2, {"--max-restarts=2"});
  ASSERT_TRUE(job.ok());
  std::vector<std::unique_ptr<Subprocess>> nodes;
  for (int rank = 0; rank < 2; ++rank) nodes.push_back(job.Node(rank, FailOnNodeOneFirst()));
  ASSERT_TRUE(testing::ExpectAllExit(nodes, 0, 60s)) << nodes[0]->err() << nodes[1]->err();
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    EXPECT_THAT(nodes[rank]->out(),
                HasSubstr("node=" + std::to_string(rank) + " restart=1\n"));  // one budget
  }
  EXPECT_THAT(nodes[0]->err(), HasSubstr("static rendezvous: node 0 of 2, coordinated through "
                                         "the rendezvous this agent hosts at 127.0.0.1:" +
                                         std::to_string(job.master_port() + 1)));
  EXPECT_THAT(nodes[0]->err(), HasSubstr("rank 1 (local_rank 0, pid"));  // the cause, named
}

// One budget for the whole job: node 1 fails every time; once --max-restarts is spent both
// nodes stop with exit 1, node 0 too although its own worker never failed.
TEST_P(StaticCoordinationTest, TheBudgetIsSpentJobWide) {
  StaticJob job(GetParam(), 2, {"--max-restarts=1"});
  ASSERT_TRUE(job.ok());
  const std::vector<std::string> worker = {
      "/bin/sh", "-c",
      "echo \"node=$GROUP_RANK restart=$TORCHELASTIC_RESTART_COUNT\"; "
      "if [ $GROUP_RANK = 1 ]; then sleep 0.3; exit 7; fi; sleep 120 & wait $!"};
  std::vector<std::unique_ptr<Subprocess>> nodes;
  for (int rank = 0; rank < 2; ++rank) nodes.push_back(job.Node(rank, worker));
  ASSERT_TRUE(testing::ExpectAllExit(nodes, 1, 60s)) << nodes[0]->err() << nodes[1]->err();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(nodes[rank]->err(), HasSubstr("restart budget spent (1 of --max-restarts=1"))
        << rank;
    EXPECT_THAT(nodes[rank]->out(), Not(HasSubstr("restart=2"))) << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(FlagsAndPlatform, StaticCoordinationTest,
                         ::testing::Values(Placement::kFlags, Placement::kPlatformEnv),
                         [](const ::testing::TestParamInfo<Placement>& info) {
                           return info.param == Placement::kFlags ? "Flags" : "PlatformEnv";
                         });

// A lease of 1 s; the lost node's return spends one restart of the budget, as in c10d.
const std::vector<std::string> kLease = {
    "--max-restarts=1",
    "--rdzv-conf=keep_alive_interval=0.5,keep_alive_max_attempt=2,read_timeout=30"};

// A worker that waits to be stopped in the first attempt and succeeds in the next.
const std::vector<std::string> kWaitThenSucceed = {
    "/bin/sh", "-c",
    "echo \"node=$GROUP_RANK restart=$TORCHELASTIC_RESTART_COUNT\"; "
    "[ $TORCHELASTIC_RESTART_COUNT = 0 ] && { sleep 120 & wait $!; }; sleep 0.5; exit 0"};

// Both nodes' agents, each once its first worker runs.
std::vector<std::unique_ptr<Subprocess>> StartBoth(const StaticJob& job) {
  std::vector<std::unique_ptr<Subprocess>> nodes;
  for (int rank = 0; rank < 2; ++rank) nodes.push_back(job.Node(rank, kWaitThenSucceed));
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(
        nodes[rank]->WaitForOutputContains("node=" + std::to_string(rank) + " restart=0", 60s))
        << nodes[rank]->err();
  }
  return nodes;
}

// Node `rank` is started again (its agent was killed): both nodes finish in restart 1.
void ExpectTheReturnRestartsTheWorld(const StaticJob& job, int rank,
                                     std::vector<std::unique_ptr<Subprocess>> nodes) {
  nodes[rank] = job.Node(rank, kWaitThenSucceed);
  ASSERT_TRUE(testing::ExpectAllExit(nodes, 0, 60s)) << nodes[0]->err() << nodes[1]->err();
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(nodes[r]->out(), HasSubstr("node=" + std::to_string(r) + " restart=1\n")) << r;
    EXPECT_THAT(nodes[r]->err(), Not(HasSubstr("fenced"))) << r;
  }
}

// An agent killed (its workers with it) is noticed by the others within its lease; the fixed
// world then waits for the node to come back and both go on in restart 1.
TEST(StaticTest, AKilledAgentIsNoticedAndItsReturnRestartsTheWorld) {
  StaticJob job(Placement::kFlags, 2, kLease);
  ASSERT_TRUE(job.ok());
  std::vector<std::unique_ptr<Subprocess>> nodes = StartBoth(job);
  const auto killed = std::chrono::steady_clock::now();
  nodes[1]->Signal(SIGKILL);
  ASSERT_TRUE(nodes[0]->WaitForOutputContains("was lost", 10s)) << nodes[0]->err();
  // The lease is 1 s; its loss is noticed within it (on loopback the broken stream tells at once).
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 1500ms);
  nodes[1]->Wait(10s);
  ExpectTheReturnRestartsTheWorld(job, 1, std::move(nodes));
}

// Node 0's agent hosts the rendezvous; when it is killed no other node takes over (the workers'
// store lives at MASTER_ADDR too): the others wait for it to come back there, within
// read_timeout, and the job goes on in restart 1 with the same nodes.
TEST(StaticTest, NodeZerosAgentKilledAndStartedAgainTheJobGoesOn) {
  StaticJob job(Placement::kFlags, 2, kLease);
  ASSERT_TRUE(job.ok());
  std::vector<std::unique_ptr<Subprocess>> nodes = StartBoth(job);
  nodes[0]->Signal(SIGKILL);
  ASSERT_TRUE(nodes[1]->WaitForOutputContains("waiting for it to come back there", 10s))
      << nodes[1]->err();
  nodes[0]->Wait(10s);
  // Longer than the lease: the survivor must not fence itself while node 0 is down.
  std::this_thread::sleep_for(2s);  // the outage itself, not a wait for a condition
  EXPECT_TRUE(nodes[1]->running()) << nodes[1]->err();
  ExpectTheReturnRestartsTheWorld(job, 0, std::move(nodes));
}

// --rdzv-conf static_coordination=none keeps torchrun's behaviour: node 1 restarts on its own
// budget and finishes while node 0's first worker still runs.
TEST(StaticTest, WithoutCoordinationEachNodeIsOnItsOwn) {
  StaticJob job(Placement::kFlags, 2, {"--max-restarts=1", "--rdzv-conf=static_coordination=none"});
  ASSERT_TRUE(job.ok());
  auto node0 = job.Node(0, FailOnNodeOneFirst());
  auto node1 = job.Node(1, FailOnNodeOneFirst());
  auto st = node1->Wait(60s);
  ASSERT_TRUE(st.has_value()) << node1->err();
  EXPECT_EQ(st->exit_code, 0) << node1->err();
  EXPECT_THAT(node1->out(), HasSubstr("node=1 restart=1\n"));
  EXPECT_TRUE(node0->running());
  EXPECT_THAT(node0->out(), Not(HasSubstr("restart=1")));
  EXPECT_THAT(node0->err(), Not(HasSubstr("static rendezvous")));
}

// The workers' environment is exactly the uncoordinated one, node by node and rank by rank (the
// error file lies in a temporary directory either way).
TEST(StaticTest, WorkersSeeTheEnvironmentOfTheUncoordinatedRendezvous) {
  auto dump = [](const std::vector<std::string>& flags, const TempDir& out) {
    StaticJob job(Placement::kFlags, 2, flags);
    ASSERT_TRUE(job.ok());
    std::vector<std::unique_ptr<Subprocess>> nodes;
    for (int rank = 0; rank < 2; ++rank) {
      nodes.push_back(job.Node(
          rank, {testing::SystemPython(), testing::IntegrationScript("dump_env.py"), out.path()}));
    }
    ASSERT_TRUE(testing::ExpectAllExit(nodes, 0, 60s)) << nodes[0]->err() << nodes[1]->err();
  };
  TempDir coordinated, alone;
  ASSERT_NO_FATAL_FAILURE(dump({"--rdzv-id=env"}, coordinated));
  ASSERT_NO_FATAL_FAILURE(dump({"--rdzv-id=env", "--rdzv-conf=static_coordination=none"}, alone));
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    const std::string name = "/rank" + std::to_string(rank) + ".json";
    nlohmann::json mine = nlohmann::json::parse(ReadFile(coordinated.path() + name));
    nlohmann::json theirs = nlohmann::json::parse(ReadFile(alone.path() + name));
    for (nlohmann::json* env : {&mine, &theirs}) {
      // Temporary paths, and ddprun's own round counter (a server numbers rounds from 1).
      for (const char* key : {"TORCHELASTIC_ERROR_FILE", "DDPRUN_PROGRESS_FILE", "DDPRUN_ROUND"}) {
        ASSERT_TRUE(env->contains(key)) << key;
        env->erase(key);
      }
      // The test's own ports differ between the two jobs.
      EXPECT_EQ((*env)["MASTER_ADDR"], "127.0.0.1");
      env->erase("MASTER_PORT");
    }
    EXPECT_EQ(mine, theirs);
    EXPECT_EQ(mine["GROUP_RANK"], std::to_string(rank));
    EXPECT_EQ(mine["WORLD_SIZE"], "2");
  }
}

// Bad settings are usage errors naming the flag, before anything starts.
TEST(StaticTest, BadStaticSettingsAreRefusedByName) {
  TempDir dir;
  const std::string marker = dir.File("started");
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--master-port=65535"}, "--master-port=65535: the static rendezvous listens on"},
      {{"--master-port=29500", "--rdzv-conf=static_port=29500"},
       "--rdzv-conf static_port=29500: the job's store listens there"},
      {{"--rdzv-conf=static_coordination=maybe"}, "static_coordination=maybe"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {BinPath("ddprun"), "--rdzv-backend=static", "--nnodes=2",
                                     "--node-rank=1"};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    argv.insert(argv.end(), {"--no-python", "/bin/touch", marker});
    Subprocess p(argv);
    auto st = p.Wait(20s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 2) << c.flags[0] << p.err();
    EXPECT_THAT(p.err(), HasSubstr(c.message));
    EXPECT_FALSE(std::filesystem::exists(marker));
  }
}

}  // namespace
}  // namespace ddprun
