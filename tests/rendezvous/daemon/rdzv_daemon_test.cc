// Real processes on loopback: the ddprun-rdzv daemon and rdzv-test-agent processes. Agents form
// one world; SIGKILL of one agent restarts the others into a smaller world; a wrong token is
// refused; random bytes and oversized messages on the port leave the server serving; SIGTERM
// stops the daemon cleanly.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/grpc/security.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun::rendezvous {
namespace {

using ::ddprun::testing::BinPath;
using ::ddprun::testing::Subprocess;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kToken[] = "daemon-test-token";
constexpr auto kWait = seconds(15);

int CountLines(const std::string& text, const std::string& prefix) {
  int n = 0;
  size_t pos = 0;
  while ((pos = text.find(prefix, pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == '\n') ++n;
    pos += prefix.size();
  }
  return n;
}

// The group ranks of every "ASSIGNMENT round=<round>" line.
std::vector<int> RanksOfRound(const std::string& text, int round) {
  std::vector<int> ranks;
  std::regex re("ASSIGNMENT round=" + std::to_string(round) + " group_rank=([0-9]+)");
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
    ranks.push_back(std::stoi((*it)[1]));
  }
  return ranks;
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Subprocess>(
        std::vector<std::string>{BinPath("ddprun-rdzv"), "--port", "0"},
        std::map<std::string, std::string>{{kTokenEnv, kToken}});
    ASSERT_TRUE(daemon_->WaitForOutputContains("ddprun-rdzv listening on 127.0.0.1:", kWait))
        << daemon_->err();
    std::smatch m;
    const std::string out = daemon_->out();
    ASSERT_TRUE(std::regex_search(out, m, std::regex("listening on (127\\.0\\.0\\.1:([0-9]+))")));
    endpoint_ = m[1];
    port_ = std::stoi(m[2]);
    ASSERT_GT(port_, 0);
  }

  std::unique_ptr<Subprocess> StartAgent(const std::string& node, const std::string& run,
                                         const std::string& nnodes,
                                         const std::string& token = kToken) {
    return std::make_unique<Subprocess>(
        std::vector<std::string>{BinPath("rdzv-test-agent"), "--endpoint", endpoint_, "--run", run,
                                 "--node", node, "--nnodes", nnodes},
        std::map<std::string, std::string>{{kTokenEnv, token}});
  }

  std::unique_ptr<Subprocess> daemon_;
  std::string endpoint_;
  int port_ = 0;
};

TEST_F(DaemonTest, KilledAgentRestartsTheOthersIntoASmallerWorld) {
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 3; ++i) agents.push_back(StartAgent("n" + std::to_string(i), "job", "2:3"));
  std::multiset<int> ranks;
  for (auto& a : agents) {
    ASSERT_TRUE(a->WaitForOutputContains("ASSIGNMENT round=1 ", kWait)) << a->out() << a->err();
    for (int r : RanksOfRound(a->out(), 1)) ranks.insert(r);
    EXPECT_THAT(a->out(), HasSubstr("group_world_size=3 world_size=6"));
  }
  EXPECT_EQ(ranks, (std::multiset<int>{0, 1, 2}));

  const auto killed_at = std::chrono::steady_clock::now();
  agents[1]->Signal(SIGKILL);
  for (int i : {0, 2}) {
    ASSERT_TRUE(agents[i]->WaitForOutputContains("RESTART node n1 (localhost) was lost", kWait))
        << agents[i]->out();
    const auto took = std::chrono::steady_clock::now() - killed_at;
    // The target is 100 ms on an idle machine; the bound leaves room for a loaded CI host.
    EXPECT_LT(took, milliseconds(1000));
    std::printf("SIGKILL -> survivor %d told to restart: %lld ms\n", i,
                static_cast<long long>(std::chrono::duration_cast<milliseconds>(took).count()));
  }
  for (int i : {0, 2}) {
    ASSERT_TRUE(agents[i]->WaitForOutputContains("ASSIGNMENT round=2 ", kWait)) << agents[i]->out();
    EXPECT_THAT(agents[i]->out(), HasSubstr("group_world_size=2 world_size=4"));
    EXPECT_THAT(agents[i]->out(), HasSubstr("restarts=1"));
  }
  std::vector<int> r0 = RanksOfRound(agents[0]->out(), 2), r2 = RanksOfRound(agents[2]->out(), 2);
  ASSERT_TRUE(agents[1]->Wait(kWait).has_value());
  ASSERT_EQ(r0.size(), 1u);
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_NE(r0[0], r2[0]);

  // A clean leave (SIGTERM) of the agents, then the daemon stops on SIGTERM.
  for (int i : {0, 2}) {
    agents[i]->Signal(SIGTERM);
    auto status = agents[i]->Wait(kWait);
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(status->exit_code, 0);
  }
  daemon_->Signal(SIGTERM);
  auto status = daemon_->Wait(kWait);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->exit_code, 0) << daemon_->err();
}

