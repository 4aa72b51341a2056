// --restart-mode=in-process end to end with real ddprun agents and real worker processes that
// speak the control protocol (control_worker.cc): survivors keep their processes, only what
// failed is replaced, workers that do not speak the protocol restart cold, a worker that
// misses its re-formation deadline is killed, hostile clients of the control socket are
// refused. ddp-train's and the Python module's recoveries have tests of their own.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "tests/testing/rdzv_daemon.h"
#include "tests/testing/reserved_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using testing::BinPath;
using testing::CountMatches;
using ::testing::HasSubstr;
using testing::Subprocess;
using testing::TempDir;
using testing::WaitUntil;
using namespace std::chrono_literals;

// "rank=R pid=P round=N ... joined" lines: pid by (rank, round).
std::map<std::pair<int, int>, int> JoinedPids(const std::string& out) {
  std::map<std::pair<int, int>, int> pids;
  static const std::regex kJoined(R"(rank=(\d+) pid=(\d+) round=(\d+) world=\d+ step=\d+ joined)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), kJoined);
       it != std::sregex_iterator(); ++it) {
    pids[{std::stoi((*it)[1]), std::stoi((*it)[3])}] = std::stoi((*it)[2]);
  }
  return pids;
}

std::set<int> RoundsSeen(const std::map<std::pair<int, int>, int>& pids) {
  std::set<int> rounds;
  for (const auto& [key, pid] : pids) rounds.insert(key.second);
  return rounds;
}

std::vector<std::string> Agent(int nproc, std::vector<std::string> flags,
                               std::vector<std::string> worker_args) {
  std::vector<std::string> argv = {BinPath("ddprun"), "--standalone",
                                   absl::StrCat("--nproc-per-node=", nproc),
                                   "--restart-mode=in-process", "--no-python"};
  for (auto& f : flags) argv.push_back(std::move(f));
  argv.push_back(BinPath("control_worker"));
  for (auto& a : worker_args) argv.push_back(std::move(a));
  return argv;
}

// The first and the second round, by rank: which processes were kept.
struct Recovery {
  int kept = 0;
  int replaced = 0;
};
Recovery Compare(const std::map<std::pair<int, int>, int>& pids, int nproc, int first, int second) {
  Recovery r;
  for (int rank = 0; rank < nproc; ++rank) {
    auto a = pids.find({rank, first});
    auto b = pids.find({rank, second});
    if (a == pids.end() || b == pids.end()) continue;
    (a->second == b->second ? r.kept : r.replaced) += 1;
  }
  return r;
}

class InProcessFailureTest : public ::testing::TestWithParam<std::string> {};

// A worker that exits 1, is SIGKILLed or segfaults: only it is replaced, the two others keep their
// processes and join the next round; the budget counts the failure; the job succeeds.
TEST_P(InProcessFailureTest, OnlyTheFailedWorkerIsReplaced) {
  Subprocess agent(
      Agent(3, {"--max-restarts=1"},
            {"--steps", "30", "--fail-rank", "1", "--fail-step", "5", "--fail-mode", GetParam()}));
  auto status = agent.Wait(60s);
  ASSERT_TRUE(status.has_value()) << agent.err();
  const std::string out = agent.out() + agent.err();
  EXPECT_EQ(status->exit_code, 0) << out;
  const auto pids = JoinedPids(out);
  const std::set<int> rounds = RoundsSeen(pids);
  ASSERT_EQ(rounds.size(), 2u) << out;
  const Recovery r = Compare(pids, 3, *rounds.begin(), *rounds.rbegin());
  EXPECT_EQ(r.kept, 2) << out;
  EXPECT_EQ(r.replaced, 1) << out;
  EXPECT_THAT(out, HasSubstr("in-process recovery, 2 worker(s) kept, 1 started")) << out;
  EXPECT_EQ(CountMatches(out, "done step=30"), 3) << out;
}

INSTANTIATE_TEST_SUITE_P(ExitKillSegv, InProcessFailureTest,
                         ::testing::Values("exit", "kill", "segv"));

