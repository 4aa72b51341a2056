// The rendezvous client's decisions (fencing, failover, rejoin, reconnect budgets) driven
// directly on a fake clock: each test runs in microseconds, with the network's answers (probe
// results, stream ends) given as events.
#include "rendezvous/client/connection_state.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using Type = ClientAction::Type;

constexpr milliseconds kInterval{1000};  // keep_alive_interval
constexpr int kAttempts = 3;             // keep_alive_max_attempt: the lease is 3 s
constexpr milliseconds kReadTimeout{20000};
constexpr milliseconds kJoinTimeout{60000};

const std::vector<Successor> kMembers = {
    {"host", "10.0.0.1"}, {"me", "10.0.0.2"}, {"third", "10.0.0.3"}};

// The machine plus a fake clock and the actions of the last event.
class Driver {
 public:
  explicit Driver(HostLoss host_loss = HostLoss::kFailOver, bool can_host = true,
                  bool looks = false)
      : machine_(Config(host_loss, can_host, looks)) {}

  static ConnectionConfig Config(HostLoss host_loss, bool can_host, bool looks) {
    ConnectionConfig c;
    c.endpoint = "10.0.0.1:29400";
    c.timeouts.keep_alive_interval = kInterval;
    c.timeouts.keep_alive_max_attempt = kAttempts;
    c.timeouts.join_timeout = kJoinTimeout;
    c.read_timeout = kReadTimeout;
    c.host_loss = host_loss;
    c.can_host = can_host;
    c.looks_for_the_run = looks;
    return c;
  }

  ConnectionStateMachine& m() { return machine_; }
  TimePoint now() const { return clock_.Now(); }
  void Advance(Duration d) { clock_.Advance(d); }
  const ClientActions& last() const { return last_; }

  const ClientActions& Join(int min_nodes = 1, int max_nodes = 1) {
    NodeInfo node;
    node.run_id = "run";
    node.node_id = "me";
    node.min_nodes = min_nodes;
    node.max_nodes = max_nodes;
    return Take(machine_.OnJoin(node, now()));
  }
  const ClientActions& Say(const ServerWord& w) {
    return Take(machine_.OnServerWord(machine_.generation(), w, now()));
  }
  const ClientActions& Joined(bool embedded = false, const std::string& host = "",
                              const std::string& key = "key1") {
    ServerWord w;
    w.kind = ServerWord::Kind::kJoined;
    w.embedded = embedded;
    w.host_node_id = host;
    w.member_key = key;
    return Say(w);
  }
  // Joined, with the run's liveness path on: the server's UDP port 4711 and this node's index.
  const ClientActions& JoinedWithLiveness(uint32_t node_index, bool embedded = false,
                                          const std::string& host = "") {
    ServerWord w;
    w.kind = ServerWord::Kind::kJoined;
    w.embedded = embedded;
    w.host_node_id = host;
    w.member_key = "key1";
    w.liveness.port = 4711;
    w.liveness.node_index = node_index;
    w.liveness.salt = "salt";
    w.liveness.settings.mode = LivenessMode::kOn;
    return Say(w);
  }
  // An assignment of round `round` whose members are `members` (node id, addr) in group-rank
  // order.
  const ClientActions& Assigned(int64_t round, const std::vector<Successor>& members) {
    ServerWord w;
    w.kind = ServerWord::Kind::kAssignment;
    w.assignment.round = round;
    w.assignment.successors = members;
    return Say(w);
  }
  // Joined to a server embedded in agent "host", with the three kMembers in round 1.
  void JoinEmbedded(int min_nodes, int max_nodes);
  const ClientActions& Ack() {
    ServerWord w;
    w.kind = ServerWord::Kind::kAck;
    return Say(w);
  }
  const ClientActions& End(StreamEnd::Code code, const std::string& message = "broken") {
    StreamEnd end;
    end.code = code;
    end.grpc_code = 14;
    end.message = message;
    return Take(machine_.OnStreamEnd(machine_.generation(), end, now()));
  }
  // Fires the wake of `kind` the last event armed (at its time: the clock moves there).
  const ClientActions& Fire(Wake::Kind kind) {
    const ClientAction* a = Find(Type::kWakeAt, kind);
    if (a == nullptr) a = Pending(kind);
    EXPECT_NE(a, nullptr) << "no wake armed: " << static_cast<int>(kind);
    if (a == nullptr) return last_;
    const ClientAction wake = *a;
    if (wake.at > now()) clock_.Advance(wake.at - now());
    return Take(machine_.OnWake(wake.wake, now()));
  }
  const ClientActions& Probed(ProbeResult result) {
    const ClientAction* probe = Find(Type::kProbe);
    EXPECT_NE(probe, nullptr) << "no probe asked for";
    if (probe == nullptr) return last_;
    const Wake wake = probe->wake;
    return Take(machine_.OnProbed(wake, result, now()));
  }
  // Heartbeats until the machine decides something other than another heartbeat.
  const ClientActions& HeartbeatUntilDecided(int max_beats = 20) {
    for (int i = 0; i < max_beats; ++i) {
      Fire(Wake::Kind::kHeartbeat);
      if (!Has(Type::kSendHeartbeat)) break;
    }
    return last_;
  }

