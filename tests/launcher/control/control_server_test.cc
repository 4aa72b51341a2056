// ControlServer, the agent's end of the control channel, on a real EventLoop (its own thread)
// with the test thread as the workers over real Unix sockets: a hello is checked by the
// listener; anything that is not the protocol closes the connection with a log line naming
// why; a rank's new hello replaces its old channel; silent connections time out and are
// capped; a worker that does not read never blocks the agent.
#include "launcher/control/control_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "control/control_message.h"
#include "tests/testing/captured_log.h"
#include "tests/testing/loop_runner.h"
#include "tests/testing/test_env.h"
#include "tests/testing/unix_peer.h"

namespace ddprun::launcher {
namespace {

using ::ddprun::testing::CapturedLog;
using ::ddprun::testing::LoopRunner;
using ::ddprun::testing::UnixPeer;
using ::testing::HasSubstr;

constexpr std::chrono::milliseconds kWait{5000};  // bound on every wait that should succeed

// Records what the server tells its listener (on the loop thread); the test thread waits on it.
class FakeListener : public ControlServer::Listener {
 public:
  struct Checked {
    int local_rank;
    int64_t pid;
    pid_t peer_pid;
  };

  pid_t WorkerOf(pid_t peer_pid) override {
    absl::MutexLock lock(&mu_);
    return owner_;
  }
  // Every connection accepted from now on comes from the process tree of worker `pid` (0: of
  // none).
  void SetOwner(pid_t pid) {
    absl::MutexLock lock(&mu_);
    owner_ = pid;
  }
  std::string CheckHello(const control::HelloMessage& hello, pid_t peer_pid) override {
    absl::MutexLock lock(&mu_);
    checked_.push_back({hello.local_rank, hello.pid, peer_pid});
    return refusal_;
  }
  void OnHello(int local_rank) override {
    std::function<void(int)> then;
    {
      absl::MutexLock lock(&mu_);
      hellos_.push_back(local_rank);
      then = on_hello_;
    }
    if (then) then(local_rank);
  }
  void OnReady(int local_rank, const control::ReadyMessage& ready) override {
    std::function<void(int)> then;
    {
      absl::MutexLock lock(&mu_);
      readies_.push_back({local_rank, ready});
      then = on_ready_;
    }
    if (then) then(local_rank);
  }

  void OnChannelBroken(int local_rank, const std::string& why) override {
    absl::MutexLock lock(&mu_);
    broken_.push_back({local_rank, why});
  }
  std::vector<std::pair<int, std::string>> broken() {
    absl::MutexLock lock(&mu_);
    return broken_;
  }

  void Refuse(std::string why) {
    absl::MutexLock lock(&mu_);
    refusal_ = std::move(why);
  }
  // Runs on the loop thread after an accepted hello / a ready is recorded.
  void AfterHello(std::function<void(int)> fn) {
    absl::MutexLock lock(&mu_);
    on_hello_ = std::move(fn);
  }
  void AfterReady(std::function<void(int)> fn) {
    absl::MutexLock lock(&mu_);
    on_ready_ = std::move(fn);
  }