// The replacement dies while the round re-forms: another round, the same survivors.
TEST(InProcessTest, ReplacementDyingDuringReformationStartsAnotherRound) {
  Subprocess agent(
      Agent(3, {"--max-restarts=2"},
            {"--steps", "30", "--fail-rank", "1", "--fail-step", "5", "--die-joining-rank", "1"}));
  auto status = agent.Wait(60s);
  ASSERT_TRUE(status.has_value()) << agent.err();
  const std::string out = agent.out() + agent.err();
  EXPECT_EQ(status->exit_code, 0) << out;
  EXPECT_THAT(out, HasSubstr("dying while joining")) << out;
  const auto pids = JoinedPids(out);
  const std::set<int> rounds = RoundsSeen(pids);
  // Rounds 0, 1 (the replacement died joining it; a survivor that reads round 2's message
  // first skips round 1) and 2: ranks 0 and 2 are the same processes in the first and last.
  ASSERT_GE(rounds.size(), 2u) << out;
  EXPECT_EQ(*rounds.rbegin(), 2) << out;
  const Recovery r = Compare(pids, 3, *rounds.begin(), *rounds.rbegin());
  EXPECT_EQ(r.kept, 2) << out;
  EXPECT_EQ(CountMatches(out, "in-process recovery, 2 worker\\(s\\) kept, 1 started"), 2) << out;
  EXPECT_EQ(CountMatches(out, "done step=30"), 3) << out;
}

// Issue 40: a replacement that exits 0 before its hello never joined the re-formed round the
// survivor waits in. Before: counted as a worker done, the survivor trained on alone and the
// job "succeeded". Now a failure: the budget (one restart, spent by the first failure) is spent.
TEST(InProcessTest, ReplacementExitingZeroBeforeItsHelloIsAFailure) {
  Subprocess agent(
      Agent(2, {"--max-restarts=1"},
            {"--steps", "100", "--fail-rank", "1", "--fail-step", "3", "--leave-early-rank", "1"}));
  const int exit_code = agent.Wait(60s).value_or(testing::ExitStatus{}).exit_code;
  const std::string out = agent.out() + agent.err();
  EXPECT_EQ(exit_code, 1) << out;
  for (const char* said :
       {"leaving before its hello", "restart budget spent",
        "failed with exit code 0 before it started: an in-process replacement, it ended before "
        "its hello on the control channel"}) {
    EXPECT_THAT(out, HasSubstr(said)) << out;
  }
  EXPECT_EQ(CountMatches(out, "done step="), 0) << "the survivor trained on alone\n" << out;
}

TEST(InProcessTest, BudgetCountsFailuresAsInColdMode) {
  Subprocess agent(
      Agent(2, {"--max-restarts=0"}, {"--steps", "30", "--fail-rank", "1", "--fail-step", "3"}));
  auto status = agent.Wait(60s);
  ASSERT_TRUE(status.has_value()) << agent.err();
  EXPECT_EQ(status->exit_code, 1) << agent.err();
  EXPECT_THAT(agent.err(), HasSubstr("restart budget spent")) << agent.err();
  // The survivor is not left behind.
  EXPECT_EQ(CountMatches(agent.out(), "done step="), 0) << agent.out();
}

// A hung worker (no sign of life past --hang-timeout): its stacks, then it is killed and
// replaced; the others keep running.
TEST(InProcessTest, HungWorkerIsKilledAndReplaced) {
  TempDir logs;
  Subprocess agent(
      Agent(3, {"--max-restarts=1", "--hang-timeout=1.5", "--log-dir=" + logs.path()},
            {"--steps", "60", "--fail-rank", "2", "--fail-step", "4", "--fail-mode", "hang"}));
  auto status = agent.Wait(90s);
  ASSERT_TRUE(status.has_value()) << agent.err();
  const std::string out = agent.out() + agent.err();
  EXPECT_EQ(status->exit_code, 0) << out;
  const auto pids = JoinedPids(out);
  const std::set<int> rounds = RoundsSeen(pids);
  ASSERT_EQ(rounds.size(), 2u) << out;
  const Recovery r = Compare(pids, 3, *rounds.begin(), *rounds.rbegin());
  EXPECT_EQ(r.kept, 2) << out;
  EXPECT_EQ(r.replaced, 1) << out;
  EXPECT_THAT(out, HasSubstr("is hung")) << out;
  EXPECT_THAT(out, HasSubstr("taking the stacks")) << out;
}

// A worker that never opens the channel: the node restarts cold, exactly as in cold mode.
TEST(InProcessTest, WorkerThatDoesNotSpeakTheProtocolRestartsCold) {
  Subprocess agent(
      Agent(3, {"--max-restarts=1"},
            {"--steps", "30", "--fail-rank", "1", "--fail-step", "5", "--silent-rank", "2"}));
  auto status = agent.Wait(60s);
  ASSERT_TRUE(status.has_value()) << agent.err();
  const std::string out = agent.out() + agent.err();
  EXPECT_EQ(status->exit_code, 0) << out;
  EXPECT_THAT(out, ::testing::Not(HasSubstr("in-process recovery,"))) << out;
  EXPECT_EQ(CountMatches(out, "starting 3 worker\\(s\\)"), 2) << out;
  EXPECT_EQ(CountMatches(out, "done step=30"), 3) << out;
}

