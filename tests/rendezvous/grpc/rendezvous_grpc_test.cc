// The gRPC server and client together, in one process, on loopback: assignments, restarts on a
// broken stream, an expired lease and a worker failure, the budget, success, refusals (token,
// disagreeing options), an unreachable endpoint, the Status call, the health service, and an
// embedded server following its host's rename.
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/loop_thread.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/grpc/proto_convert.h"
#include "rendezvous/grpc/rendezvous_server.h"
#include "rendezvous/grpc/rendezvous_service.h"
#include "rendezvous/grpc/run_status_query.h"
#include "rendezvous/grpc/security.h"
#include "tests/rendezvous/grpc/test_agent.h"
#include "tests/testing/subprocess.h"

namespace ddprun::rendezvous {
namespace {

using ::ddprun::rendezvous::testing::Event;
using ::ddprun::rendezvous::testing::FastClientOptions;
using ::ddprun::rendezvous::testing::MakeNode;
using ::ddprun::rendezvous::testing::TestAgent;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kToken[] = "s3cret-token";
constexpr auto kWait = seconds(10);

class RendezvousGrpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.token = kToken;
    auto server = RendezvousServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_GT(server_->port(), 0);
  }

  ClientOptions Options(const std::string& token = kToken) {
    return FastClientOptions(server_->address(), token);
  }
  std::unique_ptr<TestAgent> Agent(const NodeInfo& node) {
    return std::make_unique<TestAgent>(Options(), node);
  }

  std::unique_ptr<RendezvousServer> server_;
};

TEST_F(RendezvousGrpcTest, AgentsFormOneWorldWithUniqueRanks) {
  std::vector<std::unique_ptr<TestAgent>> agents;
  for (int i = 0; i < 4; ++i) {
    NodeInfo n = MakeNode("run", "n" + std::to_string(i), 4, 4);
    n.master_port = 31000 + i;
    agents.push_back(Agent(n));
  }
  std::set<int> ranks;
  std::set<int> master_ports;
  for (auto& a : agents) {
    std::optional<Assignment> got = a->recorder.WaitAssignment(0, kWait);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->round, 1);
    EXPECT_EQ(got->group_world_size, 4);
    EXPECT_EQ(got->world_size, 8);
    EXPECT_EQ(got->rank_offset, 2 * got->group_rank);
    EXPECT_EQ(got->master_addr, "127.0.0.1");
    ranks.insert(got->group_rank);
    master_ports.insert(got->master_port);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  ASSERT_EQ(master_ports.size(), 1u);
  EXPECT_GE(*master_ports.begin(), 31000);
}

TEST_F(RendezvousGrpcTest, BrokenStreamRestartsSurvivorsIntoASmallerRound) {
  std::vector<std::unique_ptr<TestAgent>> agents;
  for (int i = 0; i < 3; ++i)
    agents.push_back(Agent(MakeNode("run", "n" + std::to_string(i), 2, 3)));
  std::vector<int> first_rank;
  for (auto& a : agents) {
    std::optional<Assignment> got = a->recorder.WaitAssignment(0, kWait);
    ASSERT_TRUE(got.has_value());
    first_rank.push_back(got->group_rank);
  }

  const auto start = std::chrono::steady_clock::now();
  agents[1]->client->CancelForTesting();
  for (int i : {0, 2}) {
    std::optional<std::string> reason = agents[i]->recorder.WaitRestart(kWait);
    ASSERT_TRUE(reason.has_value());
    EXPECT_THAT(*reason, HasSubstr("node n1 (host-n1) was lost"));
  }
  const auto restarted = std::chrono::steady_clock::now() - start;
  EXPECT_LT(restarted, seconds(2)) << "a broken stream must be noticed at once";
  std::optional<Assignment> a0 = agents[0]->recorder.WaitAssignment(1, kWait);
  std::optional<Assignment> a2 = agents[2]->recorder.WaitAssignment(1, kWait);
  ASSERT_TRUE(a0 && a2);
  EXPECT_EQ(a0->round, 2);
  EXPECT_EQ(a0->group_world_size, 2);
  // Survivors keep their relative order.
  EXPECT_EQ(a0->group_rank, first_rank[0] < first_rank[2] ? 0 : 1);
  EXPECT_EQ(a2->group_rank, 1 - a0->group_rank);
  EXPECT_EQ(a2->restart_count, 1);
}