  // Waits until `n` hellos were accepted; the accepted local ranks in order.
  std::vector<int> WaitHellos(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return hellos_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::FromChrono(kWait));
    return hellos_;
  }
  std::vector<std::pair<int, control::ReadyMessage>> WaitReadies(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return readies_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::FromChrono(kWait));
    return readies_;
  }
  std::vector<Checked> checked() const {
    absl::MutexLock lock(&mu_);
    return checked_;
  }
  size_t hellos() const {
    absl::MutexLock lock(&mu_);
    return hellos_.size();
  }
  size_t readies() const {
    absl::MutexLock lock(&mu_);
    return readies_.size();
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::pair<int, std::string>> broken_ ABSL_GUARDED_BY(mu_);
  std::string refusal_ ABSL_GUARDED_BY(mu_);
  pid_t owner_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Checked> checked_ ABSL_GUARDED_BY(mu_);
  std::vector<int> hellos_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int, control::ReadyMessage>> readies_ ABSL_GUARDED_BY(mu_);
  std::function<void(int)> on_hello_ ABSL_GUARDED_BY(mu_);
  std::function<void(int)> on_ready_ ABSL_GUARDED_BY(mu_);
};

std::string Line(const control::ControlMessage& m) {
  return control::EncodeControlMessage(m) + "\n";
}

std::string Hello(int local_rank, int version = control::kControlProtocolVersion) {
  control::HelloMessage hello;
  hello.version = version;
  hello.local_rank = local_rank;
  hello.pid = getpid();
  return Line(hello);
}

std::string Ready(int64_t round, int64_t step) {
  control::ReadyMessage ready;
  ready.round = round;
  ready.step = step;
  return Line(ready);
}

control::AbortMessage Abort(int64_t round, std::string reason) {
  control::AbortMessage abort;
  abort.round = round;
  abort.reason = std::move(reason);
  return abort;
}

class ControlServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogSink(&log_);
    Listen(ControlServer::kHelloTimeout);
  }
  void TearDown() override {
    runner_.Stop();
    server_.reset();
    SetLogSink(nullptr);
  }

  void Listen(std::chrono::milliseconds hello_timeout) {
    auto server = runner_.Call(
        [&] { return ControlServer::Listen(runner_.loop(), path_, &listener_, hello_timeout); });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  UnixPeer Connect() {
    UnixPeer peer = UnixPeer::Connect(path_);
    EXPECT_TRUE(peer.connected()) << path_;
    return peer;
  }
  // A worker of `local_rank` whose hello was accepted.
  UnixPeer Speaker(int local_rank) {
    UnixPeer peer = Connect();
    const size_t before = listener_.hellos();
    EXPECT_TRUE(peer.Write(Hello(local_rank)));
    EXPECT_EQ(listener_.WaitHellos(before + 1).size(), before + 1);
    return peer;
  }
  bool Send(int local_rank, const control::ControlMessage& m) {
    return runner_.Call([&] { return server_->Send(local_rank, m); });
  }
  bool Connected(int local_rank) {
    return runner_.Call([&] { return server_->Connected(local_rank); });
  }
  // Waits for the server to close `peer`; then the log names why.
  void ExpectClosedFor(UnixPeer* peer, const std::string& why) {
    EXPECT_TRUE(peer->WaitClosed(kWait)) << "not closed; expected: " << why;
    // The line is logged before the close, so it is there once the peer sees EOF.
    EXPECT_THAT(log_.text(), HasSubstr(why));
  }

  ddprun::testing::TempDir dir_;
  const std::string path_ = dir_.File("control");
  CapturedLog log_;
  FakeListener listener_;
  LoopRunner runner_;
  std::unique_ptr<ControlServer> server_;  // used on the loop thread only, until Stop()
};

TEST_F(ControlServerTest, AHelloTheListenerAcceptsOpensTheRanksChannel) {
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600);
  EXPECT_FALSE(Connected(1));
  UnixPeer worker = Speaker(1);
  ASSERT_EQ(listener_.checked().size(), 1u);
  EXPECT_EQ(listener_.checked()[0].local_rank, 1);
  EXPECT_EQ(listener_.checked()[0].pid, getpid());
  EXPECT_EQ(listener_.checked()[0].peer_pid, getpid());  // SO_PEERCRED, not the hello's word
  EXPECT_EQ(listener_.WaitHellos(1), std::vector<int>{1});
  EXPECT_TRUE(Connected(1));
  // Both directions work: the agent's message arrives whole, the worker's ready is reported.
  ASSERT_TRUE(Send(1, Abort(3, "rank 5 failed")));
  std::optional<std::string> line = worker.ReadLine(kWait);
  ASSERT_TRUE(line.has_value());
  absl::StatusOr<control::ControlMessage> m = control::ParseControlMessage(*line);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(std::holds_alternative<control::AbortMessage>(*m));
  EXPECT_EQ(std::get<control::AbortMessage>(*m).reason, "rank 5 failed");
  // Two readies in one write, and one split over two writes.
  ASSERT_TRUE(worker.Write(Ready(3, 10) + Ready(3, 11)));
  const std::string third = Ready(4, -1);
  ASSERT_TRUE(worker.Write(third.substr(0, 7)));
  EXPECT_EQ(listener_.WaitReadies(2).size(), 2u);
  ASSERT_TRUE(worker.Write(third.substr(7)));
  auto readies = listener_.WaitReadies(3);
  ASSERT_EQ(readies.size(), 3u);
  EXPECT_EQ(readies[0].first, 1);
  EXPECT_EQ(readies[0].second.step, 10);
  EXPECT_EQ(readies[1].second.step, 11);
  EXPECT_EQ(readies[2].second.round, 4);
  EXPECT_EQ(readies[2].second.step, -1);
  EXPECT_FALSE(worker.Closed());
}

