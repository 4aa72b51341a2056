// Issue 41, point 2: a slow node named while the job trains. Three real ddprun agents of one run
// against ddprun-rdzv, one ddp-train mnist worker each (they report how long each step computed
// before it waited on the all-reduce); one agent, and so its worker, in a cpu cgroup limited to
// 30 % of a CPU. The server must name that node slow, with its figures, in its log, on /metrics
// and in `ddprun status`, within a minute, and never name the other two. Root only (cgroups).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/loopback.h"
#include "tests/testing/rdzv_daemon.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_cgroup.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using testing::BinPath;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Subprocess;
using testing::TempDir;
using testing::WaitUntil;

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";
constexpr char kToken[] = "slow-node-test-token";

std::string Metrics(int port) {
  const std::string answer = testing::LoopbackExchange(
      port, absl::StrCat("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         "Authorization: Bearer ",
                         kToken, "\r\n\r\n"));
  return answer;
}

TEST(SlowNodeTest, AWorkerThrottledByACgroupIsNamedSlowWithinAMinuteAndNoOtherIs) {
  if (access(kData, R_OK) != 0) GTEST_SKIP() << kData << " missing (dataset-fashion-mnist)";
  testing::TestCgroup cgroup(testing::TestCgroup::Controller::kCpu,
                             absl::StrCat("ddprun-slow-node-test-", getpid()));
  ASSERT_TRUE(cgroup.error().empty()) << cgroup.error();
  ASSERT_TRUE(cgroup.LimitCpu(30)) << cgroup.error();

  testing::RdzvDaemon daemon(kToken, "127.0.0.1", [](std::vector<std::string> argv) {
    argv.push_back("--http-port=0");
    return argv;
  });
  ASSERT_FALSE(daemon.endpoint().empty()) << daemon.error();
  int http_port = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        std::smatch m;
        const std::string out = daemon.output();
        if (!std::regex_search(out, m, std::regex("http on 127\\.0\\.0\\.1:(\\d+)"))) return false;
        http_port = std::atoi(m[1].str().c_str());
        return true;
      },
      10s))
      << daemon.output();

  TempDir dir;
  // Long enough never to end while the test looks; stopped by the test.
  const std::vector<std::string> ddprun = {BinPath("ddprun"),
                                           "--nnodes=3",
                                           "--nproc-per-node=1",
                                           "--rdzv-backend=c10d",
                                           "--rdzv-endpoint=" + daemon.endpoint(),
                                           "--rdzv-id=slow",
                                           "--no-python",
                                           BinPath("ddp-train"),
                                           "mnist",
                                           "--data",
                                           kData,
                                           "--no-progress-bar",
                                           "--epochs",
                                           "100",
                                           "--test-subset",
                                           "1000",
                                           "--batch-size",
                                           "64"};
  const std::map<std::string, std::string> env = {{"DDPRUN_RDZV_TOKEN", kToken},
                                                  {"OMP_NUM_THREADS", "1"}};
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) agents.push_back(std::make_unique<Subprocess>(ddprun, env));
  // The third moves itself into the cgroup before it becomes ddprun: its worker is born there.
  std::string command = absl::StrCat("echo $$ > ", cgroup.procs(), " && exec");
  for (const std::string& arg : ddprun) absl::StrAppend(&command, " '", arg, "'");
  agents.push_back(
      std::make_unique<Subprocess>(std::vector<std::string>{"/bin/sh", "-c", command}, env));
  const std::string slow_node = absl::StrCat("_", agents[2]->pid(), "_");

  // The judge names a node after 3 reports in a row, 5 s apart, once every node trains.
  const auto began = std::chrono::steady_clock::now();
  // The daemon logs on stderr.
  ASSERT_TRUE(
      WaitUntil([&] { return daemon.error().find(" is slow: ") != std::string::npos; }, 90s))
      << daemon.error() << "\n--- the throttled agent:\n"
      << agents[2]->err();
  const double named_after_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  std::cout << "named slow after " << named_after_s << " s (agents started)\n";

  std::smatch named;
  const std::string log = daemon.error();
  ASSERT_TRUE(std::regex_search(
      log, named,
      std::regex("run 'slow': node (\\S+) is slow: its workers compute ([0-9.]+) ms a step before "
                 "they wait for the others, ([0-9.]+)x the job's median node")))
      << log;
  std::cout << named[0].str() << "\n";
  EXPECT_THAT(named[1].str(), HasSubstr(slow_node)) << "the throttled agent's node is named";
  EXPECT_GT(std::stod(named[3].str()), 1.2);

  const std::string metrics = Metrics(http_port);
  EXPECT_THAT(metrics, HasSubstr("ddprun_rdzv_slow_nodes{run_id=\"slow\"} 1")) << metrics;
  EXPECT_THAT(metrics, HasSubstr("ddprun_rdzv_slow_nodes_named_total 1")) << metrics;

  Subprocess status(
      {BinPath("ddprun"), "status", "--rdzv-endpoint=" + daemon.endpoint(), "--rdzv-id=slow"},
      {{"DDPRUN_RDZV_TOKEN", kToken}});
  ASSERT_TRUE(status.Wait(30s).has_value());
  EXPECT_THAT(status.out(), HasSubstr("slow nodes 1")) << status.out() << status.err();
  EXPECT_THAT(status.out(),
              ::testing::ContainsRegex(slow_node + "\\S*  compute [0-9.]+ ms/step "
                                                   "\\([0-9.]+x the median node\\) SLOW"))
      << status.out();
  // Every member has figures, and only the throttled one is slow.
  EXPECT_EQ(testing::CountMatches(status.out(), " SLOW\n"), 1) << status.out();
  EXPECT_EQ(testing::CountMatches(status.out(), "  compute "), 3) << status.out();
  EXPECT_EQ(testing::CountMatches(daemon.error(), " is slow: "), 1) << daemon.error();

  for (auto& agent : agents) agent->SignalGroup(SIGTERM);
  for (auto& agent : agents) agent->Wait(30s);
}

}  // namespace
}  // namespace ddprun
