// Hostile neighbours on a shared ddprun-rdzv (issue 28, points 2 and 6), with real processes:
// the daemon and rdzv-test-agent agents, and the attacker as a second client with the token
// speaking the protocol through raw gRPC stubs. A token holder cannot take over another run's
// member (the victim's run is not restarted, its budget untouched, the attacker refused and
// logged), not with a key of its own run either; with --secret-file the keys survive a restart
// of the daemon; finished runs hold no slot; one client cannot take every slot.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/grpc/security.h"
#include "tests/testing/reserved_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun::rendezvous {
namespace {

using ::ddprun::testing::BinPath;
using ::ddprun::testing::Subprocess;
using ::ddprun::testing::TempDir;
using ::ddprun::testing::WaitUntil;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kToken[] = "shared-token";
constexpr auto kWait = seconds(15);

std::unique_ptr<Subprocess> StartDaemon(std::vector<std::string> flags, std::string* endpoint) {
  std::vector<std::string> argv = {BinPath("ddprun-rdzv")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto daemon =
      std::make_unique<Subprocess>(argv, std::map<std::string, std::string>{{kTokenEnv, kToken}});
  if (!daemon->WaitForOutputContains("ddprun-rdzv listening on 127.0.0.1:", kWait)) return daemon;
  std::smatch m;
  const std::string out = daemon->out();
  if (std::regex_search(out, m, std::regex("listening on (127\\.0\\.0\\.1:[0-9]+)"))) {
    *endpoint = m[1];
  }
  return daemon;
}

std::unique_ptr<Subprocess> StartAgent(const std::string& endpoint, const std::string& node,
                                       const std::string& run, const std::string& nnodes,
                                       const std::string& token = kToken) {
  return std::make_unique<Subprocess>(
      std::vector<std::string>{BinPath("rdzv-test-agent"), "--endpoint", endpoint, "--run", run,
                               "--node", node, "--nnodes", nnodes, "--keep-alive", "0.5"},
      std::map<std::string, std::string>{{kTokenEnv, token}});
}

// One Connect stream spoken by hand, with a token (the shared one unless told) and a deadline.
class RawStream {
 public:
  explicit RawStream(proto::RendezvousService::Stub* stub, const std::string& token = kToken) {
    context_.AddMetadata(kAuthMetadataKey, AuthMetadataValue(token));
    context_.set_deadline(std::chrono::system_clock::now() + kWait);
    stream_ = stub->Connect(&context_);
  }
  bool Write(const proto::AgentMessage& m) { return stream_->Write(m); }
  // The next server message other than a heartbeat ack; nullopt when the stream ended.
  std::optional<proto::ServerMessage> Read() {
    proto::ServerMessage m;
    while (stream_->Read(&m)) {
      if (!m.has_ack()) return m;
    }
    return std::nullopt;
  }
  grpc::Status Finish() {
    stream_->WritesDone();
    proto::ServerMessage m;
    while (stream_->Read(&m)) {
    }
    return stream_->Finish();
  }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<proto::AgentMessage, proto::ServerMessage>> stream_;
};

// (A lease of 2.5 s: both agents re-register within it after a daemon restart.)

// A join as rdzv-test-agent's defaults make it (nproc 2, 3 restarts, master port 29500).
proto::AgentMessage JoinAs(const std::string& run, const std::string& node, int nnodes) {
  proto::AgentMessage m;
  proto::Join* j = m.mutable_join();
  j->set_run_id(run);
  j->set_node_id(node);
  j->set_hostname("attacker");
  j->set_min_nodes(nnodes);
  j->set_max_nodes(nnodes);
  j->set_nproc_per_node(2);
  j->set_master_port(29500);
  j->set_max_restarts(3);
  return m;
}

// `JoinAs` with a Resume claim: a member of `round` with `group_rank`, its workers running.
proto::AgentMessage ClaimAs(const std::string& run, const std::string& node, int nnodes,
                            int64_t round, int group_rank, const std::string& key) {
  proto::AgentMessage m = JoinAs(run, node, nnodes);
  proto::Resume* r = m.mutable_join()->mutable_resume();
  r->mutable_last()->set_round(round);
  r->mutable_last()->set_group_rank(group_rank);
  r->mutable_last()->set_group_world_size(nnodes);
  r->set_group(proto::Resume::RUNNING);
  r->set_member_key(key);
  return m;
}

proto::AgentMessage Failed(int64_t round) {
  proto::AgentMessage m;
  m.mutable_group_status()->set_round(round);
  m.mutable_group_status()->set_state(proto::GroupStatus::FAILED);
  m.mutable_group_status()->mutable_failure()->set_message("injected by another job");
  return m;
}

class SecurityTest : public ::testing::Test {
 protected:
  void StartServer(std::vector<std::string> flags = {"--port", "0"}) {
    daemon_ = StartDaemon(std::move(flags), &endpoint_);
    ASSERT_FALSE(endpoint_.empty()) << daemon_->err();
    stub_ = proto::RendezvousService::NewStub(
        grpc::CreateChannel(endpoint_, grpc::InsecureChannelCredentials()));
  }
  proto::StatusResponse RunStatus(const std::string& run, const std::string& token = kToken) {
    grpc::ClientContext context;
    context.AddMetadata(kAuthMetadataKey, AuthMetadataValue(token));
    context.set_deadline(std::chrono::system_clock::now() + kWait);
    proto::StatusRequest request;
    request.set_run_id(run);
    proto::StatusResponse response;
    grpc::Status s = stub_->Status(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }
  // The victim: a 2-node run of two real agents, round 1 formed.
  void StartVictim() {
    a_ = StartAgent(endpoint_, "victim-a", "victim", "2:2");
    b_ = StartAgent(endpoint_, "victim-b", "victim", "2:2");
    ASSERT_TRUE(a_->WaitForOutputContains("ASSIGNMENT round=1 ", kWait)) << a_->out();
    ASSERT_TRUE(b_->WaitForOutputContains("ASSIGNMENT round=1 ", kWait)) << b_->out();
  }
  // The victim's run still at round 1, no restart spent, no agent told anything more.
  void ExpectVictimUndisturbed() {
    proto::StatusResponse s = RunStatus("victim");
    EXPECT_EQ(s.phase(), "running");
    EXPECT_EQ(s.round(), 1);
    EXPECT_EQ(s.restarts_used(), 0);
    EXPECT_EQ(s.members_size(), 2);
    EXPECT_THAT(a_->out(), Not(HasSubstr("RESTART")));
    EXPECT_THAT(b_->out(), Not(HasSubstr("RESTART")));
    EXPECT_TRUE(a_->running());
    EXPECT_TRUE(b_->running());
  }
  // Claims the victim's rank-0 member with `key` and reports a failure; expects a refusal.
  void AttackAndExpectRefusal(const std::string& key) {
    proto::StatusResponse before = RunStatus("victim");
    ASSERT_EQ(before.members_size(), 2);
    const std::string victim = before.members(0).node_id();  // node ids are visible
    RawStream attacker(stub_.get());
    ASSERT_TRUE(attacker.Write(ClaimAs("victim", victim, 2, before.round(), 0, key)));
    std::optional<proto::ServerMessage> first = attacker.Read();
    ASSERT_TRUE(first.has_value());
    ASSERT_TRUE(first->has_close()) << first->DebugString();
    EXPECT_EQ(first->close().code(), static_cast<int>(grpc::StatusCode::PERMISSION_DENIED));
    EXPECT_THAT(first->close().message(), HasSubstr("run 'victim'"));
    EXPECT_THAT(first->close().message(), HasSubstr("node '" + victim + "'"));
    attacker.Write(Failed(before.round()));  // too late: the stream is over
    attacker.Finish();
    EXPECT_TRUE(daemon_->WaitForOutputContains("refused a re-registration", kWait))
        << daemon_->err();
    EXPECT_THAT(daemon_->err(), HasSubstr(victim));
  }

  std::unique_ptr<Subprocess> daemon_;
  std::string endpoint_;
  std::unique_ptr<proto::RendezvousService::Stub> stub_;
  std::unique_ptr<Subprocess> a_, b_;
};

TEST_F(SecurityTest, ATokenHolderCannotTakeOverAnotherRunsMember) {
  StartServer();
  StartVictim();
  AttackAndExpectRefusal("");
  // A heartbeat round trip of each agent after the attack: nothing reached them meanwhile.
  ASSERT_TRUE(a_->running());
  ExpectVictimUndisturbed();
}

TEST_F(SecurityTest, AMembersKeyOfItsOwnRunDoesNotOpenAnother) {
  StartServer();
  StartVictim();
  // The attacker is a member of a run of its own and holds that run's key.
  RawStream own(stub_.get());
  ASSERT_TRUE(own.Write(JoinAs("mine", "victim-a", 1)));
  std::optional<proto::ServerMessage> joined = own.Read();
  ASSERT_TRUE(joined.has_value() && joined->has_joined());
  const std::string key = joined->joined().member_key();
  ASSERT_EQ(key.size(), 64u) << "hex of HMAC-SHA256";
  // The same node id in the victim's run, with the key of "mine".
  AttackAndExpectRefusal(key);
  // Its own stream cannot be moved to the victim's run either: a second join is ignored, and
  // its failure report acts on "mine" only.
  ASSERT_TRUE(own.Write(ClaimAs("victim", "victim-a", 2, 1, 0, key)));
  ASSERT_TRUE(own.Write(Failed(1)));
  std::optional<proto::ServerMessage> next = own.Read();
  ASSERT_TRUE(next.has_value());
  EXPECT_TRUE(next->has_assignment() || next->has_restart() || next->has_close())
      << next->DebugString();
  own.Finish();
  ExpectVictimUndisturbed();
}

TEST_F(SecurityTest, WithASecretFileKeysSurviveARestartOfTheDaemon) {
  TempDir dir;
  const std::string secret = dir.File("secret");
  StartServer({"--port", "0", "--secret-file", secret});
  struct stat st {};
  ASSERT_EQ(stat(secret.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 32);
  StartVictim();
  const std::string port = endpoint_.substr(endpoint_.rfind(':') + 1);
  daemon_->Signal(SIGKILL);  // a crash: the agents keep their workers and re-register
  ASSERT_TRUE(daemon_->Wait(kWait).has_value());
  StartServer({"--port", port, "--secret-file", secret});
  // Both come back with keys the new process verifies: the round goes on, nothing restarted.
  ASSERT_TRUE(daemon_->WaitForOutputContains("round 1 goes on: 2 node(s) re-registered", kWait))
      << daemon_->err();
  EXPECT_THAT(daemon_->err(), Not(HasSubstr("unverified")));
  ExpectVictimUndisturbed();
  // And the attacker is refused by the new process too.
  AttackAndExpectRefusal("");
  ExpectVictimUndisturbed();
}

TEST_F(SecurityTest, FinishedRunsHoldNoSlot) {
  StartServer({"--port", "0", "--max-runs", "3"});
  for (int job = 0; job < 5; ++job) {
    const std::string run = "job" + std::to_string(job);
    RawStream agent(stub_.get());
    ASSERT_TRUE(agent.Write(JoinAs(run, "n", 1)));
    std::optional<proto::ServerMessage> m = agent.Read();
    ASSERT_TRUE(m.has_value() && m->has_joined()) << run << ": " << (m ? m->DebugString() : "");
    m = agent.Read();
    ASSERT_TRUE(m.has_value() && m->has_assignment()) << run;
    proto::AgentMessage done;
    done.mutable_group_status()->set_round(m->assignment().round());
    done.mutable_group_status()->set_state(proto::GroupStatus::SUCCEEDED);
    ASSERT_TRUE(agent.Write(done));
    m = agent.Read();
    ASSERT_TRUE(m.has_value() && m->has_close()) << run;
    EXPECT_EQ(m->close().code(), 0) << m->close().message();
    agent.Finish();
  }
  // Finished runs are still reported.
  EXPECT_EQ(RunStatus("job0").phase(), "closed");
}

TEST_F(SecurityTest, OneClientCannotTakeEverySlot) {
  StartServer({"--port", "0", "--max-runs-per-client", "2"});
  // Two runs of 127.0.0.1 waiting for a second node: open.
  RawStream first(stub_.get()), second(stub_.get());
  ASSERT_TRUE(first.Write(JoinAs("r1", "n1", 2)));
  ASSERT_TRUE(second.Write(JoinAs("r2", "n2", 2)));
  std::optional<proto::ServerMessage> m = first.Read();
  ASSERT_TRUE(m.has_value() && m->has_joined());
  m = second.Read();
  ASSERT_TRUE(m.has_value() && m->has_joined());
  auto third = StartAgent(endpoint_, "n3", "r3", "2:2");
  std::optional<::ddprun::testing::ExitStatus> exit = third->Wait(kWait);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 3);
  EXPECT_THAT(third->out(), HasSubstr("limit of 2 open runs per client (127.0.0.1"));
  // Another client address is not held back by this one: the limit is per client, and the
  // server-wide one (64) is far.
  EXPECT_EQ(RunStatus("r1").members_size(), 1);
  EXPECT_EQ(RunStatus("r2").members_size(), 1);
}

// `ddprun-rdzv --mint-token SCOPE`'s output (the daemon's token from the environment).
std::string MintToken(const std::string& scope) {
  Subprocess mint({BinPath("ddprun-rdzv"), "--mint-token", scope},
                  std::map<std::string, std::string>{{kTokenEnv, kToken}});
  std::optional<::ddprun::testing::ExitStatus> exit = mint.Wait(kWait);
  if (!exit.has_value() || exit->exit_code != 0) return "";
  std::string out = mint.out();
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

TEST(ScopedTokenTest, MintPrintsATokenOfTheScopeAndRefusesABadScope) {
  const std::string alice = MintToken("alice");
  EXPECT_TRUE(std::regex_match(alice, std::regex("ddprun1\\.alice\\.[0-9a-f]{64}"))) << alice;
  EXPECT_EQ(MintToken("alice"), alice) << "derived, not random";
  EXPECT_NE(MintToken("bob"), alice);
  Subprocess bad({BinPath("ddprun-rdzv"), "--mint-token", "a/b"},
                 std::map<std::string, std::string>{{kTokenEnv, kToken}});
  std::optional<::ddprun::testing::ExitStatus> exit = bad.Wait(kWait);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 2);
  EXPECT_THAT(bad.err(), HasSubstr("--mint-token=a/b: a scope is 1 to 64 letters"));
}

// Issue 43 S4: a token holder who takes a job's (predictable) run id first. With scoped tokens
// its run is its own scope's: the real job, with a token of another scope, forms its round of
// exactly its own agents, whatever settings the squatter chose.
TEST_F(SecurityTest, AScopedTokenHolderCannotTakeAnotherScopesRunId) {
  StartServer();
  const std::string alice = MintToken("alice"), mallory = MintToken("mallory");
  ASSERT_FALSE(alice.empty());
  ASSERT_FALSE(mallory.empty());
  // Mallory takes both run ids first: one with other settings (the real job exited 3), one with
  // the job's own (a squatter became a member and one real agent waited forever).
  RawStream other_settings(stub_.get(), mallory), same_settings(stub_.get(), mallory);
  ASSERT_TRUE(other_settings.Write(JoinAs("4242.0", "squatter-1", 1)));
  ASSERT_TRUE(same_settings.Write(JoinAs("4343.0", "squatter-2", 2)));
  for (RawStream* squatter : {&other_settings, &same_settings}) {
    std::optional<proto::ServerMessage> m = squatter->Read();
    ASSERT_TRUE(m.has_value() && m->has_joined()) << (m ? m->DebugString() : "ended");
  }
  for (const std::string run : {"4242.0", "4343.0"}) {
    auto a = StartAgent(endpoint_, "real-a", run, "2:2", alice);
    auto b = StartAgent(endpoint_, "real-b", run, "2:2", alice);
    ASSERT_TRUE(a->WaitForOutputContains("ASSIGNMENT round=1 ", kWait)) << a->out() << a->err();
    ASSERT_TRUE(b->WaitForOutputContains("ASSIGNMENT round=1 ", kWait)) << b->out() << b->err();
    EXPECT_THAT(a->out(), HasSubstr("group_world_size=2 "));
    proto::StatusResponse real = RunStatus(run, alice);
    ASSERT_EQ(real.members_size(), 2) << real.DebugString();
    for (const auto& member : real.members()) {
      EXPECT_THAT(member.node_id(), HasSubstr("real-")) << real.DebugString();
    }
    // The server's own token names the run in full; mallory's sees only its own run.
    EXPECT_EQ(RunStatus("alice/" + run).members_size(), 2);
    EXPECT_THAT(RunStatus(run, mallory).members(0).node_id(), HasSubstr("squatter-"));
  }
  // A made-up scoped token is no token.
  RawStream forged(stub_.get(), "ddprun1.alice." + std::string(64, '0'));
  ASSERT_TRUE(forged.Write(JoinAs("4242.0", "forged", 2)));
  EXPECT_FALSE(forged.Read().has_value());
  EXPECT_EQ(forged.Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  other_settings.Finish();
  same_settings.Finish();
}

// Issue 43, minor: without --secret-file the daemon says at start what a restart costs.
TEST_F(SecurityTest, WithoutASecretFileTheDaemonWarnsAtStart) {
  StartServer();
  EXPECT_TRUE(daemon_->WaitForOutputContains(
      "no --secret-file: after a restart of this server, re-registrations for the runs it lost "
      "cannot be verified",
      kWait))
      << daemon_->err();
  TempDir dir;
  StartServer({"--port", "0", "--secret-file", dir.File("secret")});
  daemon_->Signal(SIGTERM);
  ASSERT_TRUE(daemon_->Wait(kWait).has_value());  // its output is complete
  EXPECT_THAT(daemon_->err(), Not(HasSubstr("no --secret-file")));
}

// A join of the embedded-server test's run: --nnodes=2:3, one worker, --max-restarts=3.
proto::AgentMessage JoinSplit(const std::string& node, const std::string& formerly = "",
                              const std::string& formerly_key = "") {
  proto::AgentMessage m = JoinAs("split", node, 2);
  m.mutable_join()->set_max_nodes(3);
  m.mutable_join()->set_nproc_per_node(1);
  m.mutable_join()->set_formerly_node_id(formerly);
  m.mutable_join()->set_formerly_member_key(formerly_key);
  return m;
}

// The status of `run`, or nullopt while the server does not know it (yet).
std::optional<proto::StatusResponse> TryStatus(proto::RendezvousService::Stub* stub,
                                               const std::string& run) {
  grpc::ClientContext context;
  context.AddMetadata(kAuthMetadataKey, AuthMetadataValue(kToken));
  context.set_deadline(std::chrono::system_clock::now() + seconds(2));
  proto::StatusRequest request;
  request.set_run_id(run);
  proto::StatusResponse response;
  if (!stub->Status(&context, request, &response).ok()) return std::nullopt;
  return response;
}

// Issue 43 S2, against the server a real ddprun agent hosts (it fails over, so a round needs a
// majority of the last round's members): a token holder on the host's side of a cut claims to be
// a silent member rejoining under a new id, or the host itself. Neither claim is believed
// without that member's key: no round forms for the forger, the host keeps its name. A member
// that really rejoins, with its key, is counted and the run goes on.
TEST(FormerIdTest, AClaimToBeAFormerMemberCountsOnlyWithThatMembersKey) {
  ::ddprun::testing::ReservedPort port;
  ASSERT_GT(port.port(), 0);
  const std::string endpoint = "127.0.0.1:" + std::to_string(port.port());
  Subprocess host({BinPath("ddprun"), "--rdzv-backend=c10d", "--rdzv-endpoint=" + endpoint,
                   "--rdzv-conf=is_host=1,keep_alive_interval=0.5,keep_alive_max_attempt=3,"
                   "last_call_timeout=0.5,join_timeout=60",
                   "--nnodes=2:3", "--nproc-per-node=1", "--max-restarts=3", "--rdzv-id=split",
                   "--preflight=off",  // the raw streams below answer no preflight
                   "--no-python", "/bin/sh", "-c", "sleep 60"},
                  std::map<std::string, std::string>{{kTokenEnv, kToken}});
  ASSERT_TRUE(host.WaitForOutputContains("hosting the rendezvous", kWait)) << host.err();
  auto stub = proto::RendezvousService::NewStub(
      grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials()));
  std::string host_id;
  ASSERT_TRUE(WaitUntil(
      [&] {
        std::optional<proto::StatusResponse> s = TryStatus(stub.get(), "split");
        if (s.has_value() && s->members_size() == 1) host_id = s->members(0).node_id();
        return !host_id.empty();
      },
      kWait));

  // Round 1: the host, b and c. Then b and c fall silent (cut off, as far as the host's side
  // can tell): their leases run out and the host alone is 1 of 3, no majority.
  RawStream b(stub.get()), c(stub.get());
  ASSERT_TRUE(b.Write(JoinSplit("b")));
  ASSERT_TRUE(c.Write(JoinSplit("c")));
  std::optional<proto::ServerMessage> joined_b = b.Read();
  ASSERT_TRUE(joined_b.has_value() && joined_b->has_joined());
  const std::string key_b = joined_b->joined().member_key();
  for (RawStream* member : {&b, &c}) {
    std::optional<proto::ServerMessage> m = member->Read();
    if (m.has_value() && m->has_joined()) m = member->Read();
    ASSERT_TRUE(m.has_value() && m->has_assignment()) << (m ? m->DebugString() : "ended");
    EXPECT_EQ(m->assignment().round(), 1);
    EXPECT_EQ(m->assignment().group_world_size(), 3);
  }
  ASSERT_TRUE(WaitUntil(
      [&] {
        std::optional<proto::StatusResponse> s = TryStatus(stub.get(), "split");
        return s.has_value() && s->phase() == "joining" && s->members_size() == 1;
      },
      kWait));

  // A forger claims to be b, back under a new id, without b's key: not counted.
  RawStream forger(stub.get());
  ASSERT_TRUE(forger.Write(JoinSplit("forger", "b", std::string(64, 'f'))));
  std::optional<proto::ServerMessage> m = forger.Read();
  ASSERT_TRUE(m.has_value() && m->has_joined()) << (m ? m->DebugString() : "ended");
  EXPECT_TRUE(host.WaitForOutputContains("ignored a claim to be formerly node 'b'", kWait))
      << host.err();
  // Believed, it made a majority of 2 of 3, and a round after the last call of 0.5 s.
  EXPECT_FALSE(WaitUntil(
      [&] {
        std::optional<proto::StatusResponse> s = TryStatus(stub.get(), "split");
        return s.has_value() && s->round() >= 2;
      },
      seconds(3)))
      << "a round formed on a forged claim";

  // A refused join claiming to be the host (other --nnodes) does not rename the host (it did,
  // before the join was checked, and failover then skipped the real successor), nor does an
  // accepted one without the host's key.
  RawStream refused(stub.get());
  proto::AgentMessage mismatch = JoinSplit("refused", host_id);
  mismatch.mutable_join()->set_min_nodes(5);
  mismatch.mutable_join()->set_max_nodes(5);
  ASSERT_TRUE(refused.Write(mismatch));
  m = refused.Read();
  ASSERT_TRUE(m.has_value() && m->has_close()) << (m ? m->DebugString() : "ended");
  RawStream pretender(stub.get());
  ASSERT_TRUE(pretender.Write(JoinSplit("pretender", host_id)));
  m = pretender.Read();
  ASSERT_TRUE(m.has_value() && m->has_joined()) << (m ? m->DebugString() : "ended");
  EXPECT_EQ(m->joined().host_node_id(), host_id);

  // b itself, back under a new id with its key: counted, and the run goes on.
  RawStream back(stub.get());
  ASSERT_TRUE(back.Write(JoinSplit("b-rejoin1", "b", key_b)));
  m = back.Read();
  ASSERT_TRUE(m.has_value() && m->has_joined()) << (m ? m->DebugString() : "ended");
  m = back.Read();
  ASSERT_TRUE(m.has_value() && m->has_assignment()) << (m ? m->DebugString() : "ended");
  EXPECT_GE(m->assignment().round(), 2);
  EXPECT_EQ(m->assignment().host_node_id(), host_id);
  host.Signal(SIGTERM);
  host.Wait(kWait);
}

}  // namespace
}  // namespace ddprun::rendezvous