TEST_F(ControlServerTest, ARefusedHelloClosesTheConnection) {
  listener_.Refuse("pid 7 is no worker of this node");
  UnixPeer stranger = Connect();
  ASSERT_TRUE(stranger.Write(Hello(0)));
  ExpectClosedFor(&stranger, "hello refused: pid 7 is no worker of this node");
  EXPECT_EQ(listener_.checked().size(), 1u);
  EXPECT_EQ(listener_.hellos(), 0u);
  EXPECT_FALSE(Connected(0));
  EXPECT_FALSE(Send(0, Abort(0, "x")));
}

TEST_F(ControlServerTest, AnotherProtocolVersionIsClosedBeforeTheListenerIsAsked) {
  UnixPeer future = Connect();
  ASSERT_TRUE(future.Write(Hello(0, /*version=*/2)));
  ExpectClosedFor(&future, "protocol version 2");
  EXPECT_TRUE(listener_.checked().empty());
  EXPECT_FALSE(Connected(0));
}

TEST_F(ControlServerTest, AMessageBeforeTheHelloIsClosed) {
  UnixPeer rude = Connect();
  ASSERT_TRUE(rude.Write(Ready(0, 1)));
  ExpectClosedFor(&rude, "a message before its hello");
  EXPECT_THAT(log_.text(), HasSubstr("an unidentified connection"));
  EXPECT_EQ(listener_.readies(), 0u);
}

TEST_F(ControlServerTest, ASecondHelloIsClosedAndTheRankLosesItsChannel) {
  UnixPeer worker = Speaker(0);
  ASSERT_TRUE(worker.Write(Hello(0)));
  ExpectClosedFor(&worker, "control channel of local rank 0 closed: a second hello");
  EXPECT_EQ(listener_.hellos(), 1u);
  EXPECT_FALSE(Connected(0));
}

TEST_F(ControlServerTest, GarbageIsClosedAndShownEscaped) {
  UnixPeer before_hello = Connect();
  ASSERT_TRUE(before_hello.Write("GET / HTTP/1.0\r\n"));
  ExpectClosedFor(&before_hello, "a bad message (not JSON): 'GET / HTTP/1.0\\r'");
  UnixPeer worker = Speaker(1);
  ASSERT_TRUE(worker.Write("{\"type\":\"ready\",\"round\":1}\n"));
  ExpectClosedFor(&worker, "control channel of local rank 1 closed: a bad message (no \"step\")");
  EXPECT_EQ(listener_.readies(), 0u);
  EXPECT_FALSE(Connected(1));
  // The listener hears of the accepted rank's broken channel (the agent then kills the
  // worker: it can no longer re-form), not of the unidentified connection's.
  const auto broken = listener_.broken();
  ASSERT_EQ(broken.size(), 1u);
  EXPECT_EQ(broken[0].first, 1);
  EXPECT_THAT(broken[0].second, HasSubstr("a bad message (no \"step\")"));
}

TEST_F(ControlServerTest, ALineOverTheLimitIsClosed) {
  UnixPeer worker = Speaker(0);
  ASSERT_TRUE(worker.Write(std::string(control::kMaxControlLineBytes + 1, 'x')));  // no newline
  ExpectClosedFor(&worker, absl::StrCat("a line over ", control::kMaxControlLineBytes, " bytes"));
  // And one that ends with its newline in the same read.
  UnixPeer other = Speaker(1);
  ASSERT_TRUE(other.Write(std::string(control::kMaxControlLineBytes + 10, '{') + "\n"));
  EXPECT_TRUE(other.WaitClosed(kWait));
  EXPECT_FALSE(Connected(1));
}

TEST_F(ControlServerTest, AMessageOnlyTheAgentSendsIsClosed) {
  UnixPeer worker = Speaker(0);
  ASSERT_TRUE(worker.Write(Line(Abort(1, "I abort you"))));
  ExpectClosedFor(&worker,
                  "control channel of local rank 0 closed: a message only the agent sends");
  control::RoundMessage round;
  round.round = 1;
  UnixPeer other = Speaker(1);
  ASSERT_TRUE(other.Write(Line(round)));
  EXPECT_TRUE(other.WaitClosed(kWait));
  EXPECT_FALSE(Connected(0));
  EXPECT_FALSE(Connected(1));
}

