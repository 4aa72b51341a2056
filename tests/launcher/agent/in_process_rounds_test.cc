// InProcessRounds on a real EventLoop (its own thread) with the test thread as the workers over
// real Unix sockets: the round message a worker gets (in reply to its hello, or at BeginRound
// when it survives), readies counted per round, the --reform-timeout deadline that kills a
// worker through the hook, and the abort that ends a round for every speaking worker.
#include "launcher/agent/in_process_rounds.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "control/control_message.h"
#include "tests/testing/captured_log.h"
#include "tests/testing/loop_runner.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"
#include "tests/testing/unix_peer.h"

namespace ddprun::launcher {
namespace {

using ::ddprun::testing::UnixPeer;
using ::testing::HasSubstr;

constexpr std::chrono::milliseconds kWait{5000};  // bound on every wait that should succeed
// A ready for this round is always stale: the server logs it, so a test that sends one after
// other lines knows, once the log line is there, that the lines before it were handled.
constexpr int64_t kMarkerRound = 999999;

std::string Line(const control::ControlMessage& m) {
  return control::EncodeControlMessage(m) + "\n";
}

std::string Hello(int local_rank) {
  control::HelloMessage hello;
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

rendezvous::Assignment Assignment(int64_t round) {
  rendezvous::Assignment a;
  a.round = round;
  a.group_rank = 2;
  a.group_world_size = 4;
  a.rank_offset = 4;
  a.world_size = 8;
  a.master_addr = "10.1.2.3";
  a.master_port = 29400;
  a.restart_count = 2;
  a.max_restarts = 5;
  return a;
}

// The next message `peer` gets, parsed; nullopt (and a test failure) when none comes.
std::optional<control::ControlMessage> NextMessage(UnixPeer* peer) {
  std::optional<std::string> line = peer->ReadLine(kWait);
  EXPECT_TRUE(line.has_value()) << "no message from the agent";
  if (!line) return std::nullopt;
  absl::StatusOr<control::ControlMessage> m = control::ParseControlMessage(*line);
  EXPECT_TRUE(m.ok()) << m.status() << ": " << *line;
  if (!m.ok()) return std::nullopt;
  return *m;
}

std::optional<control::RoundMessage> NextRound(UnixPeer* peer) {
  std::optional<control::ControlMessage> m = NextMessage(peer);
  if (!m) return std::nullopt;
  EXPECT_TRUE(std::holds_alternative<control::RoundMessage>(*m));
  if (!std::holds_alternative<control::RoundMessage>(*m)) return std::nullopt;
  return std::get<control::RoundMessage>(*m);
}

class InProcessRoundsTest : public ::testing::Test {
 protected:
  void SetUp() override { SetLogSink(&log_); }
  void TearDown() override {
    runner_.Stop();
    rounds_.reset();
    SetLogSink(nullptr);
  }

  void Start(int nproc, std::chrono::milliseconds reform_timeout) {
    InProcessRounds::Hooks hooks;
    // Every test worker is this process: owner_ says which local rank it is at the moment.
    hooks.local_rank_of_pid = [this](pid_t pid) {
      absl::MutexLock lock(&mu_);
      return pid == getpid() ? owner_ : -1;
    };
    hooks.worker_pid = [](int lr) { return 1000 + lr; };
    hooks.on_speaks = [this](int lr) {
      absl::MutexLock lock(&mu_);
      speaks_.push_back(lr);
    };
    hooks.round_running = [this] {
      absl::MutexLock lock(&mu_);
      return running_;
    };
    hooks.kill_worker = [this](int lr) {
      absl::MutexLock lock(&mu_);
      killed_.push_back(lr);
    };
    hooks.on_all_ready = [this](int64_t round, int64_t step) {
      absl::MutexLock lock(&mu_);
      all_ready_.emplace_back(round, step);
    };
    auto rounds = runner_.Call([&] {
      return InProcessRounds::Start(runner_.loop(), nproc, reform_timeout, path_, std::move(hooks));
    });
    ASSERT_TRUE(rounds.ok()) << rounds.status();
    rounds_ = *std::move(rounds);
  }

  void SetRunning(bool running) {
    absl::MutexLock lock(&mu_);
    running_ = running;
  }
  void SetOwner(int local_rank) {
    absl::MutexLock lock(&mu_);
    owner_ = local_rank;
  }
  // A worker of `local_rank` whose hello was accepted.
  UnixPeer Worker(int local_rank) {
    SetOwner(local_rank);
    UnixPeer peer = UnixPeer::Connect(path_);
    EXPECT_TRUE(peer.connected());
    size_t before;
    {
      absl::MutexLock lock(&mu_);
      before = speaks_.size();
    }
    EXPECT_TRUE(peer.Write(Hello(local_rank)));
    absl::MutexLock lock(&mu_);
    auto spoke = [this, before]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return speaks_.size() > before; };
    EXPECT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&spoke), absl::FromChrono(kWait)));
    return peer;
  }
  // Sends a stale ready after whatever `peer` sent before; returns once the agent handled it.
  void Sync(UnixPeer* peer, int local_rank) {
    auto ignored = [&] {
      return runner_.Call([&] { return rounds_->IgnoredReadies(local_rank); });
    };
    const int64_t before = ignored();
    ASSERT_TRUE(peer->Write(Ready(kMarkerRound, -1)));
    ASSERT_TRUE(::ddprun::testing::WaitUntil([&] { return ignored() > before; }, kWait));
  }
  // Waits until the loop has run every timer due within `delay` from now (and the callbacks
  // before them): a later timer on the same loop fires after them.
  void RunTimersDueWithin(std::chrono::milliseconds delay) {
    std::promise<void> fired;
    runner_.Call([&] { runner_.loop()->AddTimerAfter(delay, [&fired] { fired.set_value(); }); });
    fired.get_future().wait();
  }
  std::vector<int> WaitKilled(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return killed_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::FromChrono(kWait));
    return killed_;
  }
  std::vector<std::pair<int64_t, int64_t>> WaitAllReady(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return all_ready_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::FromChrono(kWait));
    return all_ready_;
  }
  std::vector<int> killed() {
    absl::MutexLock lock(&mu_);
    return killed_;
  }
  std::vector<std::pair<int64_t, int64_t>> all_ready() {
    absl::MutexLock lock(&mu_);
    return all_ready_;
  }

  ddprun::testing::TempDir dir_;
  const std::string path_ = dir_.File("control");
  ddprun::testing::CapturedLog log_;
  absl::Mutex mu_;
  int owner_ ABSL_GUARDED_BY(mu_) = -1;
  bool running_ ABSL_GUARDED_BY(mu_) = true;
  std::vector<int> speaks_ ABSL_GUARDED_BY(mu_);
  std::vector<int> killed_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int64_t, int64_t>> all_ready_ ABSL_GUARDED_BY(mu_);
  ddprun::testing::LoopRunner runner_;
  std::unique_ptr<InProcessRounds> rounds_;  // used on the loop thread only, until Stop()
};

