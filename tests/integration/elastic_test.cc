// Multi-node behaviour of real ddprun agents on loopback, one test body per behaviour, run
// against every rendezvous backend (the built-in gRPC server, and etcd v3 on a real 3-member
// cluster). Workers are tiny shell scripts that log what they were given.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "tests/testing/etcd_cluster.h"
#include "tests/testing/rdzv_daemon.h"
#include "tests/testing/reserved_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using testing::BinPath;
using testing::CountMatches;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::ReservedPort;
using testing::SourcePath;
using testing::Subprocess;
using testing::TempDir;
using testing::WaitUntil;
using testing::WriteFile;
using namespace std::chrono_literals;

constexpr char kToken[] = "elastic-test-token";

// A rendezvous service for the agents of one test.
class Backend {
 public:
  virtual ~Backend() = default;
  // Flags every agent of the test gets (backend, endpoint).
  virtual std::vector<std::string> AgentFlags() const = 0;
};

// ddprun-rdzv on loopback, port 0, the port read from its first line.
class BuiltinBackend : public Backend {
 public:
  explicit BuiltinBackend(const std::string& host = "127.0.0.1") : daemon_(kToken, host) {
    EXPECT_FALSE(daemon_.endpoint().empty()) << daemon_.error();
  }
  std::vector<std::string> AgentFlags() const override {
    return {"--rdzv-backend=c10d", "--rdzv-endpoint=" + daemon_.endpoint()};
  }
  const std::string& endpoint() const { return daemon_.endpoint(); }

 private:
  testing::RdzvDaemon daemon_;
};

// A 3-member etcd cluster of its own. A short lease (1.5 s, etcd rounds it up to 2 s) so that a
// killed agent is lost quickly: etcd notices a dead agent only when its lease expires.
class EtcdBackend : public Backend {
 public:
  EtcdBackend() : cluster_(3) { healthy_ = cluster_.WaitHealthy(20s); }
  std::vector<std::string> AgentFlags() const override {
    return {"--rdzv-backend=etcd", "--rdzv-endpoint=" + cluster_.endpoints(),
            "--rdzv-conf=etcd_prefix=/elastic-test,keep_alive_interval=0.5,"
            "keep_alive_max_attempt=3"};
  }
  bool healthy() const { return healthy_; }

 private:
  testing::EtcdCluster cluster_;
  bool healthy_ = false;
};

std::unique_ptr<Backend> MakeBackend(const std::string& name) {
  if (name == "builtin") return std::make_unique<BuiltinBackend>();
  if (name == "etcd") return std::make_unique<EtcdBackend>();
  return nullptr;
}

// Writes DIR/pid-<RANK>-<ROUND> (complete before the log line, so a test that saw the line can
// read the pid), logs "round=R world=W rank=R group=G restart=N" for every worker start into
// DIR/log, then runs `then` (shell).
std::string LoggingWorker(const TempDir& dir, const std::string& name, const std::string& then) {
  const std::string path = dir.File(name);
  const std::string pid = dir.File("pid-$RANK-$DDPRUN_ROUND");
  WriteFile(path,
            "#!/bin/sh\n"
            "echo $$ > " +
                pid + ".tmp && mv " + pid + ".tmp " + pid + "\n" +
                "echo \"round=$DDPRUN_ROUND world=$WORLD_SIZE rank=$RANK group=$GROUP_RANK "
                "restart=$TORCHELASTIC_RESTART_COUNT host=$TORCHELASTIC_RUN_ID\" >> " +
                dir.File("log") + "\n" + then + "\n",
            0755);
  return path;
}

class ElasticTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "etcd") {
      if (const std::string why = testing::EtcdCluster::Unavailable(); !why.empty()) {
        GTEST_SKIP() << why;
      }
    }
    backend_ = MakeBackend(GetParam());
    if (auto* etcd = dynamic_cast<EtcdBackend*>(backend_.get())) {
      ASSERT_TRUE(etcd->healthy()) << "the test's etcd cluster did not become healthy";
    }
  }

  std::unique_ptr<Subprocess> Agent(const std::vector<std::string>& flags,
                                    const std::vector<std::string>& worker,
                                    std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {BinPath("ddprun")};
    // --rdzv-conf may be given once: the test's keys join the backend's (and win).
    const std::string kConf = "--rdzv-conf=";
    std::string conf;
    for (const auto& list : {backend_->AgentFlags(), flags}) {
      for (const auto& f : list) {
        if (f.rfind(kConf, 0) == 0) {
          conf += (conf.empty() ? "" : ",") + f.substr(kConf.size());
        } else {
          argv.push_back(f);
        }
      }
    }
    if (!conf.empty()) argv.push_back(kConf + conf);
    argv.push_back("--no-python");
    for (const auto& w : worker) argv.push_back(w);
    env.emplace("DDPRUN_RDZV_TOKEN", kToken);
    return std::make_unique<Subprocess>(argv, env);
  }

  std::string Log() const { return ReadFile(dir_.File("log")); }

  TempDir dir_;
  std::unique_ptr<Backend> backend_;
};

TEST_P(ElasticTest, TwoAgentsFormOneGlooWorld) {
  TempDir out;
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(
        Agent({"--nnodes=2", "--nproc-per-node=2", "--rdzv-id=gloo"},
              {testing::SystemPython(), SourcePath("tests/integration/scripts/gloo_allreduce.py"),
               out.path()}));
  }
  ASSERT_TRUE(testing::ExpectAllExit(agents, 0, 90s));
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(ReadFile(out.File("rank" + std::to_string(rank) + ".txt")), "4 6\n") << rank;
  }
}

TEST_P(ElasticTest, FourAgentsGetUniqueRanks) {
  const std::string worker = LoggingWorker(dir_, "w.sh", "exit 0");
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 4; ++i) {
    agents.push_back(Agent({"--nnodes=4", "--nproc-per-node=2", "--rdzv-id=four"}, {worker}));
  }
  ASSERT_TRUE(testing::ExpectAllExit(agents, 0, 30s));
  const std::string log = Log();
  std::set<int> ranks, groups;
  std::regex re("world=(\\d+) rank=(\\d+) group=(\\d+)");
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it) {
    EXPECT_EQ((*it)[1], "8");
    ranks.insert(std::stoi((*it)[2]));
    groups.insert(std::stoi((*it)[3]));
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(groups, (std::set<int>{0, 1, 2, 3}));
}

TEST_P(ElasticTest, KilledAgentTakesItsWorkersAndSurvivorsFinishSmaller) {
  // Workers wait while the world has 3 nodes (6 workers) and succeed once it has 2.
  const std::string worker =
      LoggingWorker(dir_, "w.sh", "[ \"$WORLD_SIZE\" = 4 ] && exit 0\nsleep 60 & wait $!");
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 3; ++i) {
    agents.push_back(Agent({"--nnodes=2:3", "--nproc-per-node=2", "--max-restarts=1",
                            "--rdzv-id=kill9", "--rdzv-conf=last_call_timeout=1"},
                           {worker}));
  }
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(Log(), "world=6") == 6; }, 30s)) << Log();
  // The workers of the last agent (group rank 2: ranks 4 and 5).
  std::vector<int> victims;
  for (int rank : {4, 5}) {
    std::string pids;
    for (int round = 0; round < 10 && pids.empty(); ++round) {
      pids = ReadFile(dir_.File("pid-" + std::to_string(rank) + "-" + std::to_string(round)));
    }
    victims.push_back(std::atoi(pids.c_str()));
  }
  // Which agent is group 2? The one whose stderr says "node 2 of 3".
  int victim_agent = -1;
  for (int i = 0; i < 3; ++i) {
    if (agents[i]->err().find("(node 2 of 3)") != std::string::npos) victim_agent = i;
  }
  ASSERT_GE(victim_agent, 0);
  const auto killed_at = std::chrono::steady_clock::now();
  agents[victim_agent]->Signal(SIGKILL);
  for (int i = 0; i < 3; ++i) {
    if (i == victim_agent) continue;
    auto st = agents[i]->Wait(30s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 0) << agents[i]->err();
    EXPECT_THAT(agents[i]->err(), HasSubstr("(node"));
    // The survivor's restart, as one timeline line (the new round may complete before or
    // after the old workers are all stopped). On etcd the killed agent may have been the
    // coordinator (it created the key first): the next one then says so.
    EXPECT_EQ(CountMatches(agents[i]->err(),
                           "restart 1: node \\S+ (\\(\\S+\\) was lost: |was lost while the "
                           "rendezvous changed coordinator).* -> "
                           "all stopped \\+\\d+ ms -> .*2 workers running"),
              1)
        << agents[i]->err();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 10s);
  EXPECT_EQ(CountMatches(Log(), "world=4"), 4) << Log();
  for (int pid : victims) EXPECT_FALSE(testing::ProcessAlive(pid)) << pid;
}

