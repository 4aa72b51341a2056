// Issue 41, point 1: the preflight before the first round, with real processes. ddprun-rdzv on
// host 1 of a few namespaced hosts, a ddprun agent on each of the others (--nnodes=3, one worker
// each); one host's link limited by tc to 100 Mbit/s both ways, a small fraction of what the
// bridge carries between the others. The preflight must name that host with its figures and,
// with a spare connected, keep it out (set aside, saying why; its agent exits 5 if the job ends
// first) while the spare takes its place; once it passes the preflight again it is a spare;
// without a spare the job starts with it and says so. Bad --preflight-margin: exit 2.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/net_hosts.h"
#include "tests/testing/rdzv_daemon.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using testing::BinPath;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Subprocess;
using testing::WaitUntil;

constexpr char kToken[] = "preflight-test-token";

class PreflightIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = testing::NetHosts::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    hosts_ = std::make_unique<testing::NetHosts>(5);
    ASSERT_TRUE(hosts_->error().empty()) << hosts_->error();
    daemon_ = testing::RdzvDaemon::OnHost(*hosts_, 1, kToken);
    ASSERT_FALSE(daemon_->endpoint().empty()) << daemon_->error();
  }

  void TearDown() override {
    for (auto& [host, agent] : agents_) agent->SignalGroup(SIGTERM);
    for (auto& [host, agent] : agents_) agent->Wait(30s);
  }

  // An agent of run "pf" (3 members) on `host`: one worker that sleeps a second. `endpoint`:
  // ddprun-rdzv's unless given (host 2's address: its agent hosts the server; or etcd's, with
  // `backend` etcd).
  Subprocess& StartAgent(int host, const std::string& endpoint = "",
                         const std::string& backend = "c10d") {
    return StartAgentWith(host, {}, "sleep 1", endpoint, backend);
  }
  // As StartAgent, with `flags` added and the worker running `script` (sh -c).
  Subprocess& StartAgentWith(int host, const std::vector<std::string>& flags,
                             const std::string& script, const std::string& endpoint = "",
                             const std::string& backend = "c10d") {
    std::vector<std::string> argv = {
        BinPath("ddprun"),
        "--nnodes=3",
        "--nproc-per-node=1",
        "--rdzv-backend=" + backend,
        "--rdzv-endpoint=" + (endpoint.empty() ? daemon_->endpoint() : endpoint),
        "--rdzv-id=pf",
        "--log-dir=" + LogDir(host)};
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (const char* word : {"--no-python", "/bin/sh", "-c"}) argv.push_back(word);
    argv.push_back(script);
    agents_[host] = std::make_unique<Subprocess>(
        hosts_->On(host, argv), std::map<std::string, std::string>{{"DDPRUN_RDZV_TOKEN", kToken}});
    return *agents_[host];
  }
  std::string LogDir(int host) const { return absl::StrCat(dir_.path(), "/h", host); }
  // The agent's exit code once it ended within `limit`; -1 if it did not.
  int ExitOf(int host, std::chrono::seconds limit = 60s) {
    const std::optional<testing::ExitStatus> status = agents_.at(host)->Wait(limit);
    return status.has_value() && status->exited() ? status->exit_code : -1;
  }
  std::string Logs() const {
    std::string all = absl::StrCat("--- ddprun-rdzv\n", daemon_->error());
    for (const auto& [host, agent] : agents_) {
      absl::StrAppend(&all, "--- host ", host, "\n", agent->err());
    }
    return all;
  }
  // The lines of the server's log that hold `text`.
  std::vector<std::string> ServerLines(const std::string& text) const {
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(daemon_->error(), '\n')) {
      if (line.find(text) != absl::string_view::npos) lines.emplace_back(line);
    }
    return lines;
  }

  void ExpectASpareOnlyOncePassed(const std::string& endpoint, const std::string& backend,
                                  const std::function<std::string()>& server_log);

  std::unique_ptr<testing::NetHosts> hosts_;
  std::unique_ptr<testing::RdzvDaemon> daemon_;
  std::map<int, std::unique_ptr<Subprocess>> agents_;
  testing::TempDir dir_;
};

