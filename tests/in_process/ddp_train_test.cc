// ddp-train's worker side of in-process recovery (docs/design.md §6b) against a fake agent: the
// test itself listens on the control socket, starts real `ddp-train mnist` processes on
// Fashion-MNIST with DDPRUN_CONTROL_SOCKET and the torchrun variables, answers their hellos with
// round messages, kills or stops one mid-training, aborts the survivors' round, starts a
// replacement and sends the next round to everyone; one case runs under the real ddprun. The runs
// end with the same model, byte for byte, as a fault-free run of the same configuration.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "control/control_message.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/class_images.h"
#include "tests/testing/fake_lease_page.h"
#include "tests/testing/free_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun::trainer {
namespace {

using ::ddprun::testing::BinPath;
using ::ddprun::testing::ReadFile;
using ::ddprun::testing::Subprocess;
using ::ddprun::testing::TempDir;
using ::ddprun::testing::WaitUntil;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";
constexpr int kWorld = 3;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The agent's side of the control channel, just enough of it: one listening socket, one
// connection per local rank (a later hello of a rank replaces its connection).
class FakeAgent {
 public:
  explicit FakeAgent(const std::string& path) : path_(path) {
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(listen_fd_, 16) != 0) {
      error_ = absl::StrCat("listen on ", path, ": ", strerror(errno));
    }
  }
  ~FakeAgent() {
    for (auto& [rank, conn] : conns_) close(conn.fd);
    for (Conn& c : pending_) close(c.fd);
    close(listen_fd_);
    unlink(path_.c_str());
  }
  const std::string& error() const { return error_; }