TEST_P(ElasticTest, StoppedAgentIsLostAfterItsLease) {
  const std::string worker =
      LoggingWorker(dir_, "w.sh", "[ \"$WORLD_SIZE\" = 2 ] && exit 0\nsleep 60 & wait $!");
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(
        Agent({"--nnodes=1:2", "--nproc-per-node=2", "--max-restarts=1", "--rdzv-id=sigstop",
               "--rdzv-conf=keep_alive_interval=0.2,keep_alive_max_attempt=3,"
               "last_call_timeout=1"},
              {worker}));
  }
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(Log(), "world=4") == 4; }, 30s)) << Log();
  int victim = agents[1]->err().find("(node 1 of 2)") != std::string::npos ? 1 : 0;
  agents[victim]->Signal(SIGSTOP);
  const auto stopped_at = std::chrono::steady_clock::now();
  auto st = agents[1 - victim]->Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << agents[1 - victim]->err();
  // Lease 0.6 s; the survivors' restart and their new workers' run fit well within 10 s.
  EXPECT_LT(std::chrono::steady_clock::now() - stopped_at, 10s);
  // Resumed, the lost node hears it was given up and stops its workers (it must not carry on);
  // elastic, it comes back as a new node (joining the survivor, or finding the job finished
  // without it) and exits 0 with the job.
  agents[victim]->Signal(SIGCONT);
  auto lost = agents[victim]->Wait(30s);
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(lost->exit_code, 0) << agents[victim]->err();
  EXPECT_THAT(agents[victim]->err(), HasSubstr("rejoining as a new node"));
}

TEST_P(ElasticTest, LateAgentScalesUpWithoutSpendingTheBudget) {
  const std::string worker =
      LoggingWorker(dir_, "w.sh", "[ \"$WORLD_SIZE\" = 4 ] && exit 0\nsleep 60 & wait $!");
  const std::vector<std::string> flags = {"--nnodes=1:2", "--nproc-per-node=2", "--max-restarts=0",
                                          "--rdzv-id=late", "--rdzv-conf=last_call_timeout=0.2"};
  auto first = Agent(flags, {worker});
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(Log(), "world=2") == 2; }, 30s)) << Log();
  auto second = Agent(flags, {worker});
  for (auto* a : {first.get(), second.get()}) {
    auto st = a->Wait(30s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 0) << a->err();
  }
  EXPECT_EQ(CountMatches(Log(), "world=4 rank=\\d group=\\d restart=0"), 4) << Log();
  // A scale-up is named by its round, not counted as a restart.
  EXPECT_EQ(CountMatches(first->err(),
                         "round \\d+: node \\S+ \\(\\S+\\) joined -> .*all stopped "
                         "\\+\\d+ ms.* -> 2 workers running \\+\\d+ ms"),
            1)
      << first->err();
}

TEST_P(ElasticTest, WorkerFailureOnOneNodeRestartsEveryNodeAndSpendsTheBudgetOnce) {
  // Global rank 3 fails in the first round only.
  const std::string worker =
      LoggingWorker(dir_, "w.sh",
                    // Fails once all four workers of the first round have logged (bounded: 10 s).
                    "if [ \"$RANK\" = 3 ] && [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then\n"
                    "  i=0; while [ $(grep -c restart=0 " +
                        dir_.File("log") +
                        ") -lt 4 ] && [ $i -lt 1000 ]; "
                        "do sleep 0.01; i=$((i+1)); done\n"
                        "  exit 5\nfi\n"
                        "[ \"$TORCHELASTIC_RESTART_COUNT\" = 1 ] && exit 0\nsleep 60 & wait $!");
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(Agent(
        {"--nnodes=2", "--nproc-per-node=2", "--max-restarts=1", "--rdzv-id=failone"}, {worker}));
  }
  ASSERT_TRUE(testing::ExpectAllExit(agents, 0, 30s));
  const std::string log = Log();
  EXPECT_EQ(CountMatches(log, "restart=0"), 4) << log;
  EXPECT_EQ(CountMatches(log, "restart=1"), 4) << log;  // every node restarted, once
  EXPECT_EQ(CountMatches(log, "restart=2"), 0) << log;
}

