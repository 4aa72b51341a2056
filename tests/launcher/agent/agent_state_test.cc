// The agent's restart policy, driven with fake worker exits, a fake clock and the real
// LocalRendezvous on a queue executor: no processes, no threads.
#include "launcher/agent/agent_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <deque>
#include <functional>

#include "common/clock.h"
#include "launcher/rdzv/local_rendezvous.h"

namespace ddprun::launcher {
namespace {

using Type = AgentAction::Type;

class QueueExecutor : public Executor {
 public:
  void Post(std::function<void()> fn) override { queue_.push_back(std::move(fn)); }
  void RunAll() {
    while (!queue_.empty()) {
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      fn();
    }
  }

 private:
  std::deque<std::function<void()>> queue_;
};

// Plays the agent's part: feeds rendezvous events to the state machine, performs the actions
// against a fake worker group (pids only), and records what happened.
class FakeAgent : public rendezvous::RendezvousEvents {
 public:
  FakeAgent(int nproc, int max_restarts)
      : nproc_(nproc), state_(nproc), rdzv_(&executor_, Options(max_restarts)) {}

  static LocalRendezvousOptions Options(int max_restarts) {
    LocalRendezvousOptions o;
    o.max_restarts = max_restarts;
    return o;
  }

  void Start() {
    rendezvous::NodeInfo node;
    node.nproc_per_node = nproc_;
    rdzv_.Join(node, this);
    executor_.RunAll();
  }

  void OnAssignment(const rendezvous::Assignment& a) override { Do(state_.OnAssignment(a)); }
  void OnRestart(const std::string& reason,
                 const std::optional<rendezvous::HangNotice>& hang) override {
    Do(state_.OnRestart(reason, hang));
  }
  void OnClosed(const absl::Status& s, const std::optional<rendezvous::HangNotice>& hang) override {
    Do(state_.OnClosed(s, hang));
  }

  // A worker of the current attempt exits by itself.
  void Exit(int local_rank, int code, int signal = 0) {
    WorkerExit e;
    e.local_rank = local_rank;
    e.rank = rank_offset_ + local_rank;
    e.pid = pids_.at(local_rank);
    e.exit_code = code;
    e.signal = signal;
    e.when = clock_.Now();
    clock_.Advance(std::chrono::milliseconds(1));
    alive_.erase(local_rank);
    Do(state_.OnWorkerExited(e));
    executor_.RunAll();
  }

  // The stop ddprun asked for takes effect: every live worker dies of SIGTERM.
  void StoppedWorkersDie() {
    std::set<int> alive = alive_;
    for (int lr : alive) Exit(lr, 0, SIGTERM);
  }

  void Signal(int sig) {
    Do(state_.OnStopSignal(sig));
    executor_.RunAll();
  }

  std::vector<Type> log;
  std::vector<rendezvous::Assignment> starts;
  std::optional<int> exit_code;
  int stop_requests = 0;
  AgentStateMachine& state() { return state_; }

 private:
  void Do(const std::vector<AgentAction>& actions) {
    for (const auto& a : actions) {
      log.push_back(a.type);
      switch (a.type) {
        case Type::kStartWorkers:
          starts.push_back(a.assignment);
          rank_offset_ = a.assignment.rank_offset;
          for (int lr = 0; lr < nproc_; ++lr) {
            pids_[lr] = next_pid_++;
            alive_.insert(lr);
          }
          break;
        case Type::kStopWorkers:
          ++stop_requests;
          break;
        case Type::kReportFailed: {
          rendezvous::WorkerFailure f;
          f.rank = a.failure.rank;
          rdzv_.ReportGroupState(a.round, rendezvous::GroupState::kFailed, f);
          break;
        }
        case Type::kReportSucceeded:
          rdzv_.ReportGroupState(a.round, rendezvous::GroupState::kSucceeded, std::nullopt);
          break;
        case Type::kLeave:
          rdzv_.Leave(a.message);
          break;
        case Type::kExit:
          exit_code = a.exit_code;
          break;
        case Type::kKillWorkers:
          break;
      }
    }
  }

