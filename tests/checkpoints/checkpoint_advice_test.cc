// Issue 41, point 3: checkpoint advice from what the job measures. Real ddprun agents of one run
// against ddprun-rdzv, one ddp-train mnist worker each with --checkpoint-every=auto; epochs of
// 20 steps, so a checkpoint (and its save time) comes every few seconds. The server must
// publish an interval (`ddprun status --json`, /metrics), recompute it as failures happen
// (each SIGKILLed worker shortens the MTBF estimate and the interval), and the workers must
// follow it (ddp-train says so).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/rdzv_daemon.h"
#include "tests/testing/spare_cluster.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using testing::BinPath;
using ::testing::HasSubstr;
using testing::Subprocess;
using testing::TempDir;
using testing::WaitUntil;

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";
constexpr char kToken[] = "checkpoint-advice-test-token";

// The advice as `ddprun status --json` shows it.
struct Advice {
  double interval_s = 0;
  double mtbf_s = 0;
  int failures = -1;
};

std::optional<double> NumberAfter(const std::string& json, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\":\\s*([-0-9.eE+]+)"))) {
    return std::nullopt;
  }
  return std::stod(m[1].str());
}

class CheckpointAdviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kData, R_OK) != 0) GTEST_SKIP() << kData << " missing (dataset-fashion-mnist)";
    daemon_ = testing::RdzvDaemon::WithHttp(kToken);
    ASSERT_FALSE(daemon_->endpoint().empty()) << daemon_->error();
    ASSERT_GT(daemon_->http_port(), 0) << daemon_->output();
  }

  void TearDown() override {
    for (auto& agent : agents_) agent->SignalGroup(SIGTERM);
    for (auto& agent : agents_) agent->Wait(30s);
  }

  // One of the run's two agents, against ddprun-rdzv or, given its endpoint, etcd.
  Subprocess& StartAgent(const std::string& etcd_endpoint = "") {
    std::vector<std::string> argv = {
        BinPath("ddprun"),
        "--nnodes=2",
        "--nproc-per-node=1",
        "--max-restarts=5",
        "--restart-mode=in-process",
        etcd_endpoint.empty() ? "--rdzv-backend=c10d" : "--rdzv-backend=etcd",
        "--rdzv-endpoint=" + (etcd_endpoint.empty() ? daemon_->endpoint() : etcd_endpoint),
        "--rdzv-id=advice",
        "--rdzv-conf=mtbf=600",
        "--no-python",
        BinPath("ddp-train"),
        "mnist",
        "--data",
        kData,
        "--no-progress-bar",
        "--epochs",
        "1000",
        "--max-steps",
        "20",
        "--test-subset",
        "200",
        "--batch-size",
        "32",
        "--checkpoint-dir",
        dir_.File("checkpoints"),
        "--checkpoint-every=auto"};
    agents_.push_back(std::make_unique<Subprocess>(
        argv, std::map<std::string, std::string>{{"DDPRUN_RDZV_TOKEN", kToken},
                                                 {"OMP_NUM_THREADS", "1"}}));
    return *agents_.back();
  }

  // `ddprun status --json` of the run, from ddprun-rdzv or, given its endpoint, etcd.
  std::string StatusJson(const std::string& etcd_endpoint = "") {
    Subprocess status(
        {BinPath("ddprun"), "status", "--json",
         etcd_endpoint.empty() ? "--rdzv-backend=c10d" : "--rdzv-backend=etcd",
         "--rdzv-endpoint=" + (etcd_endpoint.empty() ? daemon_->endpoint() : etcd_endpoint),
         "--rdzv-id=advice"},
        {{"DDPRUN_RDZV_TOKEN", kToken}});
    status.Wait(30s);
    return status.out();
  }
  std::optional<Advice> CurrentAdvice(const std::string& etcd_endpoint = "") {
    const std::string json = StatusJson(etcd_endpoint);
    const size_t at = json.find("\"checkpoint_advice\"");
    if (at == std::string::npos) return std::nullopt;
    const std::string advice = json.substr(at);
    Advice a;
    a.interval_s = NumberAfter(advice, "interval_s").value_or(0);
    a.mtbf_s = NumberAfter(advice, "mtbf_s").value_or(0);
    a.failures = static_cast<int>(NumberAfter(advice, "failures").value_or(-1));
    return a;
  }
  // Waits until the advice `ddprun status` shows counts `failures` failures.
  std::optional<Advice> WaitForAdvice(int failures, std::chrono::seconds limit,
                                      const std::string& etcd_endpoint = "") {
    std::optional<Advice> seen;
    WaitUntil(
        [&] {
          seen = CurrentAdvice(etcd_endpoint);
          return seen.has_value() && seen->failures == failures;
        },
        limit);
    if (!seen.has_value() || seen->failures != failures) return std::nullopt;
    return seen;
  }
  std::string Metrics() const { return daemon_->Metrics(); }
  std::string Logs() const {
    std::string out = absl::StrCat("--- ddprun-rdzv:\n", daemon_->error());
    // The workers' output comes through their agent's: ddp-train's log lines on its stdout.
    for (const auto& a : agents_) {
      absl::StrAppend(&out, "--- agent ", a->pid(), ":\n", a->err(), a->out());
    }
    return out;
  }
  // SIGKILLs the worker of `agent`: a failure the run restarts from (in-process).
  void KillWorkerOf(const Subprocess& agent) {
    std::vector<pid_t> workers;
    ASSERT_TRUE(WaitUntil(
        [&] {
          workers = testing::AgentWorkerPids(agent.pid());
          return !workers.empty();
        },
        60s));
    for (pid_t w : workers) kill(w, SIGKILL);
  }

  TempDir dir_;
  std::unique_ptr<testing::RdzvDaemon> daemon_;
  std::vector<std::unique_ptr<Subprocess>> agents_;
};