// A hang is a failure of the job: the node that sees it reports it, every node takes its
// workers' stacks and restarts, and every node names the straggler from the progress the agents
// carry in their heartbeats.
TEST_P(ElasticTest, AHangOnOneNodeTakesStacksEverywhereRestartsAllAndNamesTheStraggler) {
  // Attempt 0: global rank 3 goes silent; every other rank prints every 0.2 s. Then all finish.
  const std::string worker =
      LoggingWorker(dir_, "w.sh",
                    "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then\n"
                    "  [ \"$RANK\" = 3 ] && sleep 60\n"
                    "  i=0; while [ $i -lt 300 ]; do echo tick; sleep 0.2; i=$((i+1)); done\n"
                    "fi\nexit 0");
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(
        Agent({"--nnodes=2", "--nproc-per-node=2", "--max-restarts=1", "--rdzv-id=hang",
               "--hang-timeout=2", "--log-dir=" + dir_.File("logs" + std::to_string(i))},
              {worker}));
  }
  ASSERT_TRUE(testing::ExpectAllExit(agents, 0, 60s));
  EXPECT_EQ(CountMatches(Log(), "restart=1"), 4) << Log();  // every node restarted, once
  for (int i = 0; i < 2; ++i) {
    const std::string err = agents[i]->err();
    EXPECT_THAT(err, HasSubstr("straggler of the hang (lowest step, then oldest progress, all "
                               "nodes): rank 3 on "))
        << err;
    EXPECT_THAT(err, HasSubstr("taking the stacks of this node's workers")) << err;
    // Both local workers' stacks, in the one run folder of this agent's --log-dir.
    int stacks = 0;
    for (const auto& run :
         std::filesystem::directory_iterator(dir_.File("logs" + std::to_string(i)))) {
      for (int lr : {0, 1}) {
        stacks +=
            !ReadFile(run.path().string() + "/attempt_0/" + std::to_string(lr) + "/stacks.txt")
                 .empty();
      }
    }
    EXPECT_EQ(stacks, 2) << err;
  }
}

TEST_P(ElasticTest, BudgetSpentAcrossNodesExitsOneEverywhere) {
  const std::string worker =
      LoggingWorker(dir_, "w.sh", "[ \"$RANK\" = 2 ] && exit 9\nsleep 60 & wait $!");
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(Agent(
        {"--nnodes=2", "--nproc-per-node=2", "--max-restarts=1", "--rdzv-id=spent"}, {worker}));
  }
  for (auto& a : agents) {
    auto st = a->Wait(30s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 1) << a->err();
    EXPECT_THAT(a->err(), HasSubstr("restart budget spent"));
    EXPECT_THAT(a->err(), HasSubstr("exited with code 9"));
  }
  // Every node was restarted once (rank 2, which fails at once, shows it for certain; the
  // other ranks may be stopped before they log).
  EXPECT_EQ(CountMatches(Log(), "rank=2 group=1 restart=1"), 1) << Log();
  EXPECT_EQ(CountMatches(Log(), "restart=2"), 0) << Log();
}

// ddprun's shared token guards the built-in server; etcd authenticates its own users instead
// (a wrong etcd password: EtcdTest.UserAndPasswordAuthentication in etcd_test.cc).
using TokenTest = ElasticTest;

TEST_P(TokenTest, WrongTokenIsRefusedWithExitThree) {
  auto a = Agent({"--nnodes=1", "--rdzv-id=tok"}, {"true"}, {{"DDPRUN_RDZV_TOKEN", "wrong"}});
  // Agent() only adds the right token when none is given.
  auto st = a->Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 3);
  EXPECT_THAT(a->err(), ::testing::ContainsRegex("token|UNAUTHENTICATED|unauthenticated"));
}