  // Accepts connections until every rank of `local_ranks` has said hello.
  bool AwaitHellos(std::set<int> local_ranks, milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!local_ranks.empty()) {
      const int ms = static_cast<int>(
          std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
      if (ms <= 0) return false;
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (Conn& c : pending_) fds.push_back({c.fd, POLLIN, 0});
      if (poll(fds.data(), fds.size(), ms) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) pending_.push_back({fd, ""});
      }
      for (size_t i = 0; i < pending_.size();) {
        std::optional<std::string> line = ReadLine(pending_[i], milliseconds(0));
        if (!line.has_value()) {
          ++i;
          continue;
        }
        absl::StatusOr<control::ControlMessage> m = control::ParseControlMessage(*line);
        const auto* hello = m.ok() ? std::get_if<control::HelloMessage>(&*m) : nullptr;
        if (hello == nullptr) {
          ADD_FAILURE() << "not a hello: " << *line;
          close(pending_[i].fd);
        } else {
          if (conns_.count(hello->local_rank) != 0) close(conns_[hello->local_rank].fd);
          conns_[hello->local_rank] = pending_[i];
          local_ranks.erase(hello->local_rank);
        }
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    return true;
  }

  void SendLine(int local_rank, const std::string& line) {
    const std::string data = line + "\n";
    ASSERT_EQ(send(conns_.at(local_rank).fd, data.data(), data.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(data.size()));
  }
  void Send(int local_rank, const control::ControlMessage& m) {
    SendLine(local_rank, control::EncodeControlMessage(m));
  }

  // The next ready of `local_rank` for `round` (other messages are skipped).
  std::optional<control::ReadyMessage> AwaitReady(int local_rank, int64_t round,
                                                  milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      std::optional<std::string> line = ReadLine(
          conns_.at(local_rank), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
      if (!line.has_value()) return std::nullopt;
      absl::StatusOr<control::ControlMessage> m = control::ParseControlMessage(*line);
      if (!m.ok()) {
        ADD_FAILURE() << "bad line from local rank " << local_rank << ": " << *line;
        return std::nullopt;
      }
      if (auto* r = std::get_if<control::ReadyMessage>(&*m); r != nullptr && r->round == round) {
        return *r;
      }
    }
    return std::nullopt;
  }

 private:
  struct Conn {
    int fd = -1;
    std::string buffer;
  };

  // One line from `c` within `timeout`; nullopt on time-out or EOF.
  static std::optional<std::string> ReadLine(Conn& c, milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (true) {
      if (size_t nl = c.buffer.find('\n'); nl != std::string::npos) {
        std::string line = c.buffer.substr(0, nl);
        c.buffer.erase(0, nl + 1);
        return line;
      }
      const int ms = static_cast<int>(std::max<int64_t>(
          0, std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count()));
      pollfd p{c.fd, POLLIN, 0};
      if (poll(&p, 1, ms) <= 0) return std::nullopt;
      char chunk[4096];
      const ssize_t n = recv(c.fd, chunk, sizeof(chunk), 0);
      if (n <= 0) return std::nullopt;
      c.buffer.append(chunk, static_cast<size_t>(n));
    }
  }

  std::string path_;
  std::string error_;
  int listen_fd_ = -1;
  std::vector<Conn> pending_;
  std::map<int, Conn> conns_;
};

control::RoundMessage Round(int64_t round, int rank, int world, int port,
                            int64_t deadline_ms = 60000) {
  control::RoundMessage m;
  m.round = round;
  m.rank = rank;
  m.world_size = world;
  m.local_rank = rank;  // one node
  m.local_world_size = world;
  m.group_rank = 0;
  m.group_world_size = 1;
  m.master_addr = "127.0.0.1";
  m.master_port = port;
  m.restart_count = static_cast<int>(round);
  m.store_prefix = control::RoundStorePrefix(round);
  m.deadline_ms = deadline_ms;
  return m;
}

control::AbortMessage Abort(int64_t round, const std::string& reason) {
  control::AbortMessage m;
  m.round = round;
  m.reason = reason;
  return m;
}

std::string Describe(Subprocess& p) { return "stdout:\n" + p.out() + "\nstderr:\n" + p.err(); }

// "\tstep N\n" of rank 0's progress lines (--log-interval 1: one per step).
int StepLines(const std::string& out, int64_t step) {
  return ::ddprun::testing::CountOccurrences(out, absl::StrCat("\tstep ", step, "\n"));
}

class InProcessTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kData, F_OK) != 0) {
      GTEST_SKIP() << kData << " missing (apt-get install dataset-fashion-mnist)";
    }
    ASSERT_EQ(access(BinPath("ddp-train").c_str(), X_OK), 0) << BinPath("ddp-train");
  }

  // 3840 images, 3 ranks x 64 per step: 20 steps per epoch, 40 in all.
  std::vector<std::string> Train(const std::string& model, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {BinPath("ddp-train"),
                                     "mnist",
                                     "--data",
                                     kData,
                                     "--no-progress-bar",
                                     "--train-subset",
                                     "3840",
                                     "--test-subset",
                                     "500",
                                     "--epochs",
                                     "2",
                                     "--seed",
                                     "7",
                                     "--log-interval",
                                     "1",
                                     "--save-model",
                                     "--save-model-path",
                                     model};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  // Rank `rank` of `world` as ddprun starts it; `agent`: the control socket (empty: cold).
  std::map<std::string, std::string> Env(int rank, int world, int port, int restart,
                                         const std::string& agent) {
    return {{"RANK", std::to_string(rank)},
            {"WORLD_SIZE", std::to_string(world)},
            {"LOCAL_RANK", std::to_string(rank)},
            {"LOCAL_WORLD_SIZE", std::to_string(world)},
            {"MASTER_ADDR", "127.0.0.1"},
            {"MASTER_PORT", std::to_string(port)},
            {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart)},
            {"TORCHELASTIC_ERROR_FILE", "\x01unset"},
            {"TORCHELASTIC_USE_AGENT_STORE", "\x01unset"},
            {"DDPRUN_PROGRESS_FILE", "\x01unset"},
            {"DDPRUN_ROUND", "\x01unset"},
            {"OMP_NUM_THREADS", "1"},
            {"DDPRUN_CONTROL_SOCKET", agent.empty() ? "\x01unset" : agent},
            {"DDPRUN_LEASE_FD", lease_fd_.empty() ? "\x01unset" : lease_fd_}};
  }

  // The model of a fault-free cold run of Train()'s configuration on kWorld ranks, once per
  // test program.
  std::string ReferenceModel() {
    static std::string* model = nullptr;
    if (model != nullptr) return *model;
    const int port = ::ddprun::testing::FreeLoopbackPort();
    // The same file name as the runs it is compared with: torch names the archive inside after
    // it.
    mkdir(dir_.File("reference").c_str(), 0755);
    std::vector<std::unique_ptr<Subprocess>> workers;
    for (int r = 0; r < kWorld; ++r) {
      workers.push_back(std::make_unique<Subprocess>(Train(dir_.File("reference/model.pt")),
                                                     Env(r, kWorld, port, 0, "")));
    }
    EXPECT_TRUE(::ddprun::testing::ExpectAllExit(workers, 0, seconds(120)));
    model = new std::string(ReadFile(dir_.File("reference/model.pt")));
    return *model;
  }

  // Starts `world` workers running `argv` in round 0 and waits for their ready; then until rank
  // 0 has printed `progress` (a step it finished).
  void StartRoundZero(FakeAgent& agent, int port, const std::vector<std::string>& argv, int world,
                      const std::string& progress, int64_t deadline_ms = 60000) {
    ASSERT_TRUE(agent.error().empty()) << agent.error();
    std::set<int> ranks;
    for (int r = 0; r < world; ++r) {
      workers_.push_back(std::make_unique<Subprocess>(argv, Env(r, world, port, 0, socket_)));
      ranks.insert(r);
    }
    ASSERT_TRUE(agent.AwaitHellos(ranks, seconds(60)));
    for (int r = 0; r < world; ++r) agent.Send(r, Round(0, r, world, port, deadline_ms));
    for (int r = 0; r < world; ++r) {
      std::optional<control::ReadyMessage> ready = agent.AwaitReady(r, 0, seconds(60));
      ASSERT_TRUE(ready.has_value()) << Describe(*workers_[r]);
      EXPECT_EQ(ready->step, 0);  // no state anywhere: rank 0's initial broadcast, step 0
    }
    ASSERT_TRUE(workers_[0]->WaitForOutputContains(progress, seconds(60)))
        << Describe(*workers_[0]);
  }
  // The mnist run of Train() until rank 0 has finished step `step`.
  void StartRoundZero(FakeAgent& agent, int port, int64_t step, std::vector<std::string> extra = {},
                      int64_t deadline_ms = 60000) {
    StartRoundZero(agent, port, Train(dir_.File("model.pt"), std::move(extra)), kWorld,
                   absl::StrCat("\tstep ", step, "\n"), deadline_ms);
  }

  TempDir dir_;
  const std::string socket_ = dir_.File("control.sock");
  std::string lease_fd_;  // DDPRUN_LEASE_FD for the workers; empty: none
  std::vector<std::unique_ptr<Subprocess>> workers_;
};