  bool Has(Type type) const { return Find(type) != nullptr; }
  const ClientAction* Find(Type type, std::optional<Wake::Kind> kind = std::nullopt) const {
    for (const ClientAction& a : last_) {
      if (a.type == type && (!kind || a.wake.kind == *kind)) return &a;
    }
    return nullptr;
  }
  std::string Messages() const {
    std::string all;
    for (const ClientAction& a : last_) all += a.message + std::string(a.status.message()) + "\n";
    return all;
  }

 private:
  const ClientActions& Take(ClientActions actions) {
    last_ = std::move(actions);
    for (const ClientAction& a : last_) {
      if (a.type == Type::kWakeAt) pending_.insert_or_assign(a.wake.kind, a);
      if (a.type == Type::kStartCall) {
        ClientAction read(Type::kWakeAt);
        read.at = a.at;
        read.wake.kind = Wake::Kind::kReadTimeout;
        read.wake.generation = a.generation;
        pending_.insert_or_assign(Wake::Kind::kReadTimeout, read);
      }
    }
    return last_;
  }
  const ClientAction* Pending(Wake::Kind kind) const {
    auto it = pending_.find(kind);
    return it == pending_.end() ? nullptr : &it->second;
  }

  FakeClock clock_;
  ConnectionStateMachine machine_;
  ClientActions last_;
  std::map<Wake::Kind, ClientAction> pending_;  // the latest wake of each kind
};

void Driver::JoinEmbedded(int min_nodes, int max_nodes) {
  Join(min_nodes, max_nodes);
  Joined(/*embedded=*/true, "host");
  Assigned(1, kMembers);
}

bool HasAction(const ClientActions& actions, Type type) {
  return std::any_of(actions.begin(), actions.end(),
                     [type](const ClientAction& a) { return a.type == type; });
}

// ---- Fencing ----