TEST_F(PreflightIntegrationTest, ARateLimitedHostIsKeptOutAndTheSpareTakesItsPlace) {
  ASSERT_EQ(hosts_->LimitRate(4, "100mbit"), "");
  for (int host : {2, 3, 4, 5}) StartAgent(host);  // three members and a spare, all at once
  EXPECT_EQ(ExitOf(4), 5) << Logs();
  EXPECT_THAT(agents_[4]->err(),
              HasSubstr("set aside: this node was kept out by the preflight: send"))
      << Logs();
  EXPECT_THAT(agents_[4]->err(), HasSubstr("the run ended with this node set aside"));
  EXPECT_THAT(agents_[4]->err(), Not(HasSubstr("starting 1 worker")));
  for (int host : {2, 3, 5}) {
    EXPECT_EQ(ExitOf(host), 0) << "host " << host << "\n" << Logs();
    EXPECT_THAT(agents_[host]->err(), HasSubstr(" of 3 (node ")) << "a world of three";
  }
  // One line a node on the server, the slow one with its figures.
  EXPECT_EQ(ServerLines("': preflight: node ").size(), 4u) << daemon_->error();
  const std::vector<std::string> slow = ServerLines("(n4): ");
  ASSERT_EQ(slow.size(), 1u) << daemon_->error();
  EXPECT_THAT(slow[0], HasSubstr("SLOW: send "));
  EXPECT_THAT(slow[0], HasSubstr("(kept out: a spare takes its place)"));
  for (const char* healthy : {"(n2): ", "(n3): ", "(n5): "}) {
    const std::vector<std::string> line = ServerLines(healthy);
    ASSERT_EQ(line.size(), 1u) << healthy << daemon_->error();
    EXPECT_THAT(line[0], HasSubstr(": ok")) << line[0];
  }
  // Each agent's own figures in its events.jsonl.
  std::ifstream events(LogDir(2) + "/pf/events.jsonl");
  std::stringstream text;
  text << events.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"step\":\"preflight\",")) << text.str();
  EXPECT_THAT(text.str(), HasSubstr("\"cpu_gflops\":"));
  EXPECT_THAT(text.str(), HasSubstr("\"send_mbps\":"));
}

TEST_F(PreflightIntegrationTest, WithoutASpareTheJobStartsWithTheSlowHostAndSaysSo) {
  ASSERT_EQ(hosts_->LimitRate(3, "100mbit"), "");
  for (int host : {2, 3, 4}) StartAgent(host);
  for (int host : {2, 3, 4}) EXPECT_EQ(ExitOf(host), 0) << "host " << host << "\n" << Logs();
  const std::vector<std::string> slow = ServerLines("(n3): ");
  ASSERT_EQ(slow.size(), 1u) << daemon_->error();
  EXPECT_THAT(slow[0], HasSubstr("SLOW: "));
  EXPECT_THAT(slow[0], Not(HasSubstr("kept out")));
  EXPECT_EQ(ServerLines("no spare to take their places: the job starts with them").size(), 1u)
      << daemon_->error();
}

// The built-in server, hosted by the slow host's agent: kept out, it stays in the run, set aside,
// serving it until the others finish (gone at once, it would cost them a failover at their
// start), then exits 5.
TEST_F(PreflightIntegrationTest, AKeptOutHostingAgentServesTheOthersUntilTheyFinish) {
  ASSERT_EQ(hosts_->LimitRate(2, "100mbit"), "");
  const std::string endpoint = hosts_->Address(2) + ":29433";
  StartAgent(2, endpoint);
  ASSERT_TRUE(agents_[2]->WaitForOutputContains("hosting the rendezvous", 30s)) << Logs();
  for (int host : {3, 4, 5}) StartAgent(host, endpoint);
  for (int host : {3, 4, 5}) {
    EXPECT_EQ(ExitOf(host), 0) << "host " << host << "\n" << Logs();
    EXPECT_THAT(agents_[host]->err(), HasSubstr(" of 3 (node ")) << "a world of three";
    EXPECT_THAT(agents_[host]->err(), Not(HasSubstr("successor"))) << "no failover";
  }
  EXPECT_EQ(ExitOf(2), 5) << Logs();
  EXPECT_THAT(agents_[2]->err(), HasSubstr("set aside: this node was kept out by the preflight"));
  EXPECT_THAT(agents_[2]->err(), HasSubstr("the run ended with this node set aside"));
}