// Rank 1 is SIGKILLed mid-epoch; the survivors learn it from gloo (connection closed), the agent
// aborts their round, a replacement joins round 1 as rank 1 and takes the survivors' state: no
// step is computed twice, and the final model equals the fault-free run's byte for byte.
TEST_F(InProcessTrainTest, KilledRankReplacedWithoutRecomputingAStep) {
  const std::string reference = ReferenceModel();
  ASSERT_FALSE(reference.empty());
  FakeAgent agent(socket_);
  const int port = ::ddprun::testing::FreeLoopbackPort();
  ASSERT_NO_FATAL_FAILURE(StartRoundZero(agent, port, 5));
  const auto killed_at = Clock::now();
  workers_[1]->Signal(SIGKILL);
  for (int r : {0, 2}) agent.Send(r, Abort(0, "rank 1 on test failed"));
  // The replacement: a cold start of local rank 1, told round 1 in reply to its hello.
  auto replacement =
      std::make_unique<Subprocess>(Train(dir_.File("model.pt")), Env(1, kWorld, port, 1, socket_));
  ASSERT_TRUE(agent.AwaitHellos({1}, seconds(60))) << Describe(*replacement);
  for (int r = 0; r < kWorld; ++r) agent.Send(r, Round(1, r, kWorld, port));
  std::vector<int64_t> steps;
  for (int r = 0; r < kWorld; ++r) {
    std::optional<control::ReadyMessage> ready = agent.AwaitReady(r, 1, seconds(60));
    ASSERT_TRUE(ready.has_value()) << Describe(r == 1 ? *replacement : *workers_[r]);
    steps.push_back(ready->step);
  }
  std::cout << "SIGKILL of rank 1 -> all 3 ranks ready in round 1: " << SecondsSince(killed_at)
            << " s (the replacement's start-up included)" << std::endl;
  EXPECT_EQ(steps[0], steps[1]);
  EXPECT_EQ(steps[0], steps[2]);
  EXPECT_GE(steps[0], 5);
  workers_[1] = std::move(replacement);
  ASSERT_TRUE(::ddprun::testing::ExpectAllExit(workers_, 0, seconds(120)));
  const std::string out = workers_[0]->out();
  // Each survivor says why it left round 0: the abort, or gloo's error if that came first.
  for (int r : {0, 2}) {
    EXPECT_EQ(::ddprun::testing::CountMatches(
                  workers_[r]->out(),
                  absl::StrCat("rank ", r,
                               ": round 0 (over \\(rank 1 on test failed\\): re-forming|: .*: "
                               "waiting for the next round)")),
              1)
        << workers_[r]->out();
  }
  EXPECT_THAT(out, HasSubstr(absl::StrCat("the state of step ", steps[0])));
  // Every step was taken once: none before the failure was recomputed after it.
  for (int64_t step = 1; step <= 40; ++step) EXPECT_LE(StepLines(out, step), 1) << step;
  EXPECT_EQ(StepLines(out, 40), 1) << out;
  EXPECT_TRUE(ReadFile(dir_.File("model.pt")) == reference)
      << "the recovered run's model differs from the fault-free run's";
}