TEST_F(InProcessRoundsTest, AHelloIsAnsweredWithTheWorkersRound) {
  Start(2, std::chrono::seconds(60));
  EXPECT_EQ(runner_.Call([&] { return rounds_->socket_path(); }), path_);
  runner_.Call([&] { rounds_->BeginRound(Assignment(3), {}); });
  UnixPeer worker = Worker(1);
  std::optional<control::RoundMessage> round = NextRound(&worker);
  ASSERT_TRUE(round.has_value());
  EXPECT_EQ(round->round, 3);
  EXPECT_EQ(round->rank, 5);  // rank_offset + local rank
  EXPECT_EQ(round->world_size, 8);
  EXPECT_EQ(round->local_rank, 1);
  EXPECT_EQ(round->local_world_size, 2);
  EXPECT_EQ(round->group_rank, 2);
  EXPECT_EQ(round->group_world_size, 4);
  EXPECT_EQ(round->master_addr, "10.1.2.3");
  EXPECT_EQ(round->master_port, 29400);
  EXPECT_EQ(round->restart_count, 2);
  EXPECT_EQ(round->store_prefix, "/ddprun/round_3/");
  EXPECT_EQ(round->deadline_ms, 60000);
}

TEST_F(InProcessRoundsTest, SurvivorsGetTheNextRoundAtItsBeginningNotBetweenRounds) {
  Start(2, std::chrono::seconds(60));
  SetRunning(false);  // between rounds: a hello gets nothing yet
  runner_.Call([&] { rounds_->BeginRound(Assignment(3), {}); });
  UnixPeer survivor = Worker(0);
  Sync(&survivor, 0);  // its hello was handled in full
  EXPECT_FALSE(survivor.TryReadLine().has_value());
  SetRunning(true);
  runner_.Call([&] { rounds_->BeginRound(Assignment(4), {0}); });
  std::optional<control::RoundMessage> round = NextRound(&survivor);
  ASSERT_TRUE(round.has_value());
  EXPECT_EQ(round->round, 4);
  EXPECT_EQ(round->rank, 4);
  EXPECT_EQ(round->store_prefix, "/ddprun/round_4/");
}