// Issue 40 over real streams: the node beyond max is told it is a spare; when a member's stream
// breaks, the spare gets the lost member's group rank, the survivor keeps its own and hears
// that a spare was taken and how long the lost node had been silent.
TEST_F(RendezvousGrpcTest, ASpareIsToldAndTakesTheLostMembersGroupRank) {
  auto a = Agent(MakeNode("run", "a", 2, 2));
  auto b = Agent(MakeNode("run", "b", 2, 2));
  std::optional<Assignment> first_a = a->recorder.WaitAssignment(0, kWait);
  std::optional<Assignment> first_b = b->recorder.WaitAssignment(0, kWait);
  ASSERT_TRUE(first_a && first_b);
  auto spare = Agent(MakeNode("run", "spare", 2, 2));
  ASSERT_TRUE(spare->recorder.WaitKind(Event::kStandby, kWait));
  const Event told = spare->recorder.events().back();
  EXPECT_EQ(told.standby.round, 1);
  EXPECT_EQ(told.standby.members, 2);
  EXPECT_EQ(told.standby.position, 0);

  a->client->CancelForTesting();
  std::optional<Assignment> taken = spare->recorder.WaitAssignment(0, kWait);
  std::optional<Assignment> kept = b->recorder.WaitAssignment(1, kWait);
  ASSERT_TRUE(taken && kept);
  EXPECT_EQ(taken->round, 2);
  EXPECT_EQ(taken->group_rank, first_a->group_rank);
  EXPECT_EQ(kept->group_rank, first_b->group_rank);
  std::optional<Event> restart;
  for (const Event& e : b->recorder.events()) {
    if (e.kind == Event::kRestart) restart = e;
  }
  ASSERT_TRUE(restart.has_value());
  EXPECT_TRUE(restart->facts.spare_used);
  ASSERT_TRUE(restart->facts.lost_silent_s.has_value());
  EXPECT_GE(*restart->facts.lost_silent_s, 0.0);
  EXPECT_LT(*restart->facts.lost_silent_s, 10.0);
}

TEST_F(RendezvousGrpcTest, ANewServerOnTheSameAddressTakesTheRoundBackWithoutARestart) {
  auto a = Agent(MakeNode("run", "a", 2, 3));
  auto b = Agent(MakeNode("run", "b", 2, 3));
  std::optional<Assignment> first = a->recorder.WaitAssignment(0, kWait);
  ASSERT_TRUE(first && b->recorder.WaitAssignment(0, kWait));
  const int port = server_->port();
  absl::StatusOr<RunStatus> before = QueryRunStatus(Options(), "run");
  ASSERT_TRUE(before.ok()) << before.status();
  server_.reset();  // every stream breaks; nobody listens on the port
  ASSERT_TRUE(a->recorder.WaitKind(Event::kReconnecting, kWait));
  ASSERT_TRUE(b->recorder.WaitKind(Event::kReconnecting, kWait));
  ServerOptions options;
  options.token = kToken;
  options.port = port;
  auto restarted = RendezvousServer::Start(options);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  server_ = *std::move(restarted);
  ASSERT_TRUE(a->recorder.WaitKind(Event::kResumed, kWait));
  ASSERT_TRUE(b->recorder.WaitKind(Event::kResumed, kWait));
  EXPECT_EQ(a->recorder.CountOf(Event::kRestart), 0);
  EXPECT_EQ(b->recorder.CountOf(Event::kRestart), 0);
  EXPECT_EQ(a->recorder.CountOf(Event::kAssignment), 1);
  absl::StatusOr<RunStatus> status = QueryRunStatus(Options(), "run");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->phase, RunPhase::kRunning);
  EXPECT_EQ(status->round, first->round);
  EXPECT_EQ(status->members.size(), 2u);
  EXPECT_EQ(status->restarts_used, 0);
  // Another process on the same address is another server (a successor that took the port is
  // not mistaken for the one it replaced, nor one server under two names for two).
  EXPECT_FALSE(status->server_instance.empty());
  EXPECT_NE(status->server_instance, before->server_instance);
  // The run goes on: both succeed and are closed OK by the new server.
  a->client->ReportGroupState(first->round, GroupState::kSucceeded, std::nullopt);
  b->client->ReportGroupState(first->round, GroupState::kSucceeded, std::nullopt);
  for (TestAgent* agent : {a.get(), b.get()}) {
    std::optional<absl::Status> closed = agent->recorder.WaitClosed(kWait);
    ASSERT_TRUE(closed.has_value());
    EXPECT_TRUE(closed->ok()) << *closed;
  }
}