TEST_F(DaemonTest, StoppedAgentIsLostAfterItsLease) {
  // keep_alive 0.2 s * 5 attempts: a 1 s lease. A stopped process keeps its TCP connection
  // (the kernel still answers), so only the lease can notice it.
  auto a = StartAgent("a", "job", "1:2");
  auto b = StartAgent("b", "job", "1:2");
  ASSERT_TRUE(a->WaitForOutputContains("group_world_size=2", kWait)) << a->out();
  ASSERT_TRUE(b->WaitForOutputContains("group_world_size=2", kWait)) << b->out();
  const int restarts_before = CountLines(a->out(), "RESTART");
  const auto start = std::chrono::steady_clock::now();
  b->Signal(SIGSTOP);
  ASSERT_TRUE(a->WaitForOutput(
      [&](const std::string& out) {
        return out.find("RESTART node b (localhost) was lost: no heartbeat") != std::string::npos;
      },
      kWait))
      << a->out();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, milliseconds(800));
  EXPECT_LT(took, milliseconds(1000 + 500)) << "lost within lease + 0.5 s";
  EXPECT_EQ(CountLines(a->out(), "RESTART"), restarts_before + 1);
  ASSERT_TRUE(a->WaitForOutput(
      [](const std::string& out) {
        return std::regex_search(out, std::regex("group_world_size=1 world_size=2 .*restarts=1"));
      },
      kWait))
      << a->out();
  // Resumed, the stopped agent hears it was given up; the job is elastic, so it stops its
  // workers and rejoins as a new node: a scale-up for the others, no budget spent.
  b->Signal(SIGCONT);
  ASSERT_TRUE(
      b->WaitForOutputContains("RESTART fenced: the rendezvous server gave this node up", kWait))
      << b->out();
  EXPECT_THAT(b->out(), HasSubstr("lease expired"));
  EXPECT_THAT(b->out(), HasSubstr("rejoining as a new node"));
  ASSERT_TRUE(a->WaitForOutput(
      [](const std::string& out) {
        return std::regex_search(out, std::regex("group_world_size=2 world_size=4 .*restarts=1"));
      },
      kWait))
      << a->out();
  EXPECT_TRUE(b->running());
}

TEST_F(DaemonTest, AStoppedAgentOfAFixedWorldHearsItWasGivenUpAndExits3) {
  auto a = StartAgent("a", "job", "2:2");
  auto b = StartAgent("b", "job", "2:2");
  ASSERT_TRUE(a->WaitForOutputContains("group_world_size=2", kWait)) << a->out();
  ASSERT_TRUE(b->WaitForOutputContains("group_world_size=2", kWait)) << b->out();
  b->Signal(SIGSTOP);
  ASSERT_TRUE(a->WaitForOutputContains("RESTART node b (localhost) was lost", kWait)) << a->out();
  b->Signal(SIGCONT);
  auto status = b->Wait(kWait);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->exit_code, 3);
  EXPECT_THAT(b->out(), HasSubstr("gave this node up (this node's rendezvous lease expired"));
}