TEST_F(InProcessRoundsTest, AHelloFromAProcessThatIsNotThatRanksWorkerIsRefused) {
  Start(2, std::chrono::seconds(60));
  SetOwner(0);
  UnixPeer impostor = UnixPeer::Connect(path_);
  ASSERT_TRUE(impostor.Write(Hello(1)));
  EXPECT_TRUE(impostor.WaitClosed(kWait));
  EXPECT_THAT(log_.text(), HasSubstr(absl::StrCat("pid ", getpid(),
                                                  " said it is local rank 1, "
                                                  "but it belongs to local rank 0")));
  SetOwner(-1);
  UnixPeer stranger = UnixPeer::Connect(path_);
  ASSERT_TRUE(stranger.Write(Hello(0)));
  EXPECT_TRUE(stranger.WaitClosed(kWait));
  EXPECT_THAT(log_.text(), HasSubstr("it is no worker of this node"));
  UnixPeer beyond = UnixPeer::Connect(path_);
  ASSERT_TRUE(beyond.Write(Hello(2)));
  EXPECT_TRUE(beyond.WaitClosed(kWait));
  EXPECT_THAT(log_.text(), HasSubstr("local rank 2 does not exist (--nproc-per-node=2)"));
  absl::MutexLock lock(&mu_);
  EXPECT_TRUE(speaks_.empty());
}

TEST_F(InProcessRoundsTest, AllReadyIsReportedOnceWithTheNewestStepAndStaleReadiesIgnored) {
  Start(2, std::chrono::seconds(60));
  runner_.Call([&] { rounds_->BeginRound(Assignment(3), {}); });
  UnixPeer w0 = Worker(0);
  UnixPeer w1 = Worker(1);
  ASSERT_TRUE(NextRound(&w0).has_value());
  ASSERT_TRUE(NextRound(&w1).has_value());
  // Local rank 0 is ready for an older round only: that does not count.
  ASSERT_TRUE(w0.Write(Ready(2, 50)));
  ASSERT_TRUE(w1.Write(Ready(3, 9)));
  Sync(&w0, 0);
  Sync(&w1, 1);
  EXPECT_THAT(log_.text(), HasSubstr("local rank 0 said ready for round 2, but the current round "
                                     "is 3; ignored (stale"));
  // Issue 43 D3: once per rank and round, whatever the number.
  EXPECT_EQ(log_.Count("local rank 0 said ready for round"), 1) << log_.text();
  EXPECT_TRUE(all_ready().empty());
  ASSERT_TRUE(w0.Write(Ready(3, 5)));
  auto ready = WaitAllReady(1);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0], (std::pair<int64_t, int64_t>{3, 9}));  // the highest step
  // Repeated readies do not report again.
  ASSERT_TRUE(w0.Write(Ready(3, 5)));
  ASSERT_TRUE(w1.Write(Ready(3, 9)));
  Sync(&w0, 0);
  Sync(&w1, 1);
  EXPECT_EQ(all_ready().size(), 1u);
  // The next round counts afresh; no rank with state: -1.
  runner_.Call([&] { rounds_->BeginRound(Assignment(4), {0, 1}); });
  ASSERT_TRUE(NextRound(&w0).has_value());
  ASSERT_TRUE(NextRound(&w1).has_value());
  ASSERT_TRUE(w0.Write(Ready(4, -1)));
  ASSERT_TRUE(w1.Write(Ready(4, -1)));
  ready = WaitAllReady(2);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[1], (std::pair<int64_t, int64_t>{4, -1}));
}

TEST_F(InProcessRoundsTest, AWorkerThatMissesItsDeadlineIsKilledWithTheReason) {
  Start(2, std::chrono::milliseconds(200));
  runner_.Call([&] { rounds_->BeginRound(Assignment(3), {}); });
  // Local rank 1 is ready in time; local rank 0, whose deadline runs out later, never is.
  UnixPeer w1 = Worker(1);
  ASSERT_TRUE(NextRound(&w1).has_value());
  ASSERT_TRUE(w1.Write(Ready(3, 0)));
  Sync(&w1, 1);
  const auto start = std::chrono::steady_clock::now();
  UnixPeer w0 = Worker(0);
  ASSERT_TRUE(NextRound(&w0).has_value());
  EXPECT_EQ(WaitKilled(1), std::vector<int>{0});  // not local rank 1, whose deadline was first
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
  const std::string why = runner_.Call([&] { return rounds_->KillReason(0); });
  EXPECT_EQ(why, "did not re-form round 3 within 0.2 s (--reform-timeout)");
  EXPECT_EQ(runner_.Call([&] { return rounds_->KillReason(1); }), "");
  EXPECT_EQ(runner_.Call([&] { return rounds_->KillReason(7); }), "");
  EXPECT_THAT(log_.text(), HasSubstr("local rank 0 did not re-form round 3"));
  // Its replacement starts with a clean slate.
  UnixPeer replacement = Worker(0);
  EXPECT_EQ(runner_.Call([&] { return rounds_->KillReason(0); }), "");
}

