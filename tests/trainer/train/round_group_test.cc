// RoundGroup with real control clients, TCPStores and gloo groups, the ranks as threads of this
// process and a minimal agent on a Unix socket: an abort ends a collective that would otherwise
// wait for the whole communication timeout, and a group that cannot form; a second round on the
// same port reuses the store this process serves.
#include "trainer/train/round_group.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/free_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun::trainer {
namespace {

using Clock = std::chrono::steady_clock;

control::RoundMessage Round(int64_t round, int rank, int world, int port) {
  control::RoundMessage m;
  m.round = round;
  m.rank = rank;
  m.world_size = world;
  m.local_rank = rank;
  m.local_world_size = world;
  m.master_addr = "127.0.0.1";
  m.master_port = port;
  m.store_prefix = control::RoundStorePrefix(round);
  m.deadline_ms = 30000;
  return m;
}

// Answers each hello with round 0 for that local rank (rank = local rank, world `world`).
class TinyAgent {
 public:
  TinyAgent(const std::string& path, int world, int port) {
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listen_fd_, 8), 0);
    thread_ = std::thread([this, world, port] {
      while (true) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) return;  // shut down
        std::string line;
        char c;
        while (recv(fd, &c, 1, 0) == 1 && c != '\n') line += c;
        absl::StatusOr<control::ControlMessage> m = control::ParseControlMessage(line);
        const auto* hello = m.ok() ? std::get_if<control::HelloMessage>(&*m) : nullptr;
        if (hello == nullptr) {
          close(fd);
          continue;
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          fds_[hello->local_rank] = fd;
        }
        Send(hello->local_rank, Round(0, hello->local_rank, world, port));
      }
    });
  }
  ~TinyAgent() {
    shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    close(listen_fd_);
    for (auto& [rank, fd] : fds_) close(fd);
  }
  void Send(int local_rank, const control::ControlMessage& m) {
    const std::string line = control::EncodeControlMessage(m) + "\n";
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(send(fds_.at(local_rank), line.data(), line.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(line.size()));
  }

 private:
  int listen_fd_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::map<int, int> fds_;
};

// One rank: its control client and its RoundGroup.
struct Rank {
  std::unique_ptr<control::ControlClient> control;
  std::unique_ptr<RoundGroup> rounds;
};

class RoundGroupTest : public ::testing::Test {
 protected:
  Rank Connect(int local_rank) {
    absl::StatusOr<std::unique_ptr<control::ControlClient>> c =
        control::ControlClient::Connect(socket_, local_rank, absl::Seconds(10));
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return {};
    Rank r;
    r.control = std::move(*c);
    CommOptions options;
    options.timeout = std::chrono::seconds(60);  // far longer than any wait below may take
    r.rounds = std::make_unique<RoundGroup>(r.control.get(), options);
    return r;
  }

  // Forms `round` on every rank at once (the gloo rendezvous needs them all).
  std::vector<std::unique_ptr<Communicator>> FormAll(std::vector<Rank>& ranks, int64_t round,
                                                     int port) {
    std::vector<std::unique_ptr<Communicator>> comms(ranks.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ranks.size(); ++r) {
      threads.emplace_back([&, r] {
        const control::RoundMessage m =
            Round(round, static_cast<int>(r), static_cast<int>(ranks.size()), port);
        absl::StatusOr<std::unique_ptr<Communicator>> c =
            ranks[r].rounds->Form(RoundEnv(DistEnv(), m), round);
        ASSERT_TRUE(c.ok()) << c.status();
        comms[r] = std::move(*c);
      });
    }
    for (std::thread& t : threads) t.join();
    return comms;
  }

  ::ddprun::testing::TempDir dir_;
  const std::string socket_ = dir_.File("control.sock");
};

TEST_F(RoundGroupTest, AbortEndsACollectiveThatAPeerNeverJoins) {
  const int port = ::ddprun::testing::FreeLoopbackPort();
  TinyAgent agent(socket_, 2, port);
  std::vector<Rank> ranks;
  ranks.push_back(Connect(0));
  ranks.push_back(Connect(1));
  std::vector<std::unique_ptr<Communicator>> comms = FormAll(ranks, 0, port);
  ASSERT_TRUE(comms[0] != nullptr && comms[1] != nullptr);
  // Rank 1 never makes the all-reduce: rank 0 would wait for the 60 s timeout.
  torch::Tensor t = torch::ones({4});
  c10::intrusive_ptr<c10d::Work> work = comms[0]->AllReduceSumAsync(t);
  std::thread aborter([&] {
    // Not a wait for a condition: the abort must come while rank 0 is inside Wait, and Wait
    // cannot signal that it has started. Any moment works; the assertion is on the return time.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    control::AbortMessage abort;
    abort.round = 0;
    abort.reason = "rank 1 on test lost";
    agent.Send(0, abort);
  });
  const auto t0 = Clock::now();
  absl::Status s = comms[0]->Wait(work);
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  aborter.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_LT(waited, 5.0);
  // Dropped: destroyed in the background. Rank 1's group goes at once (nothing in flight) and
  // its closed connections end rank 0's all-reduce, so rank 0's can go too, long before the
  // 60 s timeout.
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r].rounds->Drop(std::move(comms[r]));
  for (size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_TRUE(::ddprun::testing::WaitUntil([&] { return ranks[r].rounds->destroyed() == 1; },
                                             std::chrono::seconds(20)))
        << "rank " << r << "'s dropped group was not destroyed";
  }
}

TEST_F(RoundGroupTest, AbortEndsFormingAGroupThatCannotForm) {
  const int port = ::ddprun::testing::FreeLoopbackPort();
  TinyAgent agent(socket_, 2, port);
  Rank rank1 = Connect(1);
  ASSERT_TRUE(rank1.control != nullptr);
  std::thread aborter([&] {
    // As above: the abort has to arrive while Form is blocked (nobody serves the store).
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    control::AbortMessage abort;
    abort.round = 0;
    agent.Send(1, abort);
  });
  const auto t0 = Clock::now();
  absl::StatusOr<std::unique_ptr<Communicator>> c =
      rank1.rounds->Form(RoundEnv(DistEnv(), Round(0, 1, 2, port)), 0);
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  aborter.join();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kAborted) << c.status();
  EXPECT_LT(waited, 5.0);
}

TEST_F(RoundGroupTest, ANewRoundOnTheSamePortUsesTheStoreThisProcessServes) {
  const int port = ::ddprun::testing::FreeLoopbackPort();
  TinyAgent agent(socket_, 2, port);
  std::vector<Rank> ranks;
  ranks.push_back(Connect(0));
  ranks.push_back(Connect(1));
  for (int64_t round : {0, 1}) {
    std::vector<std::unique_ptr<Communicator>> comms = FormAll(ranks, round, port);
    ASSERT_TRUE(comms[0] != nullptr && comms[1] != nullptr) << "round " << round;
    std::vector<torch::Tensor> sums{torch::full({2}, 1.0f), torch::full({2}, 2.0f)};
    std::vector<std::thread> threads;
    std::vector<absl::Status> status(2);
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] { status[r] = comms[r]->AllReduceSum(sums[r]); });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(status[r].ok()) << status[r];
      EXPECT_TRUE(torch::equal(sums[r], torch::full({2}, 3.0f)));
      ranks[r].rounds->Drop(std::move(comms[r]));
    }
  }
}

}  // namespace
}  // namespace ddprun::trainer