TEST_P(ElasticTest, DisagreeingNodeCountsAreRefused) {
  const std::string worker = LoggingWorker(dir_, "w.sh", "sleep 60 & wait $!");
  auto a = Agent({"--nnodes=2", "--rdzv-id=disagree"}, {worker});
  // The first agent's join defines the run; wait until the server has it.
  ASSERT_TRUE(WaitUntil(
      [&] {
        std::vector<std::string> argv = {BinPath("ddprun"), "status", "--rdzv-id=disagree"};
        for (const auto& f : backend_->AgentFlags()) argv.push_back(f);
        Subprocess status(argv, {{"DDPRUN_RDZV_TOKEN", kToken}});
        auto st = status.Wait(10s);
        return st.has_value() && st->exit_code == 0 &&
               status.out().find("nodes 2:2") != std::string::npos;
      },
      10s));
  auto b = Agent({"--nnodes=3", "--rdzv-id=disagree"}, {worker});
  auto st = b->Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 3);
  EXPECT_THAT(b->err(), HasSubstr("this agent has --nnodes=3 but the run has --nnodes=2"));
}

// `ddprun status --json` describes the running run; `--watch --json` follows it, one object per
// line, until it closes.
TEST_P(ElasticTest, StatusJsonAndWatchFollowTheRunUntilItCloses) {
  const std::string go = dir_.File("go");
  const std::string worker = LoggingWorker(
      dir_, "w.sh",
      "i=0; while [ ! -e " + go + " ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done");
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(Agent({"--nnodes=2", "--nproc-per-node=1", "--rdzv-id=watched"}, {worker}));
  }
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(Log(), "world=2") == 2; }, 30s)) << Log();
  auto status_argv = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {BinPath("ddprun"), "status", "--rdzv-id=watched"};
    for (const auto& f : backend_->AgentFlags()) argv.push_back(f);
    for (const auto& f : extra) argv.push_back(f);
    return argv;
  };
  Subprocess once(status_argv({"--json"}), {{"DDPRUN_RDZV_TOKEN", kToken}});
  auto st = once.Wait(20s);
  ASSERT_TRUE(st.has_value());
  ASSERT_EQ(st->exit_code, 0) << once.err();
  const nlohmann::json run = nlohmann::json::parse(once.out());
  EXPECT_EQ(run["version"], 1);
  EXPECT_EQ(run["run_id"], "watched");
  EXPECT_EQ(run["phase"], "running");
  EXPECT_EQ(run["min_nodes"], 2);
  ASSERT_EQ(run["members"].size(), 2u) << run.dump();
  std::set<int> group_ranks;
  for (const auto& m : run["members"]) {
    group_ranks.insert(m["group_rank"].get<int>());
    EXPECT_EQ(m["state"], "running");
    EXPECT_EQ(m["nproc_per_node"], 1);
    EXPECT_FALSE(m["hostname"].get<std::string>().empty());
  }
  EXPECT_EQ(group_ranks, (std::set<int>{0, 1}));

  Subprocess watch(status_argv({"--watch", "--json", "--interval=0.2"}),
                   {{"DDPRUN_RDZV_TOKEN", kToken}});
  ASSERT_TRUE(
      WaitUntil([&] { return CountMatches(watch.out(), "\"phase\":\"running\"") >= 2; }, 20s))
      << watch.out() << watch.err();
  WriteFile(go, "");
  ASSERT_TRUE(testing::ExpectAllExit(agents, 0, 30s)) << Log();
  st = watch.Wait(20s);
  ASSERT_TRUE(st.has_value()) << "--watch ends with the run";
  EXPECT_EQ(st->exit_code, 0) << watch.err();
  // Each line one object; the last says the run closed, or the run is already forgotten.
  std::istringstream lines(watch.out());
  std::string line, last;
  while (std::getline(lines, line)) {
    ASSERT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << line;
    last = line;
  }
  EXPECT_TRUE(nlohmann::json::parse(last)["phase"] == "closed" ||
              watch.err().find("is over") != std::string::npos)
      << watch.out() << watch.err();
}

TEST_P(ElasticTest, ThirtyTwoAgents) {
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 32; ++i) {
    agents.push_back(
        Agent({"--nnodes=32", "--nproc-per-node=2", "--rdzv-id=many", "--quiet"}, {"true"}));
  }
  ASSERT_TRUE(testing::ExpectAllExit(agents, 0, 60s));
}

