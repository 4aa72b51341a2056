// ControlClient, the C++ worker's end of the control channel, against a test that plays the
// agent on a real Unix socket: the hello it sends, the rounds and aborts it takes, what ends a
// round, and what it does with a garbled channel.
#include "control/control_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>

#include "control/control_message.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"
#include "tests/testing/unix_peer.h"

namespace ddprun::control {
namespace {

using ::ddprun::testing::UnixListener;
using ::ddprun::testing::UnixPeer;
using ::testing::HasSubstr;

constexpr std::chrono::milliseconds kWait{5000};  // bound on every wait that should succeed

RoundMessage Round(int64_t round) {
  RoundMessage m;
  m.round = round;
  m.rank = 1;
  m.world_size = 2;
  m.local_rank = 1;
  m.local_world_size = 2;
  m.master_addr = "127.0.0.1";
  m.master_port = 29500;
  m.store_prefix = RoundStorePrefix(round);
  m.deadline_ms = 60000;
  return m;
}

std::string Line(const ControlMessage& m) { return EncodeControlMessage(m) + "\n"; }

class ControlClientTest : public ::testing::Test {
 protected:
  ControlClientTest() : path_(dir_.File("control")), listener_(path_) {}

  // Connects a client as `local_rank` and plays the agent's part of the handshake: reads the
  // hello, answers with `first`. The hello read is left in *hello.
  std::unique_ptr<ControlClient> ConnectWith(const RoundMessage& first, HelloMessage* hello) {
    auto pending = std::async(std::launch::async, [path = path_] {
      return ControlClient::Connect(path, 1, absl::Seconds(5));
    });
    agent_ = listener_.Accept(kWait);
    EXPECT_TRUE(agent_.connected());
    std::optional<std::string> line = agent_.ReadLine(kWait);
    EXPECT_TRUE(line.has_value());
    if (line) {
      absl::StatusOr<ControlMessage> m = ParseControlMessage(*line);
      EXPECT_TRUE(m.ok()) << m.status() << ": " << *line;
      if (m.ok() && std::holds_alternative<HelloMessage>(*m)) *hello = std::get<HelloMessage>(*m);
    }
    EXPECT_TRUE(agent_.Write(Line(first)));
    absl::StatusOr<std::unique_ptr<ControlClient>> client = pending.get();
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }
  std::unique_ptr<ControlClient> Connected(int64_t round) {
    HelloMessage hello;
    return ConnectWith(Round(round), &hello);
  }

  ddprun::testing::TempDir dir_;
  const std::string path_;
  UnixListener listener_;
  UnixPeer agent_;
};

TEST_F(ControlClientTest, ConnectSaysHelloWithItsPidAndWaitsForItsRound) {
  ASSERT_TRUE(listener_.ok());
  HelloMessage hello;
  std::unique_ptr<ControlClient> client = ConnectWith(Round(4), &hello);
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(hello.version, kControlProtocolVersion);
  EXPECT_EQ(hello.local_rank, 1);
  EXPECT_EQ(hello.pid, getpid());
  const RoundMessage round = client->current_round();
  EXPECT_EQ(round.round, 4);
  EXPECT_EQ(round.rank, 1);
  EXPECT_EQ(round.master_port, 29500);
  EXPECT_EQ(round.store_prefix, "/ddprun/round_4/");
  EXPECT_FALSE(client->RoundOver(4));
  EXPECT_TRUE(client->RoundOver(3));  // an older round is over by definition
  EXPECT_EQ(client->abort_reason(), "");
}

TEST_F(ControlClientTest, ConnectFailsUnavailableWithoutAnAgentOrItsAnswer) {
  absl::StatusOr<std::unique_ptr<ControlClient>> none =
      ControlClient::Connect(dir_.File("nobody"), 0, absl::Seconds(1));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr(kControlSocketEnv));
  EXPECT_EQ(ControlClient::Connect(std::string(200, 'x'), 0, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // An agent that takes the hello but never sends a round.
  absl::StatusOr<std::unique_ptr<ControlClient>> silent =
      ControlClient::Connect(path_, 0, absl::Milliseconds(50));
  ASSERT_FALSE(silent.ok());
  EXPECT_EQ(silent.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(silent.status().message()), HasSubstr("no round from the agent"));
}

TEST_F(ControlClientTest, GarbageInsteadOfTheFirstRoundIsUnavailableNamingIt) {
  auto pending = std::async(std::launch::async, [path = path_] {
    return ControlClient::Connect(path, 0, absl::Seconds(5));
  });
  agent_ = listener_.Accept(kWait);
  ASSERT_TRUE(agent_.ReadLine(kWait).has_value());
  ASSERT_TRUE(agent_.Write("this is not json\n"));
  absl::StatusOr<std::unique_ptr<ControlClient>> client = pending.get();
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(client.status().message()), HasSubstr("a bad message from the agent"));
  EXPECT_THAT(std::string(client.status().message()), HasSubstr("not JSON"));
  EXPECT_TRUE(agent_.WaitClosed(kWait));  // the client hangs up on it
}

TEST_F(ControlClientTest, AnAbortEndsTheRoundItNames) {
  std::unique_ptr<ControlClient> client = Connected(2);
  ASSERT_NE(client, nullptr);
  AbortMessage old;
  old.round = 1;
  old.reason = "an earlier round";
  ASSERT_TRUE(agent_.Write(Line(old)));
  AbortMessage abort;
  abort.round = 2;
  abort.reason = "rank 0 exited 1";
  ASSERT_TRUE(agent_.Write(Line(abort)));
  EXPECT_TRUE(client->WaitRoundOver(2, absl::Seconds(5)));
  EXPECT_TRUE(client->RoundOver(2));
  EXPECT_EQ(client->abort_reason(), "rank 0 exited 1");
  // The channel stays up: the next round arrives on it.
  ASSERT_TRUE(agent_.Write(Line(Round(3))));
  absl::StatusOr<RoundMessage> next = client->WaitForRound(2, absl::Seconds(5));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->round, 3);
  EXPECT_FALSE(client->RoundOver(3));
}

TEST_F(ControlClientTest, ANewerRoundEndsTheCurrentOneAndAnOlderOneIsIgnored) {
  std::unique_ptr<ControlClient> client = Connected(5);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(agent_.Write(Line(Round(3))));  // stale
  ASSERT_TRUE(agent_.Write(Line(Round(6))));
  absl::StatusOr<RoundMessage> next = client->WaitForRound(5, absl::Seconds(5));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->round, 6);
  EXPECT_TRUE(client->RoundOver(5));
  ASSERT_TRUE(agent_.Write(Line(Round(4))));  // stale again, after the newest
  AbortMessage abort;                         // a marker: everything before it was read
  abort.round = 1;
  ASSERT_TRUE(agent_.Write(Line(abort)));
  ASSERT_TRUE(client->WaitRoundOver(1, absl::Seconds(5)));
  EXPECT_EQ(client->current_round().round, 6);
  EXPECT_FALSE(client->RoundOver(6));
}