TEST(ConnectionStateTest, FixedWorldIsFencedAfterALeaseOfSilence) {
  Driver d;
  d.Join();
  d.Joined();
  ASSERT_EQ(d.m().state(), ConnectionState::kJoined);
  const TimePoint last_word = d.now();
  d.HeartbeatUntilDecided();
  ASSERT_TRUE(d.Has(Type::kClose)) << d.Messages();
  EXPECT_EQ(d.Find(Type::kClose)->status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(d.Messages(), HasSubstr("fenced: no word from the rendezvous server"));
  EXPECT_EQ(d.m().state(), ConnectionState::kClosed);
  // Not before the lease (3 s) had passed: heartbeats at 1, 2, 3 s; the verdict at 4 s.
  EXPECT_EQ(d.now() - last_word, 4 * kInterval);
}

TEST(ConnectionStateTest, UnansweredHeartbeatsAloneDoNotFence) {
  // Urgent progress reports (a hang being reported) send heartbeats between the timer's: many
  // unanswered, but the silence is still shorter than the lease.
  Driver d;
  d.Join();
  d.Joined();
  const TimePoint last_word = d.now();
  for (int i = 0; i < 2 * kAttempts; ++i) {
    ASSERT_EQ(d.m().OnProgress(/*urgent=*/true).size(), 1u);
  }
  d.HeartbeatUntilDecided();
  ASSERT_TRUE(d.Has(Type::kClose));
  EXPECT_EQ(d.now() - last_word, 4 * kInterval);  // silence > 3 s, not >= 3 s
}

TEST(ConnectionStateTest, AnyWordFromTheServerRestartsTheLease) {
  Driver d;
  d.Join();
  d.Joined();
  for (int i = 0; i < 10; ++i) {
    d.Fire(Wake::Kind::kHeartbeat);
    ASSERT_TRUE(d.Has(Type::kSendHeartbeat)) << "beat " << i << ": " << d.Messages();
    d.Ack();
  }
  EXPECT_EQ(d.m().state(), ConnectionState::kJoined);
}

TEST(ConnectionStateTest, AnAgentThatWasStoppedHeartbeatsBeforeJudgingTheSilence) {
  // SIGSTOP for longer than the lease: the silence is long, but no heartbeat went unanswered,
  // so the agent asks first (the server's verdict, or its answer, comes back).
  Driver d;
  d.Join();
  d.Joined();
  d.Advance(std::chrono::seconds(30));
  d.Fire(Wake::Kind::kHeartbeat);
  EXPECT_TRUE(d.Has(Type::kSendHeartbeat));
  EXPECT_FALSE(d.Has(Type::kClose));
}

TEST(ConnectionStateTest, ElasticNodeFencedRejoinsAsANewNodeWithinJoinTimeout) {
  Driver d;
  d.Join(/*min_nodes=*/1, /*max_nodes=*/4);
  d.Joined(false, "", "old-key");
  const uint64_t before = d.m().generation();
  d.HeartbeatUntilDecided();
  ASSERT_TRUE(d.Has(Type::kRejoinAsNewNode)) << d.Messages();
  EXPECT_FALSE(d.Has(Type::kClose));
  EXPECT_THAT(d.Find(Type::kRejoinAsNewNode)->message, HasSubstr("fenced"));
  const ClientAction* call = d.Find(Type::kStartCall);
  ASSERT_NE(call, nullptr);
  EXPECT_EQ(call->at - d.now(), kJoinTimeout);
  EXPECT_GT(call->generation, before);
  EXPECT_EQ(d.m().state(), ConnectionState::kJoining);
  // The old key proves the former node id; the new node has none yet.
  EXPECT_EQ(d.m().former_key(), "old-key");
  EXPECT_EQ(d.m().member_key(), "");
  EXPECT_EQ(d.m().claim().group, ResumeClaim::Group::kWaiting);
}

TEST(ConnectionStateTest, FencesOnItsDetectorOfTheServerNotTheLease) {
  Driver d;
  d.Join(1, 4);
  d.JoinedWithLiveness(/*node_index=*/3);
  const ClientAction* start = d.Find(Type::kStartLiveness);
  ASSERT_NE(start, nullptr) << d.Messages();
  EXPECT_EQ(start->liveness.port, 4711);
  EXPECT_EQ(start->liveness.node_index, 3u);
  const uint64_t generation = start->generation;
  // A report of an earlier sender counts for nothing.
  d.Advance(std::chrono::milliseconds(260));
  EXPECT_TRUE(
      d.m().OnServerSilent(generation + 1, std::chrono::milliseconds(260), d.now()).empty());
  // 260 ms after the last ack, far inside the 3 s lease: the sender's detector decides.
  const ClientActions fenced =
      d.m().OnServerSilent(generation, std::chrono::milliseconds(260), d.now());
  bool rejoins = false;
  for (const ClientAction& a : fenced) {
    if (a.type == Type::kRejoinAsNewNode) {
      rejoins = true;
      EXPECT_THAT(a.message, HasSubstr("fenced: no liveness ack from the rendezvous server at "
                                       "10.0.0.1:29400 for 260 ms"));
    }
  }
  EXPECT_TRUE(rejoins);
  EXPECT_EQ(d.m().state(), ConnectionState::kJoining);
  // Once fenced, a late report of the same sender changes nothing.
  EXPECT_TRUE(d.m().OnServerSilent(generation, std::chrono::milliseconds(300), d.now()).empty());
}

TEST(ConnectionStateTest, AJoinedWithoutALivenessPortStartsNoSender) {
  Driver d;
  d.Join();
  d.Joined();
  EXPECT_FALSE(d.Has(Type::kStartLiveness));
}

TEST(ConnectionStateTest, TheServersGiveUpIsAFenceToo) {
  Driver d;
  d.Join(1, 4);
  d.Joined();
  ServerWord close;
  close.kind = ServerWord::Kind::kClose;
  close.given_up = true;
  close.message = "lease expired";
  d.Say(close);
  EXPECT_TRUE(d.Has(Type::kRejoinAsNewNode));
  EXPECT_THAT(d.Messages(), HasSubstr("gave this node up (lease expired)"));
}

// ---- Reconnecting to a server outside the job (ddprun-rdzv) ----

TEST(ConnectionStateTest, ABrokenStreamReconnectsWithDoublingBackoff) {
  Driver d;
  d.Join();
  d.Joined();
  d.End(StreamEnd::Code::kUnavailable);
  EXPECT_EQ(d.m().state(), ConnectionState::kReconnecting);
  EXPECT_TRUE(d.Has(Type::kReconnecting));
  std::vector<milliseconds> backoffs;
  for (int i = 0; i < 6; ++i) {
    const ClientAction* wake = d.Find(Type::kWakeAt, Wake::Kind::kReconnect);
    ASSERT_NE(wake, nullptr) << i;
    backoffs.push_back(std::chrono::duration_cast<milliseconds>(wake->at - d.now()));
    d.Fire(Wake::Kind::kReconnect);
    ASSERT_TRUE(d.Has(Type::kStartCall)) << i;
    d.End(StreamEnd::Code::kUnavailable);
  }
  EXPECT_EQ(backoffs,
            (std::vector<milliseconds>{milliseconds(100), milliseconds(200), milliseconds(400),
                                       milliseconds(800), milliseconds(1000), milliseconds(1000)}));
  // Joined again: the run goes on; the backoff starts over.
  d.Fire(Wake::Kind::kReconnect);
  d.Joined();
  EXPECT_EQ(d.m().state(), ConnectionState::kJoined);
}

TEST(ConnectionStateTest, ASilentServerFencesWhileReconnectingButADownOneDoesNot) {
  Driver d;
  d.Join();
  d.Joined();
  d.End(StreamEnd::Code::kUnavailable);
  // Within the lease: no probe, just the next heartbeat.
  d.Fire(Wake::Kind::kHeartbeat);
  EXPECT_FALSE(d.Has(Type::kProbe));
  d.Fire(Wake::Kind::kHeartbeat);
  d.Fire(Wake::Kind::kHeartbeat);
  d.Fire(Wake::Kind::kHeartbeat);  // 4 s: past the lease, the address is asked
  ASSERT_TRUE(d.Has(Type::kProbe));
  d.Probed(ProbeResult::kRefused);  // the server is down: it decides nothing about anyone
  EXPECT_EQ(d.m().state(), ConnectionState::kServerDown);
  EXPECT_FALSE(d.Has(Type::kClose));
  for (int i = 0; i < 10; ++i) {
    d.Fire(Wake::Kind::kHeartbeat);
    ASSERT_TRUE(d.Has(Type::kProbe));
    d.Probed(ProbeResult::kRefused);
  }
  EXPECT_EQ(d.m().state(), ConnectionState::kServerDown);
  // Back: the channel connects now, and silence counts from here.
  d.Fire(Wake::Kind::kHeartbeat);
  d.Probed(ProbeResult::kAccepting);
  EXPECT_TRUE(d.Has(Type::kResetBackoff));
  EXPECT_EQ(d.m().state(), ConnectionState::kReconnecting);
  // A lease later still no stream, and the address does not answer: cut off.
  d.Fire(Wake::Kind::kHeartbeat);
  EXPECT_FALSE(d.Has(Type::kProbe));
  d.Fire(Wake::Kind::kHeartbeat);
  d.Fire(Wake::Kind::kHeartbeat);
  d.Fire(Wake::Kind::kHeartbeat);
  d.Probed(ProbeResult::kNoAnswer);
  ASSERT_TRUE(d.Has(Type::kClose));
  EXPECT_THAT(d.Messages(), HasSubstr("has not been reachable for 4000 ms"));
  EXPECT_THAT(d.Messages(), HasSubstr("no answer"));
}

TEST(ConnectionStateTest, ReconnectingGivesUpAfterReadTimeout) {
  Driver d;
  d.Join();
  d.Joined();
  d.End(StreamEnd::Code::kUnavailable, "Socket closed");
  const TimePoint broke = d.now();
  for (int i = 0; i < 100 && !d.Has(Type::kClose); ++i) {
    d.Fire(Wake::Kind::kReconnect);
    if (d.Has(Type::kStartCall)) {
      // Each re-registration may take what is left of read_timeout, no more.
      d.Fire(Wake::Kind::kReadTimeout);
      ASSERT_TRUE(d.Has(Type::kCancelCall));
      d.End(StreamEnd::Code::kOther, "Cancelled");
    }
  }
  ASSERT_TRUE(d.Has(Type::kClose));
  EXPECT_THAT(d.Messages(), HasSubstr("for read_timeout (20 s) after lost the rendezvous stream"));
  EXPECT_EQ(d.now() - broke, kReadTimeout);
}

TEST(ConnectionStateTest, AReRegistrationClaimsWhatTheNodeKnowsOfItsLastRound) {
  Driver d;
  d.Join(1, 4);
  EXPECT_FALSE(d.m().ever_joined());  // the first join claims nothing
  d.Joined();
  d.Assigned(3, kMembers);
  EXPECT_TRUE(d.m().ever_joined());
  EXPECT_EQ(d.m().claim().last.round, 3);
  EXPECT_EQ(d.m().claim().group, ResumeClaim::Group::kRunning);
  d.m().OnGroupState(3, GroupState::kSucceeded, std::nullopt);
  EXPECT_EQ(d.m().claim().group, ResumeClaim::Group::kSucceeded);
  // A restart of round 3 heard: the workers are being stopped, whatever they report after.
  ServerWord restart;
  restart.kind = ServerWord::Kind::kRestart;
  restart.round = 3;
  restart.restart_count = 2;
  restart.cause = Cause::kWorkerFailure;
  d.Say(restart);
  ASSERT_TRUE(d.Has(Type::kRestart));
  EXPECT_EQ(d.Find(Type::kRestart)->cause, Cause::kWorkerFailure);  // handed on as it came
  EXPECT_EQ(d.m().claim().group, ResumeClaim::Group::kWaiting);
  EXPECT_EQ(d.m().claim().restarts_used, 2);
  d.m().OnGroupState(3, GroupState::kRunning, std::nullopt);
  EXPECT_EQ(d.m().claim().group, ResumeClaim::Group::kWaiting);
}

// Issue 41: a node the server set aside says so when it re-registers (a server that lost the
// run must not take it for a spare); a plain standby or a place in a round ends that.
TEST(ConnectionStateTest, AReRegistrationClaimsThatTheNodeIsSetAside) {
  Driver d;
  d.Join(1, 4);
  d.Joined();
  d.Assigned(3, kMembers);
  ServerWord aside;
  aside.kind = ServerWord::Kind::kStandby;
  aside.standby = StandbyNotice{3, 3, -1, "this node was evicted from the run as slow"};
  d.Say(aside);
  ASSERT_TRUE(d.Has(Type::kStandby));
  EXPECT_EQ(d.m().claim().set_aside, "this node was evicted from the run as slow");
  ServerWord spare;
  spare.kind = ServerWord::Kind::kStandby;
  spare.standby = StandbyNotice{3, 3, 0, ""};  // passed the preflight again
  d.Say(spare);
  EXPECT_EQ(d.m().claim().set_aside, "");
  d.Say(aside);
  d.Assigned(4, kMembers);
  EXPECT_EQ(d.m().claim().set_aside, "");
}

// ---- The first join ----

TEST(ConnectionStateTest, AJoinBrokenBeforeItsAcknowledgementIsRetriedWithinItsBudget) {
  Driver d;
  d.Join();
  const TimePoint start = d.now();
  d.End(StreamEnd::Code::kUnavailable, "connection refused");
  EXPECT_TRUE(d.Has(Type::kReconnecting));
  EXPECT_THAT(d.Messages(), HasSubstr("trying again until read_timeout (20 s)"));
  for (int i = 0; i < 100 && !d.Has(Type::kClose); ++i) {
    d.Fire(Wake::Kind::kRetryJoin);
    if (d.Has(Type::kStartCall)) d.End(StreamEnd::Code::kUnavailable, "connection refused");
    EXPECT_FALSE(d.Has(Type::kReconnecting)) << "told once";
  }
  ASSERT_TRUE(d.Has(Type::kClose));
  EXPECT_THAT(d.Messages(), HasSubstr("cannot reach the rendezvous server at 10.0.0.1:29400 "
                                      "within read_timeout (20 s): lost the rendezvous stream"));
  EXPECT_GE(d.now() - start, kReadTimeout);
}

TEST(ConnectionStateTest, ARefusedTokenEndsTheRunAtOnce) {
  Driver d;
  d.Join();
  d.End(StreamEnd::Code::kUnauthenticated, "bad token");
  ASSERT_TRUE(d.Has(Type::kClose));
  EXPECT_EQ(d.Find(Type::kClose)->status.code(), absl::StatusCode::kUnauthenticated);
}

TEST(ConnectionStateTest, ReactionsOfAReplacedCallAreIgnored) {
  Driver d;
  d.Join(1, 4);
  const uint64_t first = d.m().generation();
  d.m().OnStepOut("health check failed", d.now());
  ServerWord joined;
  joined.kind = ServerWord::Kind::kJoined;
  EXPECT_TRUE(d.m().OnServerWord(first, joined, d.now()).empty());
  EXPECT_EQ(d.m().state(), ConnectionState::kSteppedOut);
}

// ---- Stepping out and in ----

TEST(ConnectionStateTest, StepOutLeavesAndStepInJoinsAsANewNode) {
  Driver d;
  d.Join(1, 4);
  d.Joined();
  const ClientActions out = d.m().OnStepOut("health check failed", d.now());
  EXPECT_TRUE(HasAction(out, Type::kSendLeave));
  EXPECT_TRUE(HasAction(out, Type::kCutCallLater));
  EXPECT_TRUE(HasAction(out, Type::kRetireCall));
  EXPECT_EQ(d.m().state(), ConnectionState::kSteppedOut);
  const ClientActions in = d.m().OnStepIn(d.now());
  ASSERT_GE(in.size(), 2u);
  EXPECT_EQ(in[0].type, Type::kRenameForRejoin);
  EXPECT_EQ(d.m().state(), ConnectionState::kJoining);
  EXPECT_EQ(in.back().type, Type::kStartCall);
  EXPECT_EQ(in.back().at - d.now(), kJoinTimeout);
}

// ---- Failover of an embedded server ----

TEST(ConnectionStateTest, ARefusingHostIsReplacedByItsFirstSuccessor) {
  Driver d(HostLoss::kFailOver, /*can_host=*/false);
  d.Join(1, 4);
  d.Joined(/*embedded=*/true, "host");
  d.Assigned(1, {{"host", "10.0.0.1"}, {"third", "10.0.0.3"}, {"me", "10.0.0.2"}});
  d.End(StreamEnd::Code::kUnavailable);
  EXPECT_EQ(d.m().state(), ConnectionState::kProbingHost);
  d.Probed(ProbeResult::kRefused);
  EXPECT_EQ(d.m().state(), ConnectionState::kFailingOver);
  EXPECT_THAT(d.Messages(), HasSubstr("the run moves to its successor"));
  ASSERT_TRUE(d.Has(Type::kNewEndpoint));
  EXPECT_EQ(d.m().endpoint(), "10.0.0.3:29400");  // the first member that is not the host
  ASSERT_TRUE(d.Has(Type::kStartCall));
  EXPECT_EQ(d.Find(Type::kStartCall)->at - d.now(), kInterval * kAttempts);  // its lease
  // The host is certainly gone: the claim says so, by its group rank.
  ASSERT_TRUE(d.m().claim().gone_group_rank.has_value());
  EXPECT_EQ(*d.m().claim().gone_group_rank, 0);
  // The successor does not take the run within its lease: the next one (this node).
  d.Fire(Wake::Kind::kReadTimeout);
  d.End(StreamEnd::Code::kOther, "Cancelled");
  EXPECT_EQ(d.m().endpoint(), "10.0.0.2:29400");
  // Nor does that one: no successor is left.
  d.Fire(Wake::Kind::kReadTimeout);
  d.End(StreamEnd::Code::kOther, "Cancelled");
  ASSERT_TRUE(d.Has(Type::kClose));
  EXPECT_THAT(d.Messages(), HasSubstr("none of its 2 successor(s) took the run over"));
}

TEST(ConnectionStateTest, TheFirstSuccessorHostsTheRunItself) {
  Driver d(HostLoss::kFailOver, /*can_host=*/true);
  d.JoinEmbedded(1, 4);
  d.End(StreamEnd::Code::kUnavailable);
  d.Probed(ProbeResult::kRefused);
  const ClientAction* host = d.Find(Type::kHostHere);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->port, 29400);
  EXPECT_FALSE(d.Has(Type::kStartCall));  // not before the server is up
  d.m().OnHosted(absl::OkStatus(), 29400, d.now());
  EXPECT_EQ(d.m().endpoint(), "10.0.0.2:29400");
}