INSTANTIATE_TEST_SUITE_P(Builtin, TokenTest, ::testing::Values("builtin"),
                         [](const auto& info) { return info.param; });

INSTANTIATE_TEST_SUITE_P(Backends, ElasticTest, ::testing::Values("builtin", "etcd"),
                         [](const auto& info) { return info.param; });

// MASTER_ADDR is the address the server saw the rank-0 agent connect from: IPv6 works as is.
TEST(ElasticAddressTest, MasterAddrOverIpv6) {
  BuiltinBackend backend("::1");
  ASSERT_THAT(backend.endpoint(), HasSubstr("[::1]:"));
  TempDir dir;
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> argv = {BinPath("ddprun")};
    for (const auto& f : backend.AgentFlags()) argv.push_back(f);
    for (const char* f :
         {"--nnodes=2", "--nproc-per-node=1", "--rdzv-id=v6", "--no-python", "/bin/sh", "-c"}) {
      argv.push_back(f);
    }
    argv.push_back("echo \"$MASTER_ADDR $MASTER_PORT\" > " + dir.File("addr-$RANK"));
    agents.push_back(std::make_unique<Subprocess>(
        argv, std::map<std::string, std::string>{{"DDPRUN_RDZV_TOKEN", kToken}}));
  }
  ASSERT_TRUE(testing::ExpectAllExit(agents, 0, 30s));
  EXPECT_THAT(ReadFile(dir.File("addr-0")), ::testing::StartsWith("::1 "));
  EXPECT_EQ(ReadFile(dir.File("addr-0")), ReadFile(dir.File("addr-1")));
}

TEST(ElasticAddressTest, LocalAddrOverridesWhatTheServerSaw) {
  BuiltinBackend backend;
  TempDir dir;
  std::vector<std::string> argv = {BinPath("ddprun")};
  for (const auto& f : backend.AgentFlags()) argv.push_back(f);
  for (const char* f : {"--nnodes=1", "--local-addr=127.0.0.5", "--rdzv-id=local", "--no-python",
                        "/bin/sh", "-c"}) {
    argv.push_back(f);
  }
  argv.push_back("echo $MASTER_ADDR > " + dir.File("addr"));
  Subprocess a(argv, {{"DDPRUN_RDZV_TOKEN", kToken}});
  auto st = a.Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << a.err();
  EXPECT_EQ(ReadFile(dir.File("addr")), "127.0.0.5\n");
}

// torchrun's way: the agent on the endpoint's host serves the rendezvous, and it keeps serving
// after its own workers are done until the other node has finished.
TEST(ElasticHostingTest, HostingAgentServesUntilTheOthersFinish) {
  ReservedPort port;
  ASSERT_GT(port.port(), 0);
  TempDir dir;
  const std::string endpoint = "--rdzv-endpoint=127.0.0.1:" + std::to_string(port.port());
  auto host = std::make_unique<Subprocess>(std::vector<std::string>{
      BinPath("ddprun"), "--rdzv-backend=c10d", endpoint, "--rdzv-id=hosted",
      "--rdzv-conf=is_host=1", "--nnodes=2", "--no-python", "/bin/sh", "-c",
      "[ $GROUP_RANK = 0 ] || sleep 1; echo $WORLD_SIZE > " + dir.File("w-$RANK")});
  ASSERT_TRUE(host->WaitForOutputContains("hosting the rendezvous", 10s)) << host->err();
  Subprocess other({BinPath("ddprun"), "--rdzv-backend=c10d", endpoint, "--rdzv-id=hosted",
                    "--nnodes=2", "--no-python", "/bin/sh", "-c",
                    "[ $GROUP_RANK = 0 ] || sleep 1; echo $WORLD_SIZE > " + dir.File("w-$RANK")});
  auto other_st = other.Wait(30s);
  ASSERT_TRUE(other_st.has_value());
  EXPECT_EQ(other_st->exit_code, 0) << other.err();
  auto host_st = host->Wait(30s);
  ASSERT_TRUE(host_st.has_value());
  EXPECT_EQ(host_st->exit_code, 0) << host->err();
  EXPECT_EQ(ReadFile(dir.File("w-0")), "2\n");
  EXPECT_EQ(ReadFile(dir.File("w-1")), "2\n");
  // Whichever got group rank 0 finished first; if that was the host, it waited.
  if (ReadFile(dir.File("w-0")).size() > 0 &&
      host->err().find("(node 0 of 2)") != std::string::npos) {
    EXPECT_THAT(host->err(), HasSubstr("serving the rendezvous until the other nodes finish"));
  }
}