// Issue 41, point 2: a node kept out becomes a spare only once it passes the preflight again.
// Host 4's link is limited: kept out, it measures again every 2 s (requalify_interval) and
// fails while the limit holds; the limit lifted, it passes and waits as a spare; a member lost
// then, it takes the member's place and the job ends well on it. `server_log`: where the run's
// verdicts are logged (ddprun-rdzv's stderr, or the coordinating agent's on etcd).
void PreflightIntegrationTest::ExpectASpareOnlyOncePassed(
    const std::string& endpoint, const std::string& backend,
    const std::function<std::string()>& server_log) {
  auto endpoint_of = [&] { return endpoint.empty() ? daemon_->endpoint() : endpoint; };
  auto server_says = [&](const std::string& text) {
    return server_log().find(text) != std::string::npos;
  };
  const std::string done = dir_.path() + "/done";
  // The workers run until the test is done; one restart for the member the test kills.
  const std::string until_done = "until [ -e " + done + " ]; do sleep 0.1; done";
  for (int host : {2, 3, 4, 5}) {
    // A margin of 1 for compute too: the link is what this case is about, and a GEMM measured
    // while three nodes train next to it on this host's cores came out 0.74x-0.81x of one
    // measured at the first preflight (both cores busy with a CI build beside it).
    StartAgentWith(host,
                   {"--max-restarts=1", "--preflight-margin=1", "--rdzv-conf=requalify_interval=2"},
                   until_done, endpoint, backend);
    if (host == 2 && backend == "etcd") {
      ASSERT_TRUE(agents_[2]->WaitForOutputContains("now coordinates the etcd rendezvous", 60s))
          << Logs();
    }
  }
  ASSERT_TRUE(agents_[4]->WaitForOutputContains(
      "set aside: this node was kept out by the preflight: send", 60s))
      << Logs();
  ASSERT_TRUE(WaitUntil([&] { return server_says("(n4) stays set aside: send "); }, 60s)) << Logs();
  EXPECT_THAT(agents_[4]->err(),
              HasSubstr("preflight: measuring this node to pass the preflight again"));
  // Told after the server logged it (on etcd through its inbox).
  EXPECT_TRUE(agents_[4]->WaitForOutputContains("did not pass the preflight again: send", 30s))
      << Logs();
  EXPECT_THAT(agents_[4]->err(), Not(HasSubstr("waiting as a spare"))) << "not a spare yet";
  // `ddprun status` (the server's state, or etcd's durable record) says so.
  Subprocess status(hosts_->On(2, {BinPath("ddprun"), "status", "--rdzv-backend=" + backend,
                                   "--rdzv-endpoint=" + endpoint_of(), "--rdzv-id=pf"}),
                    {{"DDPRUN_RDZV_TOKEN", kToken}});
  status.Wait(30s);
  EXPECT_THAT(status.out(),
              ::testing::ContainsRegex("\n  n4  n4_[^\n]*SLOW: send [^\n]*\\(kept out: a spare"))
      << "the preflight's verdicts\n"
      << status.out();
  EXPECT_THAT(status.out(), ::testing::ContainsRegex("  set aside +n4 [^\n]* set aside  n4_"))
      << status.out() << status.err();

  ASSERT_EQ(hosts_->ClearRate(4), "");
  ASSERT_TRUE(agents_[4]->WaitForOutputContains("waiting as a spare for run pf", 60s)) << Logs();
  EXPECT_TRUE(server_says("(n4) passed the preflight again: ")) << server_log();
  EXPECT_THAT(agents_[4]->err(), Not(HasSubstr("starting 1 worker")));

  agents_[3]->SignalGroup(SIGKILL);
  ASSERT_TRUE(agents_[4]->WaitForOutputContains("starting 1 worker", 60s)) << Logs();
  testing::WriteFile(done, "");
  for (int host : {2, 4, 5}) {
    EXPECT_EQ(ExitOf(host), 0) << "host " << host << "\n" << Logs();
  }
  EXPECT_THAT(agents_[4]->err(), HasSubstr(" of 3 (node ")) << "a world of three";
}