TEST(ConnectionStateTest, AHostThatStillAcceptsIsReconnectedToNotFailedOver) {
  // The server ended this stream only (or a successor already serves there): five probes in a
  // row accepted, 50 ms apart.
  Driver d;
  d.JoinEmbedded(1, 4);
  d.End(StreamEnd::Code::kOk);
  for (int i = 0; i < kAcceptingProbesToReconnect - 1; ++i) {
    d.Probed(ProbeResult::kAccepting);
    ASSERT_TRUE(d.Find(Type::kWakeAt, Wake::Kind::kProbeHost)) << i;
    EXPECT_EQ(d.Find(Type::kWakeAt, Wake::Kind::kProbeHost)->at - d.now(), kHostProbeInterval);
    d.Fire(Wake::Kind::kProbeHost);
  }
  d.Probed(ProbeResult::kAccepting);
  EXPECT_EQ(d.m().state(), ConnectionState::kReconnecting);
  EXPECT_FALSE(d.Has(Type::kNewEndpoint));
}

TEST(ConnectionStateTest, AStaticJobAwaitsItsHostsReturn) {
  Driver d(HostLoss::kAwaitReturn);
  d.JoinEmbedded(2, 2);
  d.End(StreamEnd::Code::kUnavailable);
  d.Probed(ProbeResult::kRefused);
  EXPECT_EQ(d.m().state(), ConnectionState::kReconnecting);
  EXPECT_THAT(d.Messages(), HasSubstr("waiting for it to come back there"));
  EXPECT_EQ(d.m().endpoint(), "10.0.0.1:29400");
}