TEST_F(RendezvousGrpcTest, NoServerForReadTimeoutAfterTheStreamBrokeCloses) {
  ClientOptions options = Options();
  options.read_timeout = seconds(2);  // longer than the lease (1 s): a refusing port never fences
  TestAgent a(options, MakeNode("run", "a", 1, 2));
  ASSERT_TRUE(a.recorder.WaitAssignment(0, kWait));
  server_.reset();
  std::optional<absl::Status> closed = a.recorder.WaitClosed(kWait);
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(closed->message(), HasSubstr("no rendezvous server answered at"));
  EXPECT_THAT(closed->message(), HasSubstr("for read_timeout (2 s)"));
  // The workers ran until then: no restart was ever asked for.
  EXPECT_EQ(a.recorder.CountOf(Event::kRestart), 0);
}

TEST_F(RendezvousGrpcTest, WorkerFailureRestartsEveryNodeThenBudgetSpentCloses) {
  auto a = Agent(MakeNode("run", "a", 2, 2, 2, /*max_restarts=*/1));
  auto b = Agent(MakeNode("run", "b", 2, 2, 2, /*max_restarts=*/1));
  ASSERT_TRUE(a->recorder.WaitAssignment(0, kWait));
  ASSERT_TRUE(b->recorder.WaitAssignment(0, kWait));
  WorkerFailure f;
  f.hostname = "host-b";
  f.rank = 2;
  f.local_rank = 0;
  f.pid = 77;
  f.exit_code = 1;
  f.message = "RuntimeError: boom";
  b->client->ReportGroupState(1, GroupState::kFailed, f);
  std::optional<std::string> reason = a->recorder.WaitRestart(kWait);
  ASSERT_TRUE(reason);
  EXPECT_THAT(*reason, HasSubstr("worker failure on host-b: rank 2"));
  std::optional<Assignment> next = a->recorder.WaitAssignment(1, kWait);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->restart_count, 1);

  a->client->ReportGroupState(2, GroupState::kFailed, f);
  for (TestAgent* agent : {a.get(), b.get()}) {
    std::optional<absl::Status> closed = agent->recorder.WaitClosed(kWait);
    ASSERT_TRUE(closed);
    EXPECT_EQ(closed->code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(closed->message(), HasSubstr("RuntimeError: boom"));
  }
}

TEST_F(RendezvousGrpcTest, SuccessClosesEachNodeOk) {
  auto a = Agent(MakeNode("run", "a", 2, 2));
  auto b = Agent(MakeNode("run", "b", 2, 2));
  ASSERT_TRUE(a->recorder.WaitAssignment(0, kWait));
  ASSERT_TRUE(b->recorder.WaitAssignment(0, kWait));
  a->client->ReportGroupState(1, GroupState::kSucceeded, std::nullopt);
  std::optional<absl::Status> closed = a->recorder.WaitClosed(kWait);
  ASSERT_TRUE(closed);
  EXPECT_TRUE(closed->ok()) << *closed;
  b->client->ReportGroupState(1, GroupState::kSucceeded, std::nullopt);
  closed = b->recorder.WaitClosed(kWait);
  ASSERT_TRUE(closed);
  EXPECT_TRUE(closed->ok()) << *closed;
  for (const auto& e : b->recorder.events()) EXPECT_NE(e.kind, testing::Event::kRestart);
}

