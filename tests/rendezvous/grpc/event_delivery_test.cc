#include "rendezvous/api/event_delivery.h"

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ddprun::rendezvous {
namespace {

// Runs what was posted only when the test says so, as the agent's loop would later.
class ManualExecutor final : public Executor {
 public:
  void Post(std::function<void()> fn) override { queue_.push_back(std::move(fn)); }
  void RunAll() {
    std::vector<std::function<void()>> queue = std::exchange(queue_, {});
    for (auto& fn : queue) fn();
  }
  size_t pending() const { return queue_.size(); }

 private:
  std::vector<std::function<void()>> queue_;
};

class Log final : public RendezvousEvents {
 public:
  void OnAssignment(const Assignment& a) override { lines.push_back("assigned " + Str(a.round)); }
  void OnRestart(Cause cause, const std::string& reason, const std::optional<HangNotice>& hang,
                 const RestartFacts& facts) override {
    lines.push_back("restart " + reason + (hang ? " hang=" + hang->straggler : ""));
  }
  void OnClosed(const absl::Status& s, const std::optional<HangNotice>& hang) override {
    lines.push_back("closed " + s.ToString() + (hang ? " hang=" + hang->straggler : ""));
  }
  void OnReconnecting(const std::string& why) override { lines.push_back("reconnecting " + why); }
  void OnResumed(int64_t round) override { lines.push_back("resumed " + Str(round)); }

  std::vector<std::string> lines;

 private:
  static std::string Str(int64_t n) { return std::to_string(n); }
};

TEST(EventDeliveryTest, DeliversInOrderOnTheExecutorOnceASinkIsSet) {
  ManualExecutor executor;
  EventDelivery delivery(&executor);
  delivery.Resumed(1);  // before Join: nowhere to go
  EXPECT_EQ(executor.pending(), 0u);

  Log log;
  Log other;
  EXPECT_TRUE(delivery.SetSink(&log));
  EXPECT_FALSE(delivery.SetSink(&other));  // only the first Join counts
  Assignment a;
  a.round = 3;
  delivery.Assigned(a);
  delivery.Restart(Cause::kNodeLeft, "node 2 left", std::nullopt);
  delivery.Reconnecting("stream broke");
  delivery.Resumed(3);
  EXPECT_TRUE(log.lines.empty());  // nothing runs on the caller's thread
  executor.RunAll();
  EXPECT_EQ(log.lines, (std::vector<std::string>{"assigned 3", "restart node 2 left",
                                                 "reconnecting stream broke", "resumed 3"}));
  EXPECT_TRUE(other.lines.empty());
}

TEST(EventDeliveryTest, ClosesOnceAndThenDeliversNothing) {
  ManualExecutor executor;
  EventDelivery delivery(&executor);
  Log log;
  delivery.SetSink(&log);
  EXPECT_FALSE(delivery.closed());
  EXPECT_TRUE(delivery.Close(absl::ResourceExhaustedError("budget spent"), HangNotice{"rank 1"}));
  EXPECT_TRUE(delivery.closed());
  EXPECT_FALSE(delivery.Close(absl::UnavailableError("late")));
  delivery.Restart(Cause::kNodeLeft, "too late", std::nullopt);
  EXPECT_FALSE(delivery.CloseQuietly());
  executor.RunAll();
  EXPECT_EQ(log.lines,
            (std::vector<std::string>{"closed RESOURCE_EXHAUSTED: budget spent hang=rank 1"}));
}

TEST(EventDeliveryTest, ClosingQuietlyDeliversNoClose) {
  ManualExecutor executor;
  EventDelivery delivery(&executor);
  Log log;
  delivery.SetSink(&log);
  EXPECT_TRUE(delivery.CloseQuietly());
  EXPECT_TRUE(delivery.closed());
  EXPECT_FALSE(delivery.Close(absl::OkStatus()));
  executor.RunAll();
  EXPECT_TRUE(log.lines.empty());
}

TEST(EventDeliveryTest, SilenceDropsEventsAlreadyQueued) {
  ManualExecutor executor;
  Log log;
  {
    EventDelivery delivery(&executor);
    delivery.SetSink(&log);
    delivery.Resumed(5);
    delivery.Close(absl::OkStatus());
    delivery.Silence();
  }  // queued events may outlive the delivery
  EXPECT_EQ(executor.pending(), 2u);
  executor.RunAll();
  EXPECT_TRUE(log.lines.empty());
}

TEST(EventDeliveryTest, RejoinRestartsAndNumbersTheNodeIdFromTheFirst) {
  ManualExecutor executor;
  EventDelivery delivery(&executor);
  Log log;
  delivery.SetSink(&log);
  NodeInfo node;
  node.node_id = "n1";
  delivery.RejoinAsNewNode("fenced", &node);
  EXPECT_EQ(node.node_id, "n1-rejoin1");
  delivery.RejoinAsNewNode("lease lost", &node);
  EXPECT_EQ(node.node_id, "n1-rejoin2");
  executor.RunAll();
  EXPECT_EQ(log.lines, (std::vector<std::string>{"restart fenced; rejoining as a new node",
                                                 "restart lease lost; rejoining as a new node"}));
}

}  // namespace
}  // namespace ddprun::rendezvous