TEST_F(CheckpointAdviceTest, AdviceIsPublishedRecomputedAsFailuresHappenAndFollowed) {
  Subprocess& first = StartAgent();
  StartAgent();
  const std::optional<Advice> before = WaitForAdvice(0, 90s);
  ASSERT_TRUE(before.has_value()) << Logs();
  std::cout << "no failure: every " << before->interval_s << " s, MTBF " << before->mtbf_s
            << " s\n";
  EXPECT_GE(before->mtbf_s, 600) << "the prior, and the time trained";
  EXPECT_GT(before->interval_s, 0);
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics,
              HasSubstr("ddprun_rdzv_checkpoint_interval_advice_seconds{run_id=\"advice\"} "))
      << metrics;
  EXPECT_THAT(metrics,
              HasSubstr("ddprun_rdzv_checkpoint_advice_predicted_ratio{run_id=\"advice\"}"))
      << metrics;

  ASSERT_NO_FATAL_FAILURE(KillWorkerOf(first));
  const std::optional<Advice> one = WaitForAdvice(1, 90s);
  ASSERT_TRUE(one.has_value()) << Logs();
  ASSERT_NO_FATAL_FAILURE(KillWorkerOf(first));
  const std::optional<Advice> two = WaitForAdvice(2, 90s);
  ASSERT_TRUE(two.has_value()) << Logs();
  std::cout << "1 failure: every " << one->interval_s << " s, MTBF " << one->mtbf_s
            << " s; 2 failures: every " << two->interval_s << " s, MTBF " << two->mtbf_s << " s\n";
  EXPECT_LT(one->mtbf_s, before->mtbf_s);
  EXPECT_LT(two->mtbf_s, one->mtbf_s);
  EXPECT_LT(one->interval_s, before->interval_s);
  EXPECT_LT(two->interval_s, one->interval_s);

  // The workers follow it: rank 0's ddp-train says so (its output is in its agent's).
  ASSERT_TRUE(WaitUntil([&] { return Logs().find("as ddprun advises") != std::string::npos; }, 60s))
      << Logs();
  EXPECT_THAT(Logs(), HasSubstr("checkpoint advice: every ")) << "the agents log it";
}

// The advice each agent logged ("checkpoint advice: every S s"), in order.
std::vector<double> AdviceLogged(const std::string& log) {
  std::vector<double> out;
  const std::regex line("checkpoint advice: every ([0-9.]+) s");
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) {
    out.push_back(std::stod((*it)[1].str()));
  }
  return out;
}

// The etcd backend: the agent that coordinates the run computes the advice from the figures every
// agent puts at its figures/ key, and writes it to the run's advice key, which every agent
// watches. Both agents learn it (the coordinator from its own write), a failure shortens it, and
// the workers follow it. `ddprun status` shows it in full (the coordinator's report key).
TEST_F(CheckpointAdviceTest, OnEtcdTheCoordinatorPublishesTheAdviceToEveryAgent) {
  if (const std::string why = testing::EtcdCluster::Unavailable(); !why.empty())
    GTEST_SKIP() << why;
  testing::EtcdCluster etcd(1);
  ASSERT_TRUE(etcd.WaitHealthy(30s));
  Subprocess& first = StartAgent(etcd.endpoints());
  Subprocess& second = StartAgent(etcd.endpoints());
  ASSERT_TRUE(WaitUntil(
      [&] { return !AdviceLogged(first.err()).empty() && !AdviceLogged(second.err()).empty(); },
      90s))
      << Logs();
  const double before = AdviceLogged(first.err()).front();
  std::cout << "no failure: every " << before << " s\n";
  EXPECT_GT(before, 0);
  const std::optional<Advice> shown = WaitForAdvice(0, 30s, etcd.endpoints());
  ASSERT_TRUE(shown.has_value()) << StatusJson(etcd.endpoints());
  EXPECT_GE(shown->mtbf_s, 600) << "the prior, and the time trained";
  EXPECT_GT(shown->interval_s, 0);

  ASSERT_NO_FATAL_FAILURE(KillWorkerOf(first));
  // The agents log the advice again once it moved by a fifth: the failure halves the MTBF.
  ASSERT_TRUE(WaitUntil(
      [&] {
        const std::vector<double> seen = AdviceLogged(second.err());
        return seen.back() < 0.8 * before;
      },
      90s))
      << Logs();
  std::cout << "after a failure: every " << AdviceLogged(second.err()).back() << " s\n";
  const std::optional<Advice> after = WaitForAdvice(1, 30s, etcd.endpoints());
  ASSERT_TRUE(after.has_value()) << StatusJson(etcd.endpoints());
  EXPECT_LT(after->mtbf_s, shown->mtbf_s);
  ASSERT_TRUE(WaitUntil([&] { return Logs().find("as ddprun advises") != std::string::npos; }, 60s))
      << Logs();
}

TEST_F(CheckpointAdviceTest, ABadMtbfIsOneLineAndExitTwo) {
  Subprocess bad({BinPath("ddprun"), "--nnodes=2", "--rdzv-backend=c10d",
                  "--rdzv-endpoint=" + daemon_->endpoint(), "--rdzv-conf=mtbf=abc", "--no-python",
                  "/bin/true"},
                 {{"DDPRUN_RDZV_TOKEN", kToken}});
  const std::optional<testing::ExitStatus> ended = bad.Wait(30s);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->exit_code, 2);
  EXPECT_THAT(bad.err(), HasSubstr("--rdzv-conf mtbf=abc: not a non-negative number of seconds"));
  EXPECT_EQ(testing::CountMatches(bad.err(), "\n"), 1) << bad.err();
}

}  // namespace
}  // namespace ddprun