TEST(ConnectionStateTest, ASilentHostIsFailedOverAfterTheProbingTime) {
  Driver d;
  d.JoinEmbedded(1, 4);
  const TimePoint broke = d.now();
  d.End(StreamEnd::Code::kUnavailable);
  while (!d.Has(Type::kReconnecting)) {
    d.Advance(kHostProbeMax);  // each probe waits for its answer
    d.Probed(ProbeResult::kNoAnswer);
    if (d.Has(Type::kWakeAt)) d.Fire(Wake::Kind::kProbeHost);
  }
  EXPECT_GE(d.now() - broke, kFailoverProbing);
  EXPECT_EQ(d.m().state(), ConnectionState::kFailingOver);
  EXPECT_THAT(d.Messages(), HasSubstr("gone or cut off"));
  EXPECT_FALSE(d.m().claim().gone_group_rank.has_value());  // only silent: maybe alive
}

TEST(ConnectionStateTest, ALeaseOfSilenceFromAnEmbeddedServerFailsOverInsteadOfFencing) {
  Driver d(HostLoss::kFailOver, /*can_host=*/false);
  d.JoinEmbedded(1, 4);
  d.HeartbeatUntilDecided();
  EXPECT_TRUE(d.Has(Type::kCancelCall));
  EXPECT_FALSE(d.Has(Type::kRejoinAsNewNode));
  EXPECT_EQ(d.m().state(), ConnectionState::kFailingOver);
  EXPECT_THAT(d.Messages(), HasSubstr("no word from the rendezvous server at 10.0.0.1:29400"));
  // While walking the successors, silence is not probed: each successor has its own lease.
  d.Fire(Wake::Kind::kHeartbeat);
  EXPECT_FALSE(d.Has(Type::kProbe));
}