// An agent of the failover tests: 127.0.0.1:`port` (hosting with is_host=1), lease 3 s, one
// restart unless `extra` says otherwise; its worker logs its rank, world and restart to DIR/log
// and runs until DIR/done.
std::unique_ptr<Subprocess> FailoverAgent(int port, const TempDir& dir, const std::string& is_host,
                                          const std::string& nnodes,
                                          const std::vector<std::string>& extra = {
                                              "--max-restarts=1"}) {
  std::vector<std::string> argv = {
      BinPath("ddprun"),
      "--rdzv-backend=c10d",
      "--rdzv-endpoint=127.0.0.1:" + std::to_string(port),
      "--rdzv-id=failover",
      "--rdzv-conf=is_host=" + is_host +
          ",keep_alive_interval=1,keep_alive_max_attempt=3,last_call_timeout=0.2",
      "--nnodes=" + nnodes};
  argv.insert(argv.end(), extra.begin(), extra.end());
  for (const std::string& arg :
       {std::string("--no-python"), std::string("/bin/sh"), std::string("-c"),
        "echo \"rank=$RANK world=$WORLD_SIZE restart=$TORCHELASTIC_RESTART_COUNT\" >> " +
            dir.File("log") + "; while [ ! -e " + dir.File("done") + " ]; do sleep 0.05; done"}) {
    argv.push_back(arg);
  }
  return std::make_unique<Subprocess>(argv);
}

// SIGKILLs `host` and returns the seconds until both `others` run their workers again in a world
// of two (restart 1), or 99 when they do not within 20 s.
double KillTheHostAndTimeTheSurvivors(Subprocess* host,
                                      const std::vector<std::unique_ptr<Subprocess>>& others,
                                      const TempDir& dir) {
  const auto killed = std::chrono::steady_clock::now();
  host->Signal(SIGKILL);
  const bool ran = WaitUntil(
      [&] { return CountMatches(ReadFile(dir.File("log")), "world=2 restart=1") == 2; }, 20s);
  EXPECT_TRUE(ran) << ReadFile(dir.File("log")) << others[0]->err() << others[1]->err();
  return ran ? std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count()
             : 99;
}

// Issue 24: the agent that hosts the embedded server is killed. The survivors' streams break,
// its address refuses connections, and every survivor walks the successor list of the last
// assignment: the lowest group rank but the host serves the run next, the others re-register
// with it, and the lost node counts as any lost node (an elastic job goes on without it within
// less than the lease: the survivors name the host gone). The job then finishes normally.
TEST(ElasticHostingTest, TheHostingAgentKilledTheRunMovesToItsSuccessor) {
  ReservedPort port;
  ASSERT_GT(port.port(), 0);
  TempDir dir;
  const std::string done = dir.File("done");
  auto agent = [&](const std::string& is_host) {
    return FailoverAgent(port.port(), dir, is_host, "2:3");
  };
  auto host = agent("1");
  ASSERT_TRUE(host->WaitForOutputContains("hosting the rendezvous", 10s)) << host->err();
  std::vector<std::unique_ptr<Subprocess>> others;
  others.push_back(agent("0"));
  others.push_back(agent("0"));
  auto log = [&] { return ReadFile(dir.File("log")); };
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(log(), "world=3 restart=0") == 3; }, 30s))
      << log() << host->err();
  const double running = KillTheHostAndTimeTheSurvivors(host.get(), others, dir);
  std::cout << "hosting agent killed -> survivors running again: " << running << " s (lease 3 s)"
            << std::endl;
  EXPECT_LT(running, 3.0);  // the gone host is not waited for: less than its lease
  EXPECT_EQ(
      CountMatches(others[0]->err() + others[1]->err(), "hosting the rendezvous on .* \\(failover"),
      1)
      << others[0]->err() << others[1]->err();
  WriteFile(done, "");
  for (auto& a : others) {
    auto st = a->Wait(30s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 0) << a->err();
  }
}