TEST_F(PreflightIntegrationTest, AHostKeptOutIsASpareOnlyOnceItPassesThePreflightAgain) {
  ASSERT_EQ(hosts_->LimitRate(4, "100mbit"), "");
  ExpectASpareOnlyOncePassed("", "c10d", [this] { return daemon_->error(); });
}

// The same on etcd: the coordinator's RunState asks through the inbox and reads the report at
// the node's preflight/ key.
TEST_F(PreflightIntegrationTest, OnEtcdAHostKeptOutIsASpareOnlyOnceItPassesThePreflightAgain) {
  if (const std::string why = testing::EtcdCluster::Unavailable(); !why.empty())
    GTEST_SKIP() << why;
  const std::unique_ptr<Subprocess> etcd =
      testing::StartEtcdOnHost(*hosts_, 1, dir_.path() + "/etcd");
  ASSERT_EQ(hosts_->LimitRate(4, "100mbit"), "");
  ExpectASpareOnlyOncePassed(testing::EtcdEndpointOn(*hosts_, 1), "etcd",
                             [this] { return agents_[2]->err(); });
}

// The etcd backend: the agent that coordinates the run (host 2's, started first) runs the
// preflight as the server does; its requests go to the agents' inboxes and their reports to
// their preflight/ keys. The rate-limited host is kept out, the spare takes its place, and the
// coordinator logs one line a node.
TEST_F(PreflightIntegrationTest, OnEtcdTheCoordinatingAgentKeepsTheRateLimitedHostOut) {
  if (const std::string why = testing::EtcdCluster::Unavailable(); !why.empty())
    GTEST_SKIP() << why;
  const std::unique_ptr<Subprocess> etcd =
      testing::StartEtcdOnHost(*hosts_, 1, dir_.path() + "/etcd");
  const std::string endpoint = testing::EtcdEndpointOn(*hosts_, 1);
  ASSERT_EQ(hosts_->LimitRate(4, "100mbit"), "");
  StartAgent(2, endpoint, "etcd");
  ASSERT_TRUE(agents_[2]->WaitForOutputContains("now coordinates the etcd rendezvous", 60s))
      << Logs() << "\n--- etcd\n"
      << etcd->err();
  for (int host : {3, 4, 5}) StartAgent(host, endpoint, "etcd");
  EXPECT_EQ(ExitOf(4), 5) << Logs();
  EXPECT_THAT(agents_[4]->err(), HasSubstr("kept out by the preflight: send")) << Logs();
  for (int host : {2, 3, 5}) {
    EXPECT_EQ(ExitOf(host), 0) << "host " << host << "\n" << Logs();
    EXPECT_THAT(agents_[host]->err(), HasSubstr(" of 3 (node ")) << "a world of three";
  }
  const std::string coordinator = agents_[2]->err();
  EXPECT_EQ(testing::CountMatches(coordinator, "': preflight: node "), 4) << coordinator;
  EXPECT_THAT(coordinator, ::testing::ContainsRegex("\\(n4\\): [^\n]*SLOW: send [^\n]*\\(kept out: "
                                                    "a spare takes its place\\)"))
      << coordinator;
}

TEST_F(PreflightIntegrationTest, ABadMarginIsOneLineAndExitTwo) {
  Subprocess bad(
      {BinPath("ddprun"), "--nnodes=2", "--preflight-margin=-1", "--no-python", "/bin/true"});
  EXPECT_EQ(bad.Wait(30s).value_or(testing::ExitStatus{}).exit_code, 2);
  const std::string said = bad.err();
  EXPECT_THAT(said, HasSubstr("--preflight-margin=-1: must be a fraction above 0"));
  EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 1) << said;
  Subprocess word(
      {BinPath("ddprun"), "--nnodes=2", "--preflight=sometimes", "--no-python", "/bin/true"});
  EXPECT_EQ(word.Wait(30s).value_or(testing::ExitStatus{}).exit_code, 2);
  EXPECT_THAT(word.err(), HasSubstr("--preflight=sometimes: expected auto, on or off"));
}

}  // namespace
}  // namespace ddprun