// ddprun's local lease (DDPRUN_LEASE_FD, trainer/io/commit_guard.h) runs out mid-training, as
// on a host that woke after its run gave it up: no rank counts a step past it, each drops its
// group and waits for the agent's next round (the agent aborts the round, as it does when it
// stops a node's workers); with the lease renewed, round 1 goes on from the last step every rank
// holds and the run ends with the fault-free model, byte for byte.
TEST_F(InProcessTrainTest, PastTheLocalLeaseNoStepIsCountedAndTheRanksWaitForTheNextRound) {
  const std::string reference = ReferenceModel();
  ASSERT_FALSE(reference.empty());
  // The agent's page (common/lease_page.h), inherited by the workers at its number.
  testing::FakeLeasePage lease;
  ASSERT_TRUE(lease.ok());
  auto set_valid_until = [&lease](int64_t ns) { lease.SetValidUntil(ns); };
  constexpr int64_t kHour = 3600'000'000'000;
  set_valid_until(MonotonicNowNs() + kHour);
  lease_fd_ = std::to_string(lease.fd());
  FakeAgent agent(socket_);
  const int port = ::ddprun::testing::FreeLoopbackPort();
  ASSERT_NO_FATAL_FAILURE(StartRoundZero(agent, port, 3));

  set_valid_until(MonotonicNowNs() - 1);
  auto refused = [&](int r) {
    return absl::StrContains(workers_[r]->out() + workers_[r]->err(), "not committing step");
  };
  ASSERT_TRUE(WaitUntil([&] { return refused(0) || refused(1) || refused(2); }, seconds(30)))
      << Describe(*workers_[0]);
  // A rank that passed its check just before the end may be blocked in a collective with one
  // that stopped: the agent's abort frees it.
  for (int r = 0; r < kWorld; ++r) agent.Send(r, Abort(0, "this node was given up"));
  for (int r = 0; r < kWorld; ++r) {
    const std::string left =
        absl::StrCat("rank ", r, ": round 0( over|: .*: waiting for the next round)");
    ASSERT_TRUE(
        WaitUntil([&] { return ::ddprun::testing::CountMatches(workers_[r]->out(), left) == 1; },
                  seconds(30)))
        << Describe(*workers_[r]);
  }
  const std::string stopped_out = workers_[0]->out();
  set_valid_until(MonotonicNowNs() + kHour);
  for (int r = 0; r < kWorld; ++r) agent.Send(r, Round(1, r, kWorld, port));
  std::vector<int64_t> steps;
  for (int r = 0; r < kWorld; ++r) {
    std::optional<control::ReadyMessage> ready = agent.AwaitReady(r, 1, seconds(60));
    ASSERT_TRUE(ready.has_value()) << Describe(*workers_[r]);
    steps.push_back(ready->step);
  }
  EXPECT_EQ(steps[0], steps[1]);
  EXPECT_EQ(steps[0], steps[2]);
  EXPECT_GE(steps[0], 3);
  // No step line past the last step every rank holds, before round 1.
  EXPECT_EQ(StepLines(stopped_out, steps[0] + 1), 0) << stopped_out;
  ASSERT_TRUE(::ddprun::testing::ExpectAllExit(workers_, 0, seconds(120)));
  const std::string out = workers_[0]->out();
  for (int64_t step = 1; step <= 40; ++step) EXPECT_LE(StepLines(out, step), 1) << step;
  EXPECT_TRUE(ReadFile(dir_.File("model.pt")) == reference)
      << "the run's model differs from the fault-free run's";
}