// The detector's verdict on an embedded server is the lease's, only sooner: the walk to the
// successor, not a fence (a fixed world would exit 3 with its host merely cut off).
TEST(ConnectionStateTest, ALivenessSilenceOfAnEmbeddedServerFailsOverInsteadOfFencing) {
  Driver d(HostLoss::kFailOver, /*can_host=*/false);
  d.Join(2, 2);
  d.JoinedWithLiveness(/*node_index=*/1, /*embedded=*/true, "host");
  const ClientAction* start = d.Find(Type::kStartLiveness);
  ASSERT_NE(start, nullptr) << d.Messages();
  const uint64_t generation = start->generation;
  d.Assigned(1, kMembers);
  d.Advance(std::chrono::milliseconds(260));
  const ClientActions walked =
      d.m().OnServerSilent(generation, std::chrono::milliseconds(260), d.now());
  EXPECT_TRUE(HasAction(walked, Type::kCancelCall));
  EXPECT_FALSE(HasAction(walked, Type::kRejoinAsNewNode));
  EXPECT_FALSE(HasAction(walked, Type::kClose));
  EXPECT_EQ(d.m().state(), ConnectionState::kFailingOver);
}

TEST(ConnectionStateTest, TheHostItselfIsFencedNotFailedOver) {
  // This agent hosts the server: silence from it fences like any server's.
  Driver d;
  d.Join(1, 1);
  d.Joined(true, "me");
  d.Assigned(1, kMembers);
  d.HeartbeatUntilDecided();
  ASSERT_TRUE(d.Has(Type::kClose));
  EXPECT_THAT(d.Messages(), HasSubstr("fenced"));
}