TEST_F(RendezvousGrpcTest, SilentAgentIsLostAfterItsLease) {
  auto a = Agent(MakeNode("run", "a", 1, 2));
  // A raw stream that joins and then never says anything again (a hung agent).
  auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  auto stub = proto::RendezvousService::NewStub(channel);
  grpc::ClientContext context;
  context.AddMetadata(kAuthMetadataKey, AuthMetadataValue(kToken));
  auto stream = stub->Connect(&context);
  proto::AgentMessage join;
  RunTimeouts timeouts;
  timeouts.last_call_timeout = milliseconds(200);
  timeouts.keep_alive_interval = milliseconds(200);
  timeouts.keep_alive_max_attempt = 5;
  *join.mutable_join() = ToProto(MakeNode("run", "silent", 1, 2), timeouts);
  ASSERT_TRUE(stream->Write(join));
  ASSERT_TRUE(a->recorder.WaitAssignment(0, kWait));

  const auto start = std::chrono::steady_clock::now();
  std::optional<std::string> reason = a->recorder.WaitRestart(kWait);
  const auto lost_after = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(reason);
  EXPECT_THAT(*reason, HasSubstr("node silent (host-silent) was lost: no heartbeat"));
  // Lease: 200 ms * 5 (the first agent's settings: the raw stream or `a`, both alike).
  EXPECT_LT(lost_after, milliseconds(1000 + 500));
  // The silent stream was told why and closed.
  proto::ServerMessage m;
  bool saw_close = false;
  while (stream->Read(&m)) {
    if (m.has_close()) {
      saw_close = true;
      EXPECT_THAT(m.close().message(), HasSubstr("lease expired"));
      EXPECT_TRUE(m.close().given_up());
    }
  }
  EXPECT_TRUE(saw_close);
  std::optional<Assignment> next = a->recorder.WaitAssignment(1, kWait);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->group_world_size, 1);
}

// The local lease's source (launcher/fence): the server vouches for a joined node with every
// ack, from when the heartbeat it answers was sent; once the server is gone nobody vouches.
TEST_F(RendezvousGrpcTest, EachAckVouchesFromWhenItsHeartbeatWasSent) {
  struct Heard {
    TimePoint from, at;
  };
  absl::Mutex mu;
  std::vector<Heard> heard;
  ClientOptions options = Options();
  options.on_server_heard = [&](TimePoint from) {
    absl::MutexLock lock(&mu);
    heard.push_back({from, std::chrono::steady_clock::now()});
  };
  TestAgent agent(options, MakeNode("run", "n0", 1, 1));
  ASSERT_TRUE(agent.recorder.WaitAssignment(0, kWait).has_value());
  auto count = [&] {
    absl::MutexLock lock(&mu);
    return heard.size();
  };
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (count() < 6 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  server_.reset();
  std::vector<Heard> got;
  {
    absl::MutexLock lock(&mu);
    got = heard;
  }
  ASSERT_GE(got.size(), 6u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(got[i].from, got[i].at) << i;
    if (i >= 2) {
      // One heartbeat per 200 ms interval: each ack names its own heartbeat, not the last one.
      EXPECT_GE(got[i].from - got[i - 1].from, milliseconds(100)) << i;
    }
  }
  std::this_thread::sleep_for(milliseconds(600));  // three intervals without a server
  EXPECT_LE(count(), got.size() + 1);              // at most an ack already on its way
}

TEST_F(RendezvousGrpcTest, AgentWithSlowerHeartbeatFollowsTheRunsLease) {
  // The first agent sets a 1 s lease (200 ms * 5); the second would heartbeat only every 5 s
  // but adopts the run's interval, so it is never lost.
  auto a = Agent(MakeNode("run", "a", 2, 2));
  ASSERT_TRUE(
      ddprun::testing::WaitUntil([&] { return QueryRunStatus(Options(), "run").ok(); }, kWait));
  ClientOptions slow = Options();
  slow.timeouts.keep_alive_interval = seconds(5);
  TestAgent b(slow, MakeNode("run", "b", 2, 2));
  ASSERT_TRUE(b.recorder.WaitAssignment(0, kWait));
  // Absence of a restart can only be observed by waiting: two leases.
  EXPECT_FALSE(a->recorder.WaitRestart(milliseconds(2000)).has_value());
}

TEST_F(RendezvousGrpcTest, LateAgentScalesTheWorldUp) {
  auto a = Agent(MakeNode("run", "a", 1, 2));
  ASSERT_TRUE(a->recorder.WaitAssignment(0, kWait));
  auto b = Agent(MakeNode("run", "b", 1, 2));
  std::optional<std::string> reason = a->recorder.WaitRestart(kWait);
  ASSERT_TRUE(reason);
  EXPECT_THAT(*reason, HasSubstr("node b (host-b) joined"));
  std::optional<Assignment> next = a->recorder.WaitAssignment(1, kWait);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->group_world_size, 2);
  EXPECT_EQ(next->restart_count, 0);
  ASSERT_TRUE(b->recorder.WaitAssignment(1, kWait));
}