  const int nproc_;
  FakeClock clock_;
  QueueExecutor executor_;
  AgentStateMachine state_;
  LocalRendezvous rdzv_;
  std::map<int, int> pids_;
  std::set<int> alive_;
  int next_pid_ = 100;
  int rank_offset_ = 0;
};

TEST(AgentStateTest, AllWorkersSucceed) {
  FakeAgent agent(2, 0);
  agent.Start();
  ASSERT_EQ(agent.starts.size(), 1u);
  EXPECT_EQ(agent.starts[0].world_size, 2);
  agent.Exit(0, 0);
  EXPECT_FALSE(agent.exit_code.has_value());  // still one running
  agent.Exit(1, 0);
  EXPECT_EQ(agent.exit_code, kExitSuccess);
  EXPECT_EQ(agent.stop_requests, 0);
}

TEST(AgentStateTest, FailureRestartsUntilBudgetSpent) {
  FakeAgent agent(2, 2);
  agent.Start();
  for (int restart = 1; restart <= 2; ++restart) {
    agent.Exit(1, 3);  // rank 1 fails
    EXPECT_EQ(agent.stop_requests, restart);
    EXPECT_EQ(agent.starts.size(), static_cast<size_t>(restart));  // not restarted yet
    agent.StoppedWorkersDie();                                     // rank 0 stopped by SIGTERM
    ASSERT_EQ(agent.starts.size(), static_cast<size_t>(restart + 1));
    EXPECT_EQ(agent.starts.back().restart_count, restart);
    EXPECT_EQ(agent.starts.back().round, restart);
  }
  agent.Exit(0, 0, SIGSEGV);  // third failure: budget of 2 is spent
  agent.StoppedWorkersDie();
  EXPECT_EQ(agent.exit_code, kExitWorkersFailed);
  ASSERT_TRUE(agent.state().root_cause().has_value());
  EXPECT_EQ(agent.state().root_cause()->signal, SIGSEGV);
  EXPECT_EQ(agent.state().root_cause()->local_rank, 0);
  EXPECT_THAT(agent.state().exit_reason(), ::testing::HasSubstr("restart budget spent"));
}

TEST(AgentStateTest, ANewRoundForgetsTheRootCauseOfTheLastOne) {
  FakeAgent agent(2, 1);
  agent.Start();
  agent.Exit(1, 3);  // this node's failure spends the one restart
  agent.StoppedWorkersDie();
  ASSERT_EQ(agent.starts.size(), 2u);
  EXPECT_FALSE(agent.state().root_cause().has_value());
  ASSERT_TRUE(agent.state().previous_root_cause().has_value());  // for "rank N was at ..."
  EXPECT_EQ(agent.state().previous_root_cause()->local_rank, 1);
  // Then another node's failure spends the budget: no local failure is this attempt's cause.
  agent.OnClosed(absl::ResourceExhaustedError("rank 7 on n2 exited 1"), std::nullopt);
  agent.StoppedWorkersDie();
  EXPECT_EQ(agent.exit_code, kExitWorkersFailed);
  EXPECT_FALSE(agent.state().root_cause().has_value());
}

TEST(AgentStateTest, ZeroBudgetFailsAtOnce) {
  FakeAgent agent(1, 0);
  agent.Start();
  agent.Exit(0, 1);
  EXPECT_EQ(agent.exit_code, kExitWorkersFailed);
  EXPECT_EQ(agent.starts.size(), 1u);
}

TEST(AgentStateTest, OtherFailuresDuringStopAreListedButNotSigterm) {
  FakeAgent agent(3, 0);
  agent.Start();
  agent.Exit(2, 7);
  agent.Exit(1, 1);  // failed on its own before the SIGTERM landed
  agent.StoppedWorkersDie();
  EXPECT_EQ(agent.exit_code, kExitWorkersFailed);
  EXPECT_EQ(agent.state().root_cause()->local_rank, 2);
  ASSERT_EQ(agent.state().other_failures().size(), 1u);
  EXPECT_EQ(agent.state().other_failures()[0].local_rank, 1);
}

TEST(AgentStateTest, StopSignalWaitsForWorkersThenExits128PlusN) {
  FakeAgent agent(2, 5);
  agent.Start();
  agent.Signal(SIGTERM);
  EXPECT_EQ(agent.stop_requests, 1);
  EXPECT_FALSE(agent.exit_code.has_value());
  agent.Signal(SIGINT);  // impatient: kill now, but keep the first signal's exit code
  EXPECT_EQ(agent.log.back(), Type::kKillWorkers);
  agent.StoppedWorkersDie();
  EXPECT_EQ(agent.exit_code, 128 + SIGTERM);
  EXPECT_EQ(agent.starts.size(), 1u);  // no restart after a stop signal
}

TEST(AgentStateTest, SignalWhileRestartingStillExits) {
  FakeAgent agent(2, 5);
  agent.Start();
  agent.Exit(0, 1);  // failure: stopping, a restart will follow
  agent.Signal(SIGHUP);
  agent.StoppedWorkersDie();
  EXPECT_EQ(agent.exit_code, 128 + SIGHUP);
  EXPECT_EQ(agent.starts.size(), 1u);
}

TEST(AgentStateTest, ClosedWhileRunningStopsThenExitsWithItsCode) {
  AgentStateMachine sm(1);
  rendezvous::Assignment a;
  ASSERT_EQ(sm.OnAssignment(a).at(0).type, Type::kStartWorkers);
  auto actions = sm.OnClosed(absl::UnavailableError("rendezvous server lost"), std::nullopt);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].type, Type::kStopWorkers);
  WorkerExit e;
  e.signal = SIGTERM;
  actions = sm.OnWorkerExited(e);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].type, Type::kExit);
  EXPECT_EQ(actions[0].exit_code, kExitRendezvous);
}