// The hosting agent joins its own server last (its health check runs first): the others were
// told no host in Joined, learn it from the assignment, and so still fail over at once when it
// is killed instead of giving the dead host a lease as their successor (a CI flake in Slurm's
// agent mode, where every agent starts at once).
TEST(ElasticHostingTest, AHostThatJoinsLastIsStillKnownAsTheHostWhenItIsKilled) {
  ReservedPort port;
  ASSERT_GT(port.port(), 0);
  TempDir dir;
  const std::string others_joined = dir.File("others-joined");
  auto host = FailoverAgent(
      port.port(), dir, "1", "2:3",
      {"--max-restarts=3", "--health-check=i=0; while [ ! -e " + others_joined +
                               " ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done"});
  ASSERT_TRUE(host->WaitForOutputContains("hosting the rendezvous", 10s)) << host->err();
  std::vector<std::unique_ptr<Subprocess>> others;
  for (int i = 0; i < 2; ++i)
    others.push_back(FailoverAgent(port.port(), dir, "0", "2:3", {"--max-restarts=3"}));
  auto log = [&] { return ReadFile(dir.File("log")); };
  // The two others form a round without the host; then it passes its check and joins (a new
  // member costs no restart).
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(log(), "world=2 restart=0") == 2; }, 30s))
      << log() << host->err();
  WriteFile(others_joined, "");
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(log(), "world=3 restart=0") == 3; }, 30s))
      << log() << host->err() << others[0]->err();
  const double running = KillTheHostAndTimeTheSurvivors(host.get(), others, dir);
  EXPECT_LT(running, 3.0) << others[0]->err() << others[1]->err();
  EXPECT_THAT(others[0]->err() + others[1]->err(),
              HasSubstr("lost with the agent that hosted the rendezvous"));
  WriteFile(dir.File("done"), "");
  ASSERT_TRUE(testing::ExpectAllExit(others, 0, 30s));
}

// Issue 24, a fixed-size job: the hosting agent is killed, its successor takes the run, and
// the world of three waits (never runs with two) until a replacement agent started with the
// same command line reaches the successor (on one host, the same address and port); then all
// three train in restart 1 and finish.
TEST(ElasticHostingTest, AFixedJobWhoseHostingAgentIsKilledRestartsAtFullSizeWithAReplacement) {
  ReservedPort port;
  ASSERT_GT(port.port(), 0);
  TempDir dir;
  auto log = [&] { return ReadFile(dir.File("log")); };
  auto host = FailoverAgent(port.port(), dir, "1", "3");
  ASSERT_TRUE(host->WaitForOutputContains("hosting the rendezvous", 10s)) << host->err();
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) agents.push_back(FailoverAgent(port.port(), dir, "0", "3"));
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(log(), "world=3 restart=0") == 3; }, 30s))
      << log() << host->err();
  host->Signal(SIGKILL);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return CountMatches(agents[0]->err() + agents[1]->err(),
                            "hosting the rendezvous on .* \\(failover") == 1;
      },
      10s))
      << agents[0]->err() << agents[1]->err();
  // A fixed world of three cannot go on with two: nobody starts a smaller world.
  EXPECT_FALSE(WaitUntil([&] { return CountMatches(log(), "restart=1") > 0; }, 2s)) << log();
  agents.push_back(FailoverAgent(port.port(), dir, "0", "3"));  // the replacement
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(log(), "world=3 restart=1") == 3; }, 30s))
      << log() << agents[0]->err() << agents[1]->err() << agents[2]->err();
  EXPECT_EQ(CountMatches(log(), "world=2"), 0) << log();
  WriteFile(dir.File("done"), "");
  ASSERT_TRUE(testing::ExpectAllExit(agents, 0, 30s));
}

TEST(ElasticHostingTest, UnreachableEndpointExitsThreeNamingIt) {
  Subprocess a({BinPath("ddprun"), "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:1",
                "--rdzv-id=x", "--rdzv-conf=read_timeout=1,is_host=0", "--no-python", "true"});
  auto st = a.Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 3);
  EXPECT_THAT(a.err(), HasSubstr("127.0.0.1:1"));
}

}  // namespace
}  // namespace ddprun