// 3 -> 2 ranks: rank 1 dies and nobody replaces it; the survivors swap roles on the same store
// port: old rank 2 becomes rank 0 and finds the port served by old rank 0's store (it connects
// as a client), old rank 0 becomes rank 1. They re-shard the rest of the epoch and train to the
// end; the new rank 0 takes over the progress lines, the metrics file and the saved model.
TEST_F(InProcessTrainTest, SurvivorsReshardAndSwapRanksWhenTheWorldShrinks) {
  FakeAgent agent(socket_);
  const int port = ::ddprun::testing::FreeLoopbackPort();
  const std::string metrics = dir_.File("metrics.jsonl");
  ASSERT_NO_FATAL_FAILURE(StartRoundZero(agent, port, 5, {"--metrics-file", metrics}));
  workers_[1]->Signal(SIGKILL);
  for (int r : {0, 2}) agent.Send(r, Abort(0, "rank 1 on test failed"));
  // The fake agent is one node whose local rank 1 stays empty; what a worker uses of a round
  // are its rank, world size and store.
  for (auto [local_rank, rank] : {std::pair{2, 0}, std::pair{0, 1}}) {
    control::RoundMessage m = Round(1, rank, 2, port);
    m.local_rank = local_rank;
    m.local_world_size = kWorld;
    agent.Send(local_rank, m);
  }
  std::optional<control::ReadyMessage> a = agent.AwaitReady(0, 1, seconds(60));
  std::optional<control::ReadyMessage> b = agent.AwaitReady(2, 1, seconds(60));
  ASSERT_TRUE(a.has_value() && b.has_value()) << Describe(*workers_[0]) << Describe(*workers_[2]);
  EXPECT_EQ(a->step, b->step);
  std::optional<::ddprun::testing::ExitStatus> st0 = workers_[0]->Wait(seconds(120));
  std::optional<::ddprun::testing::ExitStatus> st2 = workers_[2]->Wait(seconds(120));
  ASSERT_TRUE(st0.has_value() && st2.has_value());
  EXPECT_EQ(st0->exit_code, 0) << Describe(*workers_[0]);
  EXPECT_EQ(st2->exit_code, 0) << Describe(*workers_[2]);
  EXPECT_THAT(workers_[0]->out(), HasSubstr("re-formed as rank 1 of 2"));
  EXPECT_THAT(workers_[2]->out(), HasSubstr("re-formed as rank 0 of 2"));
  const std::string out = workers_[2]->out();  // rank 0's lines from round 1 on
  // Both epochs ran to their last sample, the first one on two world sizes.
  EXPECT_THAT(out, HasSubstr("Train Epoch: 1 [3840/3840 (100%)]"));
  EXPECT_THAT(out, HasSubstr("Train Epoch: 2 [3840/3840 (100%)]"));
  EXPECT_THAT(out, HasSubstr("world_size 2"));
  EXPECT_THAT(out, HasSubstr("model saved to"));
  const std::string all = workers_[0]->out() + out;
  for (int64_t step = 1; step <= 40; ++step) EXPECT_LE(StepLines(all, step), 1) << step;
  // One line per epoch, by whichever process was rank 0 when the epoch ended.
  EXPECT_EQ(::ddprun::testing::CountOccurrences(ReadFile(metrics), "\"epoch\""), 2)
      << ReadFile(metrics);
}