TEST_F(ControlServerTest, SendToARankWithoutAChannelIsFalse) {
  EXPECT_FALSE(Send(5, Abort(0, "nobody")));
  UnixPeer silent = Connect();  // connected, but no hello: no rank's channel
  EXPECT_FALSE(Send(0, Abort(0, "nobody")));
  UnixPeer worker = Speaker(0);
  EXPECT_TRUE(Send(0, Abort(0, "somebody")));
  runner_.Call([&] { server_->Disconnect(0); });
  EXPECT_TRUE(worker.WaitClosed(kWait));
  EXPECT_FALSE(Send(0, Abort(0, "gone")));
}

TEST_F(ControlServerTest, ANewHelloForARankReplacesItsOldChannel) {
  UnixPeer old_worker = Speaker(2);
  UnixPeer replacement = Speaker(2);
  EXPECT_TRUE(old_worker.WaitClosed(kWait));
  EXPECT_EQ(listener_.WaitHellos(2), (std::vector<int>{2, 2}));
  ASSERT_TRUE(Send(2, Abort(7, "to the replacement")));
  std::optional<std::string> line = replacement.ReadLine(kWait);
  ASSERT_TRUE(line.has_value());
  EXPECT_THAT(*line, HasSubstr("to the replacement"));
  // The replacement's readies count, as its own rank's.
  ASSERT_TRUE(replacement.Write(Ready(7, 3)));
  auto readies = listener_.WaitReadies(1);
  ASSERT_EQ(readies.size(), 1u);
  EXPECT_EQ(readies[0].first, 2);
}

TEST_F(ControlServerTest, AListenerMayDisconnectTheRankItIsTold) {
  // InProcessRounds sends the round in OnHello; a failed send closes the connection under the
  // server's feet, as Disconnect here does. (Another open channel makes the server look the
  // closed one up among others: AddressSanitizer saw it read the deleted connection.)
  UnixPeer bystander = Speaker(3);
  listener_.AfterHello([this](int lr) {
    if (lr != 3) server_->Disconnect(lr);
  });
  UnixPeer worker = Connect();
  ASSERT_TRUE(worker.Write(Hello(0) + Ready(0, 1)));
  EXPECT_TRUE(worker.WaitClosed(kWait));
  EXPECT_EQ(listener_.readies(), 0u);  // nothing read from a closed connection
  listener_.AfterHello(nullptr);
  listener_.AfterReady([this](int lr) { server_->Disconnect(lr); });
  UnixPeer second = Connect();
  ASSERT_TRUE(second.Write(Hello(1) + Ready(0, 1) + Ready(0, 2)));
  EXPECT_TRUE(second.WaitClosed(kWait));
  EXPECT_EQ(listener_.WaitReadies(1).size(), 1u);
  EXPECT_EQ(listener_.readies(), 1u);
  // The server goes on.
  listener_.AfterReady(nullptr);
  UnixPeer third = Speaker(2);
  EXPECT_TRUE(Connected(2));
  EXPECT_TRUE(Connected(3));
  EXPECT_FALSE(bystander.Closed());
}

TEST_F(ControlServerTest, AConnectionWithoutAHelloTimesOut) {
  runner_.Call([&] { server_.reset(); });
  Listen(std::chrono::milliseconds(100));
  UnixPeer speaker = Speaker(0);
  UnixPeer silent = Connect();
  ExpectClosedFor(&silent, "no hello within 0.1 s of connecting");
  EXPECT_FALSE(speaker.Closed());  // a hello stops its clock
  EXPECT_TRUE(Connected(0));
}

// Issue 43 D6: the limit is per worker process tree, so a worker's children (or processes
// outside the job) holding connections open cannot keep another worker from its channel.
TEST_F(ControlServerTest, ConnectionsWaitingForTheirHelloAreLimitedPerWorker) {
  listener_.SetOwner(100);
  std::vector<UnixPeer> silent;
  for (int i = 0; i < ControlServer::kMaxPendingPerWorker; ++i) silent.push_back(Connect());
  UnixPeer one_too_many = Connect();
  ExpectClosedFor(&one_too_many,
                  "over 8 connections without a hello from the process tree of worker pid 100");
  for (UnixPeer& p : silent) EXPECT_FALSE(p.Closed());
  // Another worker connects as usual.
  listener_.SetOwner(200);
  UnixPeer other = Speaker(1);
  EXPECT_TRUE(Connected(1));
  // One of the silent ones speaks: a place is free again for worker 100's tree.
  listener_.SetOwner(100);
  ASSERT_TRUE(silent[3].Write(Hello(0)));
  listener_.WaitHellos(2);
  UnixPeer next = Speaker(2);
  EXPECT_TRUE(Connected(2));
  EXPECT_FALSE(next.Closed());
  // Refusals after the first are counted, not logged.
  UnixPeer more = Connect();
  UnixPeer more2 = Connect();
  EXPECT_TRUE(more2.WaitClosed(kWait));
  EXPECT_EQ(::ddprun::testing::CountMatches(log_.text(), "connections without a hello from"), 1)
      << log_.text();
}