// A replacement started for an in-process round that never says hello (a script that does not
// speak the protocol) is killed at the deadline instead of holding the survivors; at a cold
// start (no `started`) a silent worker is left alone.
TEST_F(InProcessRoundsTest, AReplacementThatNeverSaysHelloIsKilledAtTheDeadline) {
  Start(2, std::chrono::milliseconds(200));
  runner_.Call([&] { rounds_->BeginRound(Assignment(3), {}); });
  runner_.Call([&] { rounds_->BeginRound(Assignment(4), {}, {1}); });
  EXPECT_EQ(WaitKilled(1), std::vector<int>{1});
  EXPECT_EQ(runner_.Call([&] { return rounds_->KillReason(1); }),
            "did not re-form round 4 within 0.2 s (--reform-timeout)");
  EXPECT_EQ(runner_.Call([&] { return rounds_->KillReason(0); }), "");
}

TEST_F(InProcessRoundsTest, AbortTellsEverySpeakingWorkerAndCancelsTheDeadlines) {
  Start(3, std::chrono::milliseconds(200));
  runner_.Call([&] { rounds_->BeginRound(Assignment(3), {}); });
  UnixPeer w0 = Worker(0);
  UnixPeer w2 = Worker(2);  // local rank 1 never connected
  ASSERT_TRUE(NextRound(&w0).has_value());
  ASSERT_TRUE(NextRound(&w2).has_value());
  runner_.Call([&] { rounds_->Abort(3, "rank 9 on n2 exited 1"); });
  for (UnixPeer* w : {&w0, &w2}) {
    std::optional<control::ControlMessage> m = NextMessage(w);
    ASSERT_TRUE(m.has_value());
    ASSERT_TRUE(std::holds_alternative<control::AbortMessage>(*m));
    EXPECT_EQ(std::get<control::AbortMessage>(*m).round, 3);
    EXPECT_EQ(std::get<control::AbortMessage>(*m).reason, "rank 9 on n2 exited 1");
  }
  // Waiting out the deadline is the only way to see that it does not fire.
  RunTimersDueWithin(std::chrono::milliseconds(200));
  EXPECT_TRUE(killed().empty());
  EXPECT_FALSE(w0.Closed());
  EXPECT_FALSE(w2.Closed());
}

TEST_F(InProcessRoundsTest, AnExitedWorkerLosesItsChannelAndItsDeadline) {
  Start(2, std::chrono::milliseconds(200));
  runner_.Call([&] { rounds_->BeginRound(Assignment(1), {}); });
  UnixPeer w0 = Worker(0);
  UnixPeer w1 = Worker(1);
  ASSERT_TRUE(NextRound(&w0).has_value());
  ASSERT_TRUE(NextRound(&w1).has_value());
  ASSERT_TRUE(w1.Write(Ready(1, 0)));
  Sync(&w1, 1);
  runner_.Call([&] { rounds_->OnWorkerExited(0); });
  EXPECT_TRUE(w0.WaitClosed(kWait));
  RunTimersDueWithin(std::chrono::milliseconds(200));
  EXPECT_TRUE(killed().empty());
  EXPECT_FALSE(w1.Closed());
  runner_.Call([&] { rounds_->OnWorkerExited(-1); });  // no such rank: nothing happens
  runner_.Call([&] { rounds_->OnWorkerExited(5); });
  EXPECT_FALSE(w1.Closed());
}

TEST_F(InProcessRoundsTest, ANewWorkerGroupClosesEveryChannelAndForgetsTheRound) {
  Start(2, std::chrono::seconds(60));
  runner_.Call([&] { rounds_->BeginRound(Assignment(1), {}); });
  UnixPeer w0 = Worker(0);
  UnixPeer w1 = Worker(1);
  runner_.Call([&] { rounds_->OnGroupReplaced(); });
  EXPECT_TRUE(w0.WaitClosed(kWait));
  EXPECT_TRUE(w1.WaitClosed(kWait));
  // A worker of the new group says hello before the new round begins: nothing to tell it.
  UnixPeer fresh = Worker(0);
  Sync(&fresh, 0);
  EXPECT_FALSE(fresh.TryReadLine().has_value());
  runner_.Call([&] { rounds_->BeginRound(Assignment(2), {0}); });
  std::optional<control::RoundMessage> round = NextRound(&fresh);
  ASSERT_TRUE(round.has_value());
  EXPECT_EQ(round->round, 2);
}

}  // namespace
}  // namespace ddprun::launcher