// A peer that stops without closing its sockets (SIGSTOP: a lost node) leaves the others
// blocked inside a collective; the agent's abort ends that wait at once, well before the
// communication timeout, and the group re-forms once the stopped rank is replaced.
TEST_F(InProcessTrainTest, AbortEndsACollectiveBlockedOnAStoppedPeer) {
  const std::string reference = ReferenceModel();
  ASSERT_FALSE(reference.empty());
  FakeAgent agent(socket_);
  const int port = ::ddprun::testing::FreeLoopbackPort();
  constexpr int kCommTimeoutS = 60;
  ASSERT_NO_FATAL_FAILURE(
      StartRoundZero(agent, port, 5, {"--comm-timeout", std::to_string(kCommTimeoutS)}));
  workers_[2]->Signal(SIGSTOP);
  // The survivors are blocked once rank 0's output stops moving: a step takes tens of
  // milliseconds, so a second without a progress line means it is waiting for rank 2. (The step
  // in flight when rank 2 stopped may still finish if rank 2 had sent its part.)
  std::string seen = workers_[0]->out();
  auto changed_at = Clock::now();
  ASSERT_TRUE(WaitUntil(
      [&] {
        const std::string now = workers_[0]->out();
        if (now != seen) {
          seen = now;
          changed_at = Clock::now();
        }
        return Clock::now() - changed_at > seconds(1);
      },
      seconds(30)));
  const std::string before = workers_[0]->out();
  const auto aborted_at = Clock::now();
  for (int r : {0, 1}) agent.Send(r, Abort(0, "rank 2 on test lost"));
  for (int r : {0, 1}) {
    ASSERT_TRUE(workers_[r]->WaitForOutputContains("round 0 over (rank 2 on test lost)",
                                                   seconds(kCommTimeoutS / 2)))
        << Describe(*workers_[r]);
  }
  const double abort_s = SecondsSince(aborted_at);
  std::cout << "abort -> both survivors out of the blocked collective: " << abort_s << " s"
            << std::endl;
  EXPECT_LT(abort_s, 5.0);
  // They were blocked: rank 0 finished no step from a second after the stop until the abort,
  // and no collective failed by itself.
  const std::string after = workers_[0]->out().substr(before.size());
  EXPECT_EQ(after.find("\tstep "), std::string::npos) << after;
  EXPECT_THAT(after, HasSubstr("round 0 over (rank 2 on test lost): re-forming"));
  EXPECT_EQ(workers_[0]->out().find("waiting for the next round"), std::string::npos);
  workers_[2]->Signal(SIGKILL);
  auto replacement =
      std::make_unique<Subprocess>(Train(dir_.File("model.pt")), Env(2, kWorld, port, 1, socket_));
  ASSERT_TRUE(agent.AwaitHellos({2}, seconds(60))) << Describe(*replacement);
  for (int r = 0; r < kWorld; ++r) agent.Send(r, Round(1, r, kWorld, port));
  std::vector<int64_t> steps;
  for (int r = 0; r < kWorld; ++r) {
    std::optional<control::ReadyMessage> ready = agent.AwaitReady(r, 1, seconds(60));
    ASSERT_TRUE(ready.has_value()) << Describe(r == 2 ? *replacement : *workers_[r]);
    steps.push_back(ready->step);
  }
  EXPECT_EQ(steps[0], steps[2]);
  EXPECT_EQ(steps[1], steps[2]);
  workers_[2] = std::move(replacement);
  ASSERT_TRUE(::ddprun::testing::ExpectAllExit(workers_, 0, seconds(120)));
  EXPECT_TRUE(ReadFile(dir_.File("model.pt")) == reference)
      << "the recovered run's model differs from the fault-free run's";
}