TEST_F(ControlServerTest, ProcessesOutsideEveryWorkerShareOneSmallLimit) {
  std::vector<UnixPeer> silent;
  for (int i = 0; i < ControlServer::kMaxPendingOutsideWorkers; ++i) silent.push_back(Connect());
  UnixPeer one_too_many = Connect();
  ExpectClosedFor(&one_too_many,
                  "over 16 connections without a hello from processes outside every worker");
  listener_.SetOwner(300);
  UnixPeer worker = Speaker(0);
  EXPECT_TRUE(Connected(0));
}

// Issue 43 D3: a flood of valid messages closes the channel (one line), instead of one log line
// or more per message.
TEST_F(ControlServerTest, AFloodOfMessagesClosesTheChannel) {
  UnixPeer worker = Speaker(0);
  std::string flood;
  for (int i = 0; i < 10 * ControlServer::kMessageBurst; ++i) flood += Ready(7, 1);
  ASSERT_TRUE(worker.Write(flood));
  ExpectClosedFor(&worker,
                  "control channel of local rank 0 closed: over 40 messages at more than "
                  "20 a second (a flood)");
  EXPECT_LE(listener_.readies(), static_cast<size_t>(ControlServer::kMessageBurst));
  ASSERT_EQ(listener_.broken().size(), 1u);
  EXPECT_EQ(listener_.broken()[0].first, 0);
}

// Connections closed before their hello can be made again at once: a few are logged, the rest
// counted.
TEST_F(ControlServerTest, GarbageBeforeAHelloIsLoggedAFewTimesThenCounted) {
  for (int i = 0; i < 50; ++i) {
    UnixPeer rude = Connect();
    ASSERT_TRUE(rude.Write("garbage\n"));
    EXPECT_TRUE(rude.WaitClosed(kWait));
  }
  EXPECT_EQ(::ddprun::testing::CountMatches(log_.text(), "a bad message"), 5) << log_.text();
  runner_.Call([&] { server_.reset(); });
  EXPECT_THAT(log_.text(), HasSubstr("45 more closed before a hello than were logged"));
}

TEST_F(ControlServerTest, AWorkerThatDoesNotReadNeverBlocksTheAgent) {
  UnixPeer worker = Speaker(0);  // and never reads
  const std::string reason(3000, 'r');
  constexpr int kAttempts = 100000;  // far beyond any socket buffer
  const int sent = runner_.Call([&] {
    int n = 0;
    while (n < kAttempts && server_->Send(0, Abort(n, reason))) ++n;
    return n;
  });
  EXPECT_GT(sent, 0);
  EXPECT_LT(sent, kAttempts);
  EXPECT_FALSE(Connected(0));
  EXPECT_THAT(log_.text(), HasSubstr("control channel of local rank 0 closed"));
  EXPECT_TRUE(worker.WaitClosed(kWait));  // it reads what was sent, then the end
}

TEST(ControlServerListenTest, APathTooLongForASocketIsRefusedNamingIt) {
  LoopRunner runner;
  FakeListener listener;
  const std::string path = "/tmp/" + std::string(200, 'd') + "/control";
  auto server = runner.Call([&] { return ControlServer::Listen(runner.loop(), path, &listener); });
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("TMPDIR"));
}

TEST(ControlServerListenTest, TheSocketFileGoesWithTheServer) {
  ddprun::testing::TempDir dir;
  const std::string path = dir.File("control");
  ddprun::testing::WriteFile(path, "stale");  // anything there is replaced
  LoopRunner runner;
  FakeListener listener;
  auto server = runner.Call([&] { return ControlServer::Listen(runner.loop(), path, &listener); });
  ASSERT_TRUE(server.ok()) << server.status();
  UnixPeer worker = UnixPeer::Connect(path);
  ASSERT_TRUE(worker.connected());
  ASSERT_TRUE(worker.Write(Hello(0)));
  listener.WaitHellos(1);
  runner.Call([&] { server->reset(); });
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  EXPECT_TRUE(worker.WaitClosed(kWait));
}

}  // namespace
}  // namespace ddprun::launcher