// A replacement that never says ready: killed at --reform-timeout, a failure like any other;
// with the budget spent, the summary says why.
TEST(InProcessTest, WorkerMissingTheDeadlineIsKilledAndCounted) {
  Subprocess agent(
      Agent(2, {"--max-restarts=1", "--reform-timeout=1"},
            {"--steps", "400", "--fail-rank", "1", "--fail-step", "3", "--late-rank", "0"}));
  auto status = agent.Wait(60s);
  ASSERT_TRUE(status.has_value()) << agent.err();
  const std::string out = agent.out() + agent.err();
  EXPECT_EQ(status->exit_code, 1) << out;
  EXPECT_THAT(out, HasSubstr("did not re-form round")) << out;
}

// Hostile clients of the control socket: a process that is no worker, garbage, a flood. The
// agent logs and closes each; the job is unaffected.
TEST(InProcessTest, ForeignAndGarbledClientsAreRefused) {
  TempDir dir;
  Subprocess agent(Agent(1, {"--max-restarts=0"}, {"--steps", "60", "--step-ms", "50"}));
  // The socket path from the worker's environment (a child of the agent), through /proc.
  std::string socket;
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
          const std::string stat = testing::ReadFile(entry.path().string() + "/stat");
          const size_t paren = stat.rfind(')');
          if (paren == std::string::npos) continue;
          int ppid = 0;
          if (sscanf(stat.c_str() + paren + 2, "%*c %d", &ppid) != 1 || ppid != agent.pid()) {
            continue;
          }
          const std::string env = testing::ReadFile(entry.path().string() + "/environ");
          const std::string key = "DDPRUN_CONTROL_SOCKET=";
          const size_t at = env.find(key);
          if (at == std::string::npos) continue;
          socket = env.substr(at + key.size(), env.find('\0', at) - at - key.size());
          return true;
        }
        return false;
      },
      20s));
  auto send = [&](const std::string& bytes) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, socket.c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << socket;
    (void)!write(fd, bytes.data(), bytes.size());
    char c;
    (void)!read(fd, &c, 1);  // the agent closes it
    close(fd);
  };
  send(absl::StrCat(R"({"type":"hello","version":1,"local_rank":0,"pid":)", getpid(), "}\n"));
  send("not json at all\n");
  send(std::string(70000, 'x'));
  auto status = agent.Wait(60s);
  ASSERT_TRUE(status.has_value()) << agent.err();
  const std::string out = agent.out() + agent.err();
  EXPECT_EQ(status->exit_code, 0) << out;
  EXPECT_THAT(out, HasSubstr("it is no worker of this node")) << out;
  EXPECT_THAT(out, HasSubstr("a bad message (not JSON)")) << out;
  EXPECT_THAT(out, HasSubstr("a line over 4096 bytes")) << out;
  EXPECT_EQ(CountMatches(out, "done step=60"), 1) << out;
}

// Several agents against a ddprun-rdzv of the test's own.
class InProcessMultiNodeTest : public ::testing::Test {
 protected:
  static constexpr char kToken[] = "in-process-test-token";
  void SetUp() override { ASSERT_FALSE(daemon_.endpoint().empty()) << daemon_.error(); }

  std::unique_ptr<Subprocess> Agent(const std::string& nnodes, const std::string& run_id,
                                    std::vector<std::string> worker_args,
                                    const std::string& last_call = "0.5") {
    std::vector<std::string> argv = {BinPath("ddprun"),
                                     "--rdzv-backend=c10d",
                                     "--rdzv-endpoint=" + daemon_.endpoint(),
                                     "--rdzv-id=" + run_id,
                                     "--nnodes=" + nnodes,
                                     "--nproc-per-node=2",
                                     "--max-restarts=2",
                                     "--restart-mode=in-process",
                                     "--rdzv-conf=last_call_timeout=" + last_call,
                                     "--no-python",
                                     BinPath("control_worker")};
    for (auto& a : worker_args) argv.push_back(std::move(a));
    return std::make_unique<Subprocess>(
        argv, std::map<std::string, std::string>{{"DDPRUN_RDZV_TOKEN", kToken}});
  }
  // Which agent is node `group_rank` of `nodes`.
  static int AgentOfNode(const std::vector<std::unique_ptr<Subprocess>>& agents, int group_rank,
                         int nodes) {
    const std::string needle = absl::StrCat("(node ", group_rank, " of ", nodes, ")");
    for (size_t i = 0; i < agents.size(); ++i) {
      if (agents[i]->err().find(needle) != std::string::npos) return static_cast<int>(i);
    }
    return -1;
  }