// No next round within the round's deadline: the survivor exits 1 with its original error.
TEST_F(InProcessTrainTest, NoNextRoundMeansExitOneWithTheError) {
  FakeAgent agent(socket_);
  const int port = ::ddprun::testing::FreeLoopbackPort();
  constexpr int64_t kDeadlineMs = 3000;
  ASSERT_NO_FATAL_FAILURE(StartRoundZero(agent, port, 3, {}, kDeadlineMs));
  workers_[1]->Signal(SIGKILL);
  workers_[2]->Signal(SIGKILL);
  // Rank 0 finds its peers gone by itself (gloo: connection closed); no abort, no round.
  ASSERT_TRUE(workers_[0]->WaitForOutputContains("waiting for the next round", seconds(30)))
      << Describe(*workers_[0]);
  const auto waiting_at = Clock::now();
  std::optional<::ddprun::testing::ExitStatus> st = workers_[0]->Wait(seconds(30));
  ASSERT_TRUE(st.has_value()) << Describe(*workers_[0]);
  EXPECT_EQ(st->exit_code, 1) << Describe(*workers_[0]);
  EXPECT_GT(SecondsSince(waiting_at), kDeadlineMs / 1000.0 - 1);
  EXPECT_THAT(workers_[0]->err(), HasSubstr("no next round: no new round from the agent within"));
}

// A stop signal while a survivor waits for the next round ends the wait at once, as a stop:
// exit 128+N, and the last round's rank 0 saves the state it holds.
TEST_F(InProcessTrainTest, StopWhileWaitingForARoundExitsWithACheckpoint) {
  FakeAgent agent(socket_);
  const int port = ::ddprun::testing::FreeLoopbackPort();
  ASSERT_NO_FATAL_FAILURE(StartRoundZero(agent, port, 3, {"--checkpoint-dir", dir_.File("ckpt")}));
  workers_[1]->Signal(SIGKILL);
  workers_[2]->Signal(SIGKILL);
  ASSERT_TRUE(workers_[0]->WaitForOutputContains("waiting for the next round", seconds(30)))
      << Describe(*workers_[0]);
  const auto stopped_at = Clock::now();
  workers_[0]->Signal(SIGTERM);
  std::optional<::ddprun::testing::ExitStatus> st = workers_[0]->Wait(seconds(30));
  ASSERT_TRUE(st.has_value()) << Describe(*workers_[0]);
  EXPECT_EQ(st->exit_code, 128 + SIGTERM) << Describe(*workers_[0]);
  EXPECT_LT(SecondsSince(stopped_at), 5.0);  // the round's deadline is 60 s
  EXPECT_THAT(workers_[0]->out(),
              HasSubstr("rank 0: stop requested (signal 15) between rounds: checkpoint of step"));
  EXPECT_EQ(access(dir_.File("ckpt/LATEST").c_str(), F_OK), 0);
}