TEST_F(RendezvousGrpcTest, WrongOrMissingTokenIsRefused) {
  for (const std::string token : {"wrong", ""}) {
    TestAgent agent(Options(token), MakeNode("run", "x", 1, 1));
    std::optional<absl::Status> closed = agent.recorder.WaitClosed(kWait);
    ASSERT_TRUE(closed);
    EXPECT_EQ(closed->code(), absl::StatusCode::kUnauthenticated) << *closed;
    EXPECT_THAT(closed->message(), HasSubstr(server_->address()));
  }
  absl::StatusOr<RunStatus> status = QueryRunStatus(Options("wrong"), "run");
  EXPECT_EQ(status.status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(RendezvousGrpcTest, DisagreeingOptionsAreRefusedNamingBoth) {
  auto a = Agent(MakeNode("run", "a", 2, 3));
  // `a` must have created the run before `b` arrives.
  ASSERT_TRUE(
      ddprun::testing::WaitUntil([&] { return QueryRunStatus(Options(), "run").ok(); }, kWait));
  auto b = Agent(MakeNode("run", "b", 2, 4));
  std::optional<absl::Status> closed = b->recorder.WaitClosed(kWait);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(closed->message(), HasSubstr("--nnodes=2:4"));
  EXPECT_THAT(closed->message(), HasSubstr("--nnodes=2:3"));
}

TEST(RendezvousClientTest, UnreachableEndpointGivesUpAfterReadTimeout) {
  // Port 1 on loopback: nothing listens there and unprivileged processes cannot bind it.
  ClientOptions options = FastClientOptions("127.0.0.1:1", "");
  options.read_timeout = milliseconds(700);
  const auto start = std::chrono::steady_clock::now();
  TestAgent agent(options, MakeNode("run", "x", 1, 1));
  std::optional<absl::Status> closed = agent.recorder.WaitClosed(kWait);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(closed->message(), HasSubstr("127.0.0.1:1"));
  EXPECT_THAT(closed->message(), HasSubstr("read_timeout"));
  EXPECT_GE(took, milliseconds(700));
  EXPECT_LT(took, seconds(5));
}

TEST_F(RendezvousGrpcTest, LeaveEndsEventsAndIsNotAFailure) {
  auto a = Agent(MakeNode("run", "a", 1, 2));
  auto b = Agent(MakeNode("run", "b", 1, 2));
  ASSERT_TRUE(a->recorder.WaitAssignment(0, kWait));
  ASSERT_TRUE(b->recorder.WaitAssignment(0, kWait));
  const size_t before = b->recorder.events().size();
  b->client->Leave("SIGTERM");
  std::optional<std::string> reason = a->recorder.WaitRestart(kWait);
  ASSERT_TRUE(reason);
  EXPECT_THAT(*reason, HasSubstr("left: SIGTERM"));
  std::optional<Assignment> next = a->recorder.WaitAssignment(1, kWait);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->restart_count, 0);
  EXPECT_EQ(b->recorder.events().size(), before);
}

TEST_F(RendezvousGrpcTest, StatusCallReportsRoundAndMembers) {
  auto a = Agent(MakeNode("run", "a", 2, 2));
  auto b = Agent(MakeNode("run", "b", 2, 2));
  ASSERT_TRUE(a->recorder.WaitAssignment(0, kWait));
  absl::StatusOr<RunStatus> status = QueryRunStatus(Options(), "run");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->round, 1);
  EXPECT_EQ(status->phase, RunPhase::kRunning);
  ASSERT_EQ(status->members.size(), 2u);
  EXPECT_EQ(status->members[0].group_rank, 0);
  EXPECT_EQ(status->members[0].addr, "127.0.0.1");
  EXPECT_EQ(QueryRunStatus(Options(), "other").status().code(), absl::StatusCode::kNotFound);
  // One server, asked under two names, is one instance.
  ClientOptions by_name = Options();
  by_name.endpoint = "localhost:" + std::to_string(server_->port());
  absl::StatusOr<RunStatus> again = QueryRunStatus(by_name, "run");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->server_instance, status->server_instance);
  EXPECT_EQ(again->server_instance.size(), 16u);
}