  testing::RdzvDaemon daemon_{kToken};
};

// A worker fails on one node: the other node's workers are told, keep their processes and
// join the next round beside the failed node's survivor and its replacement.
TEST_F(InProcessMultiNodeTest, RemoteFailureKeepsTheOtherNodesWorkers) {
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(
        Agent("2", "remote", {"--steps", "60", "--fail-rank", "3", "--fail-step", "10"}));
  }
  for (auto& a : agents) {
    auto st = a->Wait(60s);
    ASSERT_TRUE(st.has_value()) << a->err();
    EXPECT_EQ(st->exit_code, 0) << a->err();
  }
  std::string out;
  for (auto& a : agents) out += a->out() + a->err();
  const auto pids = JoinedPids(out);
  const std::set<int> rounds = RoundsSeen(pids);
  ASSERT_EQ(rounds.size(), 2u) << out;
  const Recovery r = Compare(pids, 4, *rounds.begin(), *rounds.rbegin());
  EXPECT_EQ(r.kept, 3) << out;
  EXPECT_EQ(r.replaced, 1) << out;
  EXPECT_EQ(CountMatches(out, "done step=60"), 4) << out;
}

// An agent is SIGKILLed (its workers die with it): with 2 nodes (--nnodes=1:2) the survivor's
// workers re-form alone; with 3 (--nnodes=2:3) the last node's workers keep their processes and
// take new ranks in the smaller world. They re-form at once: the last call (30 s here, which
// the first round never waits for, as every node joins and the round is full) does not apply
// to the round after a failure in in-process mode.
class InProcessLostNodeTest : public InProcessMultiNodeTest,
                              public ::testing::WithParamInterface<int> {};

TEST_P(InProcessLostNodeTest, SurvivorsReformWithoutTheLostNode) {
  const int nodes = GetParam();
  const std::string nnodes = absl::StrCat(nodes - 1, ":", nodes);
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < nodes; ++i) {
    agents.push_back(Agent(nnodes, absl::StrCat("lost", nodes), {"--steps", "120"}, "30"));
  }
  // Every worker in the full world (a node arriving late makes one more round first).
  ASSERT_TRUE(WaitUntil(
      [&] {
        std::string out;
        for (auto& a : agents) out += a->out();
        return CountMatches(out, absl::StrCat("world=", 2 * nodes, " step=\\d+ joined")) >=
               2 * nodes;
      },
      30s));
  const int victim = AgentOfNode(agents, 1, nodes);
  ASSERT_GE(victim, 0);
  agents[victim]->Signal(SIGKILL);
  const int survivors = 2 * (nodes - 1);
  const std::string smaller_world = absl::StrCat("world=", survivors, " step=\\d+ joined");
  EXPECT_TRUE(WaitUntil(
      [&] {
        std::string out;
        for (auto& a : agents) out += a->out();
        return CountMatches(out, smaller_world) >= survivors;
      },
      15s))
      << "the survivors waited for the last call";
  std::string out;
  for (size_t i = 0; i < agents.size(); ++i) {
    if (static_cast<int>(i) == victim) continue;
    auto st = agents[i]->Wait(60s);
    ASSERT_TRUE(st.has_value()) << agents[i]->err();
    EXPECT_EQ(st->exit_code, 0) << agents[i]->err();
    out += agents[i]->out() + agents[i]->err();
  }
  // The last round has the survivors only, every one of them a process of the full world's.
  const auto pids = JoinedPids(out);
  const int last = *RoundsSeen(pids).rbegin();
  std::set<int> before, after;
  for (const auto& [key, pid] : pids) (key.second == last ? after : before).insert(pid);
  EXPECT_EQ(static_cast<int>(after.size()), survivors) << out;
  for (int pid : after) EXPECT_EQ(before.count(pid), 1u) << "pid " << pid << " is new\n" << out;
  EXPECT_GE(CountMatches(out, smaller_world), survivors) << out;
  EXPECT_EQ(CountMatches(out, "done step=120"), survivors) << out;
}

INSTANTIATE_TEST_SUITE_P(TwoAndThreeNodes, InProcessLostNodeTest, ::testing::Values(2, 3));

}  // namespace
}  // namespace ddprun
