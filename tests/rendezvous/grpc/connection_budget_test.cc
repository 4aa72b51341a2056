// ConnectionBudget (issue 43 S1): per source address, new connections within the window and
// open connections; over all, the descriptor budget shared max-min fairly. A fake clock and a
// fake "is it still open" stand in for time and gRPC's closing of connections.
#include "rendezvous/grpc/connection_budget.h"

#include <chrono>
#include <set>
#include <utility>

#include "gtest/gtest.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using Verdict = ConnectionBudget::Verdict;

class ConnectionBudgetTest : public ::testing::Test {
 protected:
  ConnectionBudget Make(int max_new, int max_open_per_source, int max_open_total) {
    ConnectionBudgetOptions o;
    o.window = std::chrono::seconds(10);
    o.max_new_per_source = max_new;
    o.max_open_per_source = max_open_per_source;
    o.max_open_total = max_open_total;
    return ConnectionBudget(o, [this](int fd, uint64_t) { return closed_.count(fd) == 0; });
  }
  // Offers fds from `next_fd_` on; returns the last verdict.
  Verdict Offer(ConnectionBudget& budget, const std::string& source, int n = 1) {
    Verdict v = Verdict::kKeep;
    for (int i = 0; i < n; ++i) {
      const int fd = next_fd_++;
      v = budget.Offer(source, fd, static_cast<uint64_t>(fd), now_);
    }
    return v;
  }

  TimePoint now_{std::chrono::seconds(1000)};
  int next_fd_ = 10;
  std::set<int> closed_;
};

TEST_F(ConnectionBudgetTest, NewConnectionsAreCountedPerSourceWithinTheWindow) {
  ConnectionBudget budget = Make(3, 100, 1000);
  EXPECT_EQ(Offer(budget, "abuser", 3), Verdict::kKeep);
  EXPECT_EQ(Offer(budget, "abuser"), Verdict::kTooManyNew);
  EXPECT_EQ(Offer(budget, "other"), Verdict::kKeep) << "another address is not held back";
  now_ += std::chrono::seconds(10);
  EXPECT_EQ(Offer(budget, "abuser"), Verdict::kKeep) << "the window has passed";
}

TEST_F(ConnectionBudgetTest, OpenConnectionsAreCountedPerSourceUntilFoundClosed) {
  ConnectionBudget budget = Make(100, 2, 1000);
  EXPECT_EQ(Offer(budget, "a", 2), Verdict::kKeep);
  EXPECT_EQ(Offer(budget, "a"), Verdict::kTooManyOpen);
  closed_.insert(10);  // gRPC closed the first one
  now_ += milliseconds(200);
  EXPECT_EQ(Offer(budget, "a"), Verdict::kKeep);
  EXPECT_EQ(budget.open_from("a"), 2);
}

TEST_F(ConnectionBudgetTest, AtTheDescriptorBudgetTheBiggestHolderGivesWay) {
  ConnectionBudget budget = Make(100, 100, 4);
  EXPECT_EQ(Offer(budget, "hog", 4), Verdict::kKeep);
  EXPECT_EQ(Offer(budget, "hog"), Verdict::kOverFairShare);
  EXPECT_EQ(Offer(budget, "newcomer"), Verdict::kKeep) << "below its fair share of 2";
  EXPECT_EQ(Offer(budget, "newcomer"), Verdict::kKeep);
  EXPECT_EQ(Offer(budget, "newcomer"), Verdict::kOverFairShare);
}

TEST_F(ConnectionBudgetTest, ADescriptorNumberGivenOutAgainMeansTheOldConnectionClosed) {
  ConnectionBudget budget = Make(100, 100, 1000);
  ASSERT_EQ(budget.Offer("a", 7, 1, now_), Verdict::kKeep);
  ASSERT_EQ(budget.Offer("b", 7, 2, now_), Verdict::kKeep);
  EXPECT_EQ(budget.open_from("a"), 0);
  EXPECT_EQ(budget.open_from("b"), 1);
  EXPECT_EQ(budget.open(), 1);
}

}  // namespace
}  // namespace ddprun::rendezvous