TEST_F(RendezvousGrpcTest, ServesTheStandardHealthService) {
  auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kWait);
  // grpc.health.v1.HealthCheckRequest{service: ""} is the empty message.
  grpc::ByteBuffer request(nullptr, 0);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = s;
                   done.Notify();
                 });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::FromChrono(kWait)));
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // HealthCheckResponse{status: SERVING (1)}: field 1, varint 1.
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

}  // namespace
}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {
namespace {

using ::ddprun::rendezvous::testing::Event;
using ::ddprun::rendezvous::testing::FastClientOptions;
using ::ddprun::rendezvous::testing::MakeNode;
using ::ddprun::rendezvous::testing::TestAgent;

std::unique_ptr<RendezvousServer> StartWithLimits(const ServerLimits& limits) {
  ServerOptions options;
  options.limits = limits;
  auto server = RendezvousServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(RendezvousServerLimitsTest, StreamThatNeverJoinsIsClosed) {
  ServerLimits limits;
  limits.first_join_timeout = std::chrono::milliseconds(300);
  auto server = StartWithLimits(limits);
  ASSERT_NE(server, nullptr);
  auto stub = proto::RendezvousService::NewStub(
      grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const auto start = std::chrono::steady_clock::now();
  auto stream = stub->Connect(&context);
  proto::ServerMessage m;
  EXPECT_FALSE(stream->Read(&m));
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("no join within 300 ms"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(RendezvousServerLimitsTest, StreamsBeyondTheLimitAreRefused) {
  ServerLimits limits;
  limits.max_streams = 2;
  auto server = StartWithLimits(limits);
  ASSERT_NE(server, nullptr);
  const ClientOptions options = FastClientOptions(server->address(), "");
  auto a = std::make_unique<TestAgent>(options, MakeNode("run", "a", 1, 3));
  auto b = std::make_unique<TestAgent>(options, MakeNode("run", "b", 1, 3));
  ASSERT_TRUE(a->recorder.WaitAssignment(0, std::chrono::seconds(10)));
  ASSERT_TRUE(b->recorder.WaitAssignment(0, std::chrono::seconds(10)));
  {
    TestAgent c(options, MakeNode("run", "c", 1, 3));
    std::optional<absl::Status> closed = c.recorder.WaitClosed(std::chrono::seconds(10));
    ASSERT_TRUE(closed);
    EXPECT_THAT(closed->message(), ::testing::HasSubstr("limit of 2 streams"));
  }
  // A slot frees up once the server has seen an agent go away (asynchronously: retry).
  b.reset();
  bool assigned = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!assigned && std::chrono::steady_clock::now() < deadline) {
    TestAgent d(options, MakeNode("run", "d", 1, 3));
    d.recorder.WaitFor([](const std::vector<testing::Event>& e) { return !e.empty(); },
                       std::chrono::seconds(10));
    for (const auto& e : d.recorder.events()) assigned |= e.kind == testing::Event::kAssignment;
  }
  EXPECT_TRUE(assigned);
}

}  // namespace
}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {
namespace {

TEST(RendezvousIpv6Test, MasterAddrIsTheIpv6AddressTheServerSaw) {
  ServerOptions options;
  options.host = "::1";
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->address(), "[::1]:" + std::to_string((*server)->port()));
  testing::TestAgent agent(testing::FastClientOptions((*server)->address(), ""),
                           testing::MakeNode("run", "a", 1, 1));
  std::optional<Assignment> got = agent.recorder.WaitAssignment(0, std::chrono::seconds(10));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->master_addr, "::1");
}

TEST(PeerHostTest, ParsesGrpcPeerStrings) {
  EXPECT_EQ(PeerHost("ipv4:10.1.2.3:5000"), "10.1.2.3");
  EXPECT_EQ(PeerHost("ipv6:[::1]:5000"), "::1");
  EXPECT_EQ(PeerHost("ipv6:%5B::1%5D:5000"), "::1");
  EXPECT_EQ(PeerHost("ipv6:[::ffff:10.0.0.7]:5000"), "10.0.0.7");
  EXPECT_EQ(PeerHost("ipv6:[fe80::1%25eth0]:5000"), "fe80::1%eth0");
}

}  // namespace
}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {
namespace {

TEST(RendezvousServerStartTest, SecondServerOnATakenPortFailsUnavailable) {
  auto first = RendezvousServer::Start(ServerOptions{});
  ASSERT_TRUE(first.ok()) << first.status();
  ServerOptions same;
  same.port = (*first)->port();
  // gRPC would share the port through SO_REUSEPORT; the server turns that off so that an agent
  // can tell that another server already serves the endpoint.
  auto second = RendezvousServer::Start(same);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), ::testing::HasSubstr(std::to_string(same.port)));
}

}  // namespace
}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {
namespace {

// The service on a loop the test can hold still, so that an agent's messages pile up.
TEST(RendezvousServiceFloodTest, StreamRunningTooFarAheadIsCut) {
  LoopThread loop;
  ServerLimits limits;
  limits.max_queued_messages_per_stream = 4;
  RendezvousServiceImpl service(&loop, SystemClock::Get(), "", limits, RunTimeouts{});
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  absl::Notification release;
  loop.Post([&] { release.WaitForNotification(); });  // the loop is busy from now on

  auto stub = proto::RendezvousService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub->Connect(&context);
  proto::AgentMessage heartbeat;
  heartbeat.mutable_heartbeat();
  for (int i = 0; i < 64 && stream->Write(heartbeat); ++i) {
  }
  proto::ServerMessage m;
  EXPECT_FALSE(stream->Read(&m));
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();

  release.Notify();
  server->Shutdown(std::chrono::system_clock::now());
  loop.Stop();
}

}  // namespace
}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {
namespace {

// An embedded server's host that rejoins under a new name (after a fence or a failed health
// check) is still the host: every later Assignment names its new id, so that when it goes the
// others know their server went with it (and none waits a lease for it as a successor).
TEST(EmbeddedHostTest, AHostThatRejoinsUnderANewNameIsStillTheHost) {
  ServerOptions options;
  options.embedded = true;
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetHostNodeId("h");
  ClientOptions client = testing::FastClientOptions((*server)->address(), "");
  client.timeouts.keep_alive_interval = std::chrono::seconds(1);  // b's raw stream is silent
  client.timeouts.keep_alive_max_attempt = 10;

  // The other node on a raw stream: the test reads the host id off the wire.
  auto stub = proto::RendezvousService::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub->Connect(&context);
  proto::AgentMessage join;
  *join.mutable_join() = ToProto(testing::MakeNode("run", "b", 1, 3), client.timeouts);
  ASSERT_TRUE(stream->Write(join));
  // The next Assignment b reads for a round of `nodes` nodes; its host id.
  auto next_host = [&](int nodes) -> std::optional<std::string> {
    proto::ServerMessage m;
    while (stream->Read(&m)) {
      if (m.has_assignment() && m.assignment().group_world_size() == nodes) {
        return m.assignment().host_node_id();
      }
    }
    return std::nullopt;
  };

  auto host = std::make_unique<testing::TestAgent>(client, testing::MakeNode("run", "h", 1, 3));
  EXPECT_EQ(next_host(2), "h");

  // The host steps out (its health check failed) and comes back under a new name, proving with
  // its old member key that it was "h" (issue 43 S2: a claim without the key renames nothing).
  host->client->StepOut("health check failed");
  EXPECT_EQ(next_host(1), "h");  // b goes on alone meanwhile
  host->client->StepIn();
  EXPECT_EQ(next_host(2), "h-rejoin1");

  context.TryCancel();
  host.reset();
}

}  // namespace
}  // namespace ddprun::rendezvous