TEST_F(DaemonTest, WrongTokenIsRefusedWithExit3) {
  auto agent = StartAgent("intruder", "job", "1:1", "not-the-token");
  auto status = agent->Wait(kWait);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->exit_code, 3);
  EXPECT_THAT(agent->out(), HasSubstr("CLOSED code=UNAUTHENTICATED"));
  EXPECT_THAT(agent->out(), HasSubstr(endpoint_));
}

TEST_F(DaemonTest, HostileTrafficLeavesTheServerServing) {
  // A run in progress that must not be disturbed.
  auto a = StartAgent("a", "steady", "2:2");
  auto b = StartAgent("b", "steady", "2:2");
  ASSERT_TRUE(a->WaitForOutputContains("ASSIGNMENT round=1 ", kWait)) << a->out();
  ASSERT_TRUE(b->WaitForOutputContains("ASSIGNMENT round=1 ", kWait)) << b->out();

  // Random bytes, and an HTTP/2 preface followed by garbage frames.
  std::mt19937 rng(42);
  for (int attempt = 0; attempt < 20; ++attempt) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port_);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    std::string junk = attempt % 2 == 0 ? "" : "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    for (int i = 0; i < 65536; ++i) junk.push_back(static_cast<char>(rng()));
    (void)!write(fd, junk.data(), junk.size());
    close(fd);
  }

  // An oversized message on an authenticated stream: refused, the stream ends.
  auto channel = grpc::CreateChannel(endpoint_, grpc::InsecureChannelCredentials());
  auto stub = proto::RendezvousService::NewStub(channel);
  {
    grpc::ClientContext context;
    context.AddMetadata(kAuthMetadataKey, AuthMetadataValue(kToken));
    context.set_deadline(std::chrono::system_clock::now() + kWait);
    auto stream = stub->Connect(&context);
    proto::AgentMessage big;
    big.mutable_join()->set_run_id("big");
    big.mutable_join()->set_node_id("big");
    big.mutable_join()->set_hostname(std::string(1 << 20, 'x'));
    stream->Write(big);
    proto::ServerMessage m;
    EXPECT_FALSE(stream->Read(&m));
    grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  }
  // A stream that speaks nonsense (an empty message) is dropped.
  {
    grpc::ClientContext context;
    context.AddMetadata(kAuthMetadataKey, AuthMetadataValue(kToken));
    context.set_deadline(std::chrono::system_clock::now() + kWait);
    auto stream = stub->Connect(&context);
    stream->Write(proto::AgentMessage());
    proto::ServerMessage m;
    bool closed = false;
    while (stream->Read(&m)) closed = closed || m.has_close();
    EXPECT_TRUE(closed);
  }

  // Still serving: a fresh agent of another run gets its assignment.
  auto fresh = StartAgent("fresh", "other", "1:1");
  ASSERT_TRUE(fresh->WaitForOutputContains("ASSIGNMENT round=1 ", kWait))
      << fresh->out() << fresh->err();
  // And the run in progress was not disturbed.
  EXPECT_EQ(CountLines(a->out(), "RESTART"), 0) << a->out();
  EXPECT_EQ(CountLines(b->out(), "RESTART"), 0) << b->out();
  EXPECT_TRUE(daemon_->running());
}

TEST_F(DaemonTest, DaemonShutdownClosesAgentsWithExit3) {
  auto a = StartAgent("a", "job", "1:1");
  ASSERT_TRUE(a->WaitForOutputContains("ASSIGNMENT round=1 ", kWait));
  daemon_->Signal(SIGTERM);
  auto status = a->Wait(kWait);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->exit_code, 3);
  EXPECT_THAT(a->out(), HasSubstr("CLOSED code=UNAVAILABLE"));
  EXPECT_THAT(a->out(), HasSubstr("rendezvous server shutting down"));
  auto daemon_status = daemon_->Wait(kWait);
  ASSERT_TRUE(daemon_status.has_value());
  EXPECT_EQ(daemon_status->exit_code, 0);
}

}  // namespace
}  // namespace ddprun::rendezvous