TEST(AgentStateTest, RestartThenAssignmentWhileStoppingStartsAfterStop) {
  AgentStateMachine sm(1);
  rendezvous::Assignment a;
  sm.OnAssignment(a);
  EXPECT_EQ(sm.OnRestart("node 2 joined", std::nullopt).at(0).type, Type::kStopWorkers);
  rendezvous::Assignment next;
  next.round = 1;
  next.world_size = 2;
  EXPECT_TRUE(sm.OnAssignment(next).empty());
  WorkerExit e;
  e.signal = SIGTERM;
  auto actions = sm.OnWorkerExited(e);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].type, Type::kStartWorkers);
  EXPECT_EQ(actions[0].assignment.round, 1);
  EXPECT_EQ(sm.phase(), AgentStateMachine::Phase::kRunning);
}

TEST(AgentStateTest, AHangIsReportedAsAFailureAndStopsWithStacksThenRestarts) {
  AgentStateMachine sm(2);
  rendezvous::Assignment a;
  sm.OnAssignment(a);
  WorkerExit hung;
  hung.local_rank = 1;
  hung.rank = 1;
  hung.pid = 77;
  hung.hang = "FileTimer scope train.py#57 expired";
  auto actions = sm.OnHang(hung, SIGKILL);
  ASSERT_EQ(actions.size(), 2u);
  EXPECT_EQ(actions[0].type, Type::kReportFailed);
  EXPECT_EQ(actions[0].failure.hang, hung.hang);
  EXPECT_FALSE(actions[0].failure.ok());
  EXPECT_EQ(actions[1].type, Type::kStopWorkers);
  EXPECT_EQ(actions[1].stop_mode, StopMode::kTakeStacksFirst);
  EXPECT_EQ(actions[1].failure.local_rank, 1);
  EXPECT_EQ(actions[1].hang_signal, SIGKILL);
  EXPECT_TRUE(sm.OnHang(hung, SIGKILL).empty());  // one verdict per attempt
  // SIGABRT (ours, for Python's faulthandler) and SIGKILL are not further failures.
  WorkerExit e0;
  e0.local_rank = 0;
  e0.signal = SIGABRT;
  EXPECT_TRUE(sm.OnWorkerExited(e0).empty());
  WorkerExit e1;
  e1.local_rank = 1;
  e1.signal = SIGKILL;
  EXPECT_TRUE(sm.OnWorkerExited(e1).empty());
  EXPECT_TRUE(sm.other_failures().empty());
  ASSERT_TRUE(sm.root_cause().has_value());
  EXPECT_EQ(sm.root_cause()->hang, hung.hang);
  EXPECT_EQ(sm.phase(), AgentStateMachine::Phase::kRendezvous);
}

TEST(AgentStateTest, AHangOnAnotherNodeTakesStacksHereToo) {
  AgentStateMachine sm(1);
  rendezvous::Assignment a;
  sm.OnAssignment(a);
  auto actions = sm.OnRestart("worker hang on n2: rank 3 hung", rendezvous::HangNotice{});
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].stop_mode, StopMode::kTakeStacksFirst);
  EXPECT_EQ(actions[0].hang_signal, 0);
  AgentStateMachine closing(1);
  closing.OnAssignment(a);
  actions =
      closing.OnClosed(absl::ResourceExhaustedError("budget spent"), rendezvous::HangNotice{});
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].stop_mode, StopMode::kTakeStacksFirst);
  AgentStateMachine plain(1);
  plain.OnAssignment(a);
  EXPECT_EQ(plain.OnRestart("node 2 joined", std::nullopt).at(0).stop_mode, StopMode::kGracefully);
}

TEST(AgentStateTest, CloseCodes) {
  EXPECT_EQ(AgentStateMachine::ExitCodeForClose(absl::OkStatus()), 0);
  EXPECT_EQ(AgentStateMachine::ExitCodeForClose(absl::ResourceExhaustedError("x")), 1);
  EXPECT_EQ(AgentStateMachine::ExitCodeForClose(absl::UnauthenticatedError("x")), 3);
  EXPECT_EQ(AgentStateMachine::ExitCodeForClose(absl::DeadlineExceededError("x")), 3);
}

}  // namespace
}  // namespace ddprun::launcher