// `ddp-train imagenet` (ResNet-18: BatchNorm buffers, SGD momentum) through the same skeleton:
// rank 1 killed mid-epoch and replaced, no step taken twice, the run finishes. (Not compared
// byte for byte: two fault-free imagenet runs already differ in their checkpoints' bytes.)
TEST_F(InProcessTrainTest, ImageNetKilledRankReplacedWithoutRecomputingAStep) {
  const char* classes[] = {"cat", "dog", "fox"};
  for (int c = 0; c < 3; ++c) {
    std::filesystem::create_directories(dir_.File(absl::StrCat("images/", classes[c])));
    for (int i = 0; i < 16; ++i) {
      ::ddprun::testing::WriteFile(dir_.File(absl::StrCat("images/", classes[c], "/", i, ".jpg")),
                                   ::ddprun::testing::MakeClassJpeg(c, i));
    }
  }
  // 48 images, 2 ranks x 4 per step: 6 steps per epoch, 12 in all.
  auto train = [&](const std::string& ckpt) {
    return std::vector<std::string>{BinPath("ddp-train"),
                                    "imagenet",
                                    "--data",
                                    dir_.File("images"),
                                    "--arch",
                                    "resnet18",
                                    "--image-size",
                                    "32",
                                    "--batch-size",
                                    "4",
                                    "--workers",
                                    "1",
                                    "--print-freq",
                                    "1",
                                    "--epochs",
                                    "2",
                                    "--seed",
                                    "3",
                                    "--checkpoints-path",
                                    ckpt};
  };
  FakeAgent agent(socket_);
  const int port = ::ddprun::testing::FreeLoopbackPort();
  ASSERT_NO_FATAL_FAILURE(
      StartRoundZero(agent, port, train(dir_.File("ckpt")), 2, "Epoch: [1][2/6]"));
  workers_[1]->Signal(SIGKILL);
  agent.Send(0, Abort(0, "rank 1 on test failed"));
  auto replacement =
      std::make_unique<Subprocess>(train(dir_.File("ckpt")), Env(1, 2, port, 1, socket_));
  ASSERT_TRUE(agent.AwaitHellos({1}, seconds(60))) << Describe(*replacement);
  for (int r = 0; r < 2; ++r) agent.Send(r, Round(1, r, 2, port));
  std::optional<control::ReadyMessage> a = agent.AwaitReady(0, 1, seconds(60));
  std::optional<control::ReadyMessage> b = agent.AwaitReady(1, 1, seconds(60));
  ASSERT_TRUE(a.has_value() && b.has_value()) << Describe(*workers_[0]) << Describe(*replacement);
  EXPECT_EQ(a->step, b->step);
  EXPECT_GE(a->step, 2);
  workers_[1] = std::move(replacement);
  ASSERT_TRUE(::ddprun::testing::ExpectAllExit(workers_, 0, seconds(120)));
  const std::string out = workers_[0]->out();
  for (int epoch = 1; epoch <= 2; ++epoch) {
    for (int step = 1; step <= 6; ++step) {
      const std::string line = absl::StrCat("Epoch: [", epoch, "][", step, "/6]");
      EXPECT_LE(::ddprun::testing::CountOccurrences(out, line), 1) << line << "\n" << out;
    }
  }
  EXPECT_THAT(out, HasSubstr("Epoch: [2][6/6]"));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("the state of step ", a->step, " (epoch 1")));
  EXPECT_FALSE(ReadFile(dir_.File("ckpt/ckpt-000000000012.ddpt")).empty());
}

// Garbage from the agent: the worker fails with a message naming it, and does not hang.
TEST_F(InProcessTrainTest, GarbageFromTheAgentFailsTheWorkerClearly) {
  FakeAgent agent(socket_);
  ASSERT_TRUE(agent.error().empty()) << agent.error();
  Subprocess before_round(Train(dir_.File("a.pt")),
                          Env(0, 1, ::ddprun::testing::FreeLoopbackPort(), 0, socket_));
  ASSERT_TRUE(agent.AwaitHellos({0}, seconds(60))) << Describe(before_round);
  agent.SendLine(0, "{\"type\":\"round\",\"round\":\"zero\"}");
  std::optional<::ddprun::testing::ExitStatus> st = before_round.Wait(seconds(30));
  ASSERT_TRUE(st.has_value()) << Describe(before_round);
  EXPECT_EQ(st->exit_code, 1) << Describe(before_round);
  EXPECT_THAT(before_round.err(), HasSubstr("a bad message from the agent"));

  // Mid-training (world size 1: no collective to fail; the train loop checks the round).
  Subprocess during(Train(dir_.File("b.pt")),
                    Env(0, 1, ::ddprun::testing::FreeLoopbackPort(), 0, socket_));
  ASSERT_TRUE(agent.AwaitHellos({0}, seconds(60))) << Describe(during);
  agent.Send(0, Round(0, 0, 1, ::ddprun::testing::FreeLoopbackPort()));
  ASSERT_TRUE(agent.AwaitReady(0, 0, seconds(60)).has_value()) << Describe(during);
  ASSERT_TRUE(during.WaitForOutputContains("\tstep 2\n", seconds(60))) << Describe(during);
  agent.SendLine(0, "this is not json");
  st = during.Wait(seconds(30));
  ASSERT_TRUE(st.has_value()) << Describe(during);
  EXPECT_EQ(st->exit_code, 1) << Describe(during);
  EXPECT_THAT(during.err(), HasSubstr("a bad message from the agent"));
  EXPECT_THAT(during.err(), HasSubstr("round 0 is over"));
}

}  // namespace
}  // namespace ddprun::trainer