TEST_F(ControlClientTest, TheAgentClosingEndsEveryRound) {
  std::unique_ptr<ControlClient> client = Connected(1);
  ASSERT_NE(client, nullptr);
  std::atomic<int> wakeups{0};
  client->SetWakeup([&wakeups] { wakeups.fetch_add(1); });
  agent_.Close();
  EXPECT_TRUE(client->WaitRoundOver(1, absl::Seconds(5)));
  EXPECT_TRUE(client->RoundOver(1));
  EXPECT_TRUE(client->RoundOver(100));
  // The reader calls the wakeup after it has marked the channel closed: wait for it.
  EXPECT_TRUE(
      ::ddprun::testing::WaitUntil([&] { return wakeups.load() >= 1; }, std::chrono::seconds(5)));
  absl::StatusOr<RoundMessage> next = client->WaitForRound(1, absl::Seconds(5));
  EXPECT_EQ(next.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(next.status().message()), HasSubstr("closed"));
}

TEST_F(ControlClientTest, WaitForRoundGivesUpAtItsDeadline) {
  std::unique_ptr<ControlClient> client = Connected(1);
  ASSERT_NE(client, nullptr);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<RoundMessage> next = client->WaitForRound(1, absl::Milliseconds(30));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(30));
  EXPECT_EQ(next.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(client->WaitRoundOver(1, absl::Milliseconds(1)));
  // The round it has is returned at once.
  absl::StatusOr<RoundMessage> current = client->WaitForRound(0, absl::Milliseconds(1));
  ASSERT_TRUE(current.ok());
  EXPECT_EQ(current->round, 1);
}

TEST_F(ControlClientTest, GarbageAfterTheHandshakeClosesTheChannelNamingIt) {
  std::unique_ptr<ControlClient> client = Connected(1);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(agent_.Write("{\"type\":\"round\",\"round\":2}\n"));  // fields missing
  absl::StatusOr<RoundMessage> next = client->WaitForRound(1, absl::Seconds(5));
  EXPECT_EQ(next.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(next.status().message()), HasSubstr("a bad message from the agent"));
  EXPECT_THAT(std::string(next.status().message()), HasSubstr("no \"world_size\""));
  EXPECT_TRUE(client->RoundOver(1));
}

TEST_F(ControlClientTest, ALineOverTheLimitClosesTheChannel) {
  std::unique_ptr<ControlClient> client = Connected(1);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(agent_.Write(std::string(2 * kMaxControlLineBytes, 'x')));  // no newline
  absl::StatusOr<RoundMessage> next = client->WaitForRound(1, absl::Seconds(5));
  EXPECT_EQ(next.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(next.status().message()), HasSubstr("size limit"));
}

TEST_F(ControlClientTest, SendReadyWritesOneReadyLine) {
  std::unique_ptr<ControlClient> client = Connected(3);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->SendReady(3, 41).ok());
  ASSERT_TRUE(client->SendReady(3, -1).ok());
  for (int64_t step : {41, -1}) {
    std::optional<std::string> line = agent_.ReadLine(kWait);  // '\n'-terminated
    ASSERT_TRUE(line.has_value());
    EXPECT_THAT(*line, HasSubstr("\"type\":\"ready\""));
    absl::StatusOr<ControlMessage> m = ParseControlMessage(*line);
    ASSERT_TRUE(m.ok()) << m.status() << ": " << *line;
    ASSERT_TRUE(std::holds_alternative<ReadyMessage>(*m)) << *line;
    EXPECT_EQ(std::get<ReadyMessage>(*m).round, 3);
    EXPECT_EQ(std::get<ReadyMessage>(*m).step, step);
  }
  // With the agent gone the send fails, and says so.
  agent_.Close();
  ASSERT_TRUE(client->WaitRoundOver(3, absl::Seconds(5)));
  absl::Status sent = absl::OkStatus();
  // The first send after the peer's close may still be buffered by the kernel; the next fails.
  for (int i = 0; i < 2 && sent.ok(); ++i) sent = client->SendReady(3, 41);
  EXPECT_EQ(sent.code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ddprun::control