// ---- The other side of a healed partition ----

TEST(ConnectionStateTest, AHostWithoutARoundForALeaseLooksForTheRunAndMovesThere) {
  Driver d(HostLoss::kFailOver, true, /*looks=*/true);
  d.Join(1, 4);
  d.Joined(true, "me");
  // This agent hosts at the endpoint the user gave; "old" was a member of round 1 only.
  d.Assigned(1, {{"me", "10.0.0.1"}, {"old", "10.0.0.4"}, {"other", "10.0.0.3"}});
  d.Assigned(2, {{"me", "10.0.0.1"}, {"other", "10.0.0.3"}});
  ServerWord restart;
  restart.kind = ServerWord::Kind::kRestart;
  restart.round = 2;
  restart.reason = "a node was lost";
  d.Say(restart);
  d.Fire(Wake::Kind::kHeartbeat);
  EXPECT_FALSE(d.Has(Type::kLookForTheRun));  // waiting less than a lease
  for (int i = 0; i < 5 && !d.Has(Type::kLookForTheRun); ++i) {
    d.Ack();
    d.Fire(Wake::Kind::kHeartbeat);
  }
  const ClientAction* look = d.Find(Type::kLookForTheRun);
  ASSERT_NE(look, nullptr);
  EXPECT_EQ(look->mine.endpoint, "10.0.0.1:29400");
  // The other members of the last round by group rank, then those of earlier rounds; never
  // this agent's own server.
  ASSERT_EQ(look->others.size(), 2u);
  EXPECT_EQ(look->others[0].endpoint, "10.0.0.3:29400");
  EXPECT_EQ(look->others[0].order, 1);
  EXPECT_EQ(look->others[1].endpoint, "10.0.0.4:29400");
  EXPECT_EQ(look->others[1].order, 2);
  // No second question while one is out.
  d.Ack();
  d.Fire(Wake::Kind::kHeartbeat);
  EXPECT_FALSE(d.Has(Type::kLookForTheRun));
  RunServer other{"10.0.0.3:29400", 2, 3, 1};
  RunServer mine{"10.0.0.1:29400", 2, 1, -1};
  const ClientActions moved = d.m().OnLookAnswered(other, mine, d.now());
  EXPECT_TRUE(HasAction(moved, Type::kStopHosting));
  EXPECT_TRUE(HasAction(moved, Type::kStartCall));
  EXPECT_EQ(d.m().endpoint(), "10.0.0.3:29400");
  EXPECT_EQ(d.m().state(), ConnectionState::kJoining);
}

}  // namespace
}  // namespace ddprun::rendezvous
