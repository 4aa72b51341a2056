// The agent's restart policy, driven with fake worker exits, a fake clock and the real
// LocalRendezvous on a queue executor: no processes, no threads.
#include "launcher/agent/state/agent_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <deque>
#include <functional>

#include "common/clock.h"
#include "launcher/rdzv/local_rendezvous.h"
#include "rendezvous/api/crash_loop.h"
#include "rendezvous/api/eviction.h"

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
  void OnRestart(rendezvous::Cause cause, const std::string& reason,
                 const std::optional<rendezvous::HangNotice>& hang,
                 const rendezvous::RestartFacts& facts) override {
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
        case Type::kAbortRound:  // in-process mode only (tests of their own below)
        case Type::kReformWorkers:
        case Type::kCheckHealth:  // --health-check only (health_gate_test.cc)
        case Type::kStepOut:
        case Type::kStepIn:
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

TEST(AgentStateTest, AnEvictedNodeStopsItsWorkersAndExitsFive) {
  AgentStateMachine sm(1);
  rendezvous::Assignment a;
  ASSERT_EQ(sm.OnAssignment(a).at(0).type, Type::kStartWorkers);
  auto actions = sm.OnClosed(rendezvous::EvictedStop("evicted as slow"), std::nullopt);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].type, Type::kStopWorkers);
  WorkerExit e;
  e.signal = SIGTERM;
  actions = sm.OnWorkerExited(e);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].exit_code, kExitEvicted);
  // The same code without the mark (a stale round's refusal, say) is a rendezvous failure.
  AgentStateMachine other(1);
  ASSERT_EQ(other.OnAssignment(a).at(0).type, Type::kStartWorkers);
  other.OnClosed(absl::FailedPreconditionError("no"), std::nullopt);
  EXPECT_EQ(other.OnWorkerExited(e).at(0).exit_code, kExitRendezvous);
}

// Issue 41: a node set aside (evicted as slow, or kept out by the preflight) stops its workers,
// in-process or not, and waits without exiting; still set aside when the run ends OK, it exits
// 5; requalified (a plain standby), the run's end is its success.
TEST(AgentStateTest, ASetAsideNodeStopsItsWorkersWaitsAndExitsFiveIfTheRunEndsFirst) {
  for (RestartMode mode : {RestartMode::kCold, RestartMode::kInProcess}) {
    AgentStateMachine sm(1, mode);
    rendezvous::Assignment a;
    a.round = 1;
    ASSERT_EQ(sm.OnAssignment(a).at(0).type, Type::kStartWorkers);
    sm.OnWorkerSpeaks(0);
    auto actions = sm.OnSetAside("evicted as slow");
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].type, Type::kStopWorkers) << "the others went on without them";
    WorkerExit e;
    e.signal = SIGTERM;
    EXPECT_TRUE(sm.OnWorkerExited(e).empty()) << "no exit: it waits";
    EXPECT_EQ(sm.phase(), AgentStateMachine::Phase::kRendezvous);
    EXPECT_TRUE(sm.set_aside());
    EXPECT_FALSE(sm.standby()) << "not a spare";
    actions = sm.OnClosed(absl::OkStatus(), std::nullopt);
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].exit_code, kExitEvicted);
    EXPECT_THAT(actions[0].message, ::testing::HasSubstr("set aside: evicted as slow"));
  }
  AgentStateMachine requalified(1);
  requalified.OnSetAside("kept out by the preflight");
  requalified.OnStandby();
  EXPECT_TRUE(requalified.standby());
  EXPECT_EQ(requalified.OnClosed(absl::OkStatus(), std::nullopt).at(0).exit_code, kExitSuccess);
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

// --restart-mode=in-process (docs/design.md §6b): when every live worker speaks the control
// protocol, a failure or a restart ends the round for the survivors (abort) instead of stopping
// them, and the next assignment re-forms them, starting only the missing local ranks.

rendezvous::Assignment RoundAssignment(int64_t round) {
  rendezvous::Assignment a;
  a.round = round;
  a.world_size = 3;
  a.restart_count = static_cast<int>(round);
  a.max_restarts = 10;
  return a;
}

WorkerExit ExitOf(int local_rank, int code, int signal = 0) {
  WorkerExit e;
  e.local_rank = local_rank;
  e.rank = local_rank;
  e.pid = 1000 + local_rank;
  e.exit_code = code;
  e.signal = signal;
  return e;
}

std::vector<Type> TypesOf(const std::vector<AgentAction>& actions) {
  std::vector<Type> types;
  for (const AgentAction& a : actions) types.push_back(a.type);
  return types;
}

// A machine in in-process mode, running round 0 with every local worker speaking.
AgentStateMachine SpeakingGroup(int nproc) {
  AgentStateMachine sm(nproc, RestartMode::kInProcess);
  EXPECT_EQ(TypesOf(sm.OnAssignment(RoundAssignment(0))), std::vector<Type>{Type::kStartWorkers});
  for (int lr = 0; lr < nproc; ++lr) sm.OnWorkerSpeaks(lr);
  return sm;
}

using Phase = AgentStateMachine::Phase;

TEST(AgentStateInProcessTest, AFailureWithEverySurvivorSpeakingAbortsTheRound) {
  AgentStateMachine sm = SpeakingGroup(3);
  EXPECT_TRUE(sm.Speaks(0));
  auto actions = sm.OnWorkerExited(ExitOf(1, 7));
  ASSERT_EQ(TypesOf(actions), (std::vector<Type>{Type::kReportFailed, Type::kAbortRound}));
  EXPECT_EQ(actions[0].round, 0);
  EXPECT_EQ(actions[0].failure.local_rank, 1);
  EXPECT_EQ(actions[0].failure.exit_code, 7);
  EXPECT_EQ(actions[1].round, 0);
  EXPECT_EQ(actions[1].message, "a worker failed");
  EXPECT_EQ(sm.phase(), Phase::kAwaitingRound);
  EXPECT_EQ(sm.live_workers(), 2);
  ASSERT_TRUE(sm.root_cause().has_value());
  EXPECT_EQ(sm.root_cause()->local_rank, 1);
}

TEST(AgentStateInProcessTest, TheNextAssignmentReformsStartingExactlyTheDeadRanks) {
  AgentStateMachine sm = SpeakingGroup(4);
  sm.OnWorkerExited(ExitOf(1, 1));
  // Another dies between rounds: no report (its round is already over), but it is replaced.
  EXPECT_TRUE(sm.OnWorkerExited(ExitOf(3, 0, SIGSEGV)).empty());
  EXPECT_TRUE(sm.OnWorkerExited(ExitOf(3, 0, SIGSEGV)).empty());  // counted once
  EXPECT_EQ(sm.live_workers(), 2);
  auto actions = sm.OnAssignment(RoundAssignment(1));
  ASSERT_EQ(TypesOf(actions), std::vector<Type>{Type::kReformWorkers});
  EXPECT_EQ(actions[0].assignment.round, 1);
  EXPECT_EQ(actions[0].local_ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(sm.phase(), Phase::kRunning);
  EXPECT_EQ(sm.round(), 1);
  EXPECT_EQ(sm.live_workers(), 4);
  // The replacements are new processes: they speak once they say hello themselves.
  EXPECT_TRUE(sm.Speaks(0));
  EXPECT_FALSE(sm.Speaks(1));
  EXPECT_TRUE(sm.Speaks(2));
  EXPECT_FALSE(sm.Speaks(3));
  // The failed attempt is the previous one now.
  EXPECT_FALSE(sm.root_cause().has_value());
  ASSERT_TRUE(sm.previous_root_cause().has_value());
  EXPECT_EQ(sm.previous_root_cause()->local_rank, 1);
}

// Two speaking workers; local rank 0 failed and round 1 re-formed with its replacement, which has
// not said hello yet.
AgentStateMachine ReformedForRank0() {
  AgentStateMachine sm = SpeakingGroup(2);
  sm.OnWorkerExited(ExitOf(0, 1));
  sm.OnAssignment(RoundAssignment(1));
  return sm;
}

TEST(AgentStateInProcessTest, AReformedGroupRecoversInProcessAgainOnceTheNewWorkersSpeak) {
  AgentStateMachine sm = ReformedForRank0();
  // The replacement of local rank 0 has not said hello yet: a failure now is cold.
  auto cold = sm.OnWorkerExited(ExitOf(1, 1));
  EXPECT_EQ(TypesOf(cold), (std::vector<Type>{Type::kReportFailed, Type::kStopWorkers}));
  EXPECT_EQ(sm.phase(), Phase::kStopping);

  AgentStateMachine warm = ReformedForRank0();
  warm.OnWorkerSpeaks(0);
  auto actions = warm.OnWorkerExited(ExitOf(1, 1));
  EXPECT_EQ(TypesOf(actions), (std::vector<Type>{Type::kReportFailed, Type::kAbortRound}));
  EXPECT_EQ(actions[1].round, 1);
  EXPECT_EQ(warm.OnAssignment(RoundAssignment(2)).at(0).local_ranks, std::vector<int>{1});
}

TEST(AgentStateInProcessTest, ALiveWorkerThatDoesNotSpeakMeansAColdRestart) {
  AgentStateMachine sm(3, RestartMode::kInProcess);
  sm.OnAssignment(RoundAssignment(0));
  sm.OnWorkerSpeaks(0);
  sm.OnWorkerSpeaks(1);  // local rank 2 never says hello
  auto actions = sm.OnWorkerExited(ExitOf(0, 1));
  ASSERT_EQ(TypesOf(actions), (std::vector<Type>{Type::kReportFailed, Type::kStopWorkers}));
  EXPECT_EQ(actions[1].local_rank, -1);  // all of them
  EXPECT_EQ(actions[1].stop_mode, StopMode::kGracefully);
  EXPECT_EQ(sm.phase(), Phase::kStopping);
  // Then as in cold mode: the group stops, the next assignment starts every worker.
  EXPECT_TRUE(sm.OnWorkerExited(ExitOf(1, 0, SIGTERM)).empty());
  EXPECT_TRUE(sm.OnWorkerExited(ExitOf(2, 0, SIGTERM)).empty());
  EXPECT_EQ(sm.phase(), Phase::kRendezvous);
  EXPECT_EQ(TypesOf(sm.OnAssignment(RoundAssignment(1))), std::vector<Type>{Type::kStartWorkers});
  EXPECT_FALSE(sm.Speaks(0));  // new processes
  // A restart notice and a new round while running are cold too.
  EXPECT_EQ(TypesOf(sm.OnRestart("node 2 joined", std::nullopt)),
            std::vector<Type>{Type::kStopWorkers});
  AgentStateMachine running(2, RestartMode::kInProcess);
  running.OnAssignment(RoundAssignment(0));
  running.OnWorkerSpeaks(1);
  EXPECT_EQ(TypesOf(running.OnAssignment(RoundAssignment(1))),
            std::vector<Type>{Type::kStopWorkers});
}

TEST(AgentStateInProcessTest, ARestartNoticeAbortsTheRoundAndTheAssignmentReformsEveryone) {
  AgentStateMachine sm = SpeakingGroup(2);
  auto actions = sm.OnRestart("node n3 joined", std::nullopt);
  ASSERT_EQ(TypesOf(actions), std::vector<Type>{Type::kAbortRound});
  EXPECT_EQ(actions[0].round, 0);
  EXPECT_EQ(actions[0].message, "node n3 joined");
  EXPECT_EQ(sm.phase(), Phase::kAwaitingRound);
  EXPECT_TRUE(sm.OnRestart("again", std::nullopt).empty());  // already over
  // A hang elsewhere: nothing of ours hung, so no stacks and no stop here either.
  AgentStateMachine other = SpeakingGroup(2);
  EXPECT_EQ(TypesOf(other.OnRestart("rank 7 on n2 hung", rendezvous::HangNotice{})),
            std::vector<Type>{Type::kAbortRound});
  actions = sm.OnAssignment(RoundAssignment(1));
  ASSERT_EQ(TypesOf(actions), std::vector<Type>{Type::kReformWorkers});
  EXPECT_TRUE(actions[0].local_ranks.empty());  // every worker survives
  EXPECT_TRUE(sm.Speaks(0));
  EXPECT_TRUE(sm.Speaks(1));
}

TEST(AgentStateInProcessTest, AnAssignmentWhileRunningAbortsThenReforms) {
  AgentStateMachine sm = SpeakingGroup(2);
  auto actions = sm.OnAssignment(RoundAssignment(4));
  ASSERT_EQ(TypesOf(actions), (std::vector<Type>{Type::kAbortRound, Type::kReformWorkers}));
  EXPECT_EQ(actions[0].round, 0);  // the round that is over
  EXPECT_EQ(actions[1].assignment.round, 4);
  EXPECT_TRUE(actions[1].local_ranks.empty());
  EXPECT_EQ(sm.phase(), Phase::kRunning);
  EXPECT_EQ(sm.round(), 4);
}

TEST(AgentStateInProcessTest, AHungWorkerIsStoppedAloneAndTheRoundWaitsForItsExit) {
  AgentStateMachine sm = SpeakingGroup(3);
  WorkerExit hung = ExitOf(2, 0);
  hung.hang = "no progress for 30.0 s";
  auto actions = sm.OnHang(hung, SIGKILL);
  ASSERT_EQ(TypesOf(actions),
            (std::vector<Type>{Type::kReportFailed, Type::kStopWorkers, Type::kAbortRound}));
  EXPECT_EQ(actions[0].failure.hang, hung.hang);
  EXPECT_EQ(actions[1].local_rank, 2);  // only the hung worker
  EXPECT_EQ(actions[1].stop_mode, StopMode::kTakeStacksFirst);
  EXPECT_EQ(actions[1].hang_signal, SIGKILL);
  EXPECT_EQ(actions[1].failure.local_rank, 2);
  EXPECT_EQ(actions[2].message, "a worker hung");
  EXPECT_EQ(sm.phase(), Phase::kAwaitingRound);
  EXPECT_TRUE(sm.OnHang(hung, SIGKILL).empty());  // waiting is no hang
  // The next round comes before the hung worker is gone: its replacement must not run beside
  // it, so the round waits.
  EXPECT_TRUE(sm.OnAssignment(RoundAssignment(1)).empty());
  EXPECT_EQ(sm.phase(), Phase::kAwaitingRound);
  // A survivor dies meanwhile: still waiting for the hung one. Its death is listed; the hung
  // worker's kill is not a failure of its own.
  EXPECT_TRUE(sm.OnWorkerExited(ExitOf(0, 1)).empty());
  ASSERT_EQ(sm.other_failures().size(), 1u);
  EXPECT_EQ(sm.other_failures()[0].local_rank, 0);
  actions = sm.OnWorkerExited(ExitOf(2, 0, SIGKILL));
  ASSERT_EQ(TypesOf(actions), std::vector<Type>{Type::kReformWorkers});
  EXPECT_EQ(actions[0].assignment.round, 1);
  EXPECT_EQ(actions[0].local_ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(sm.phase(), Phase::kRunning);
  ASSERT_TRUE(sm.previous_root_cause().has_value());
  EXPECT_EQ(sm.previous_root_cause()->hang, hung.hang);
}

TEST(AgentStateInProcessTest, AHungWorkerGoneBeforeTheAssignmentLetsItReformAtOnce) {
  AgentStateMachine sm = SpeakingGroup(2);
  WorkerExit hung = ExitOf(0, 0);
  hung.hang = "FileTimer scope expired";
  sm.OnHang(hung, 0);
  EXPECT_TRUE(sm.OnWorkerExited(ExitOf(0, 0, SIGABRT)).empty());
  EXPECT_TRUE(sm.other_failures().empty());  // our own stop, not another failure
  auto actions = sm.OnAssignment(RoundAssignment(1));
  ASSERT_EQ(TypesOf(actions), std::vector<Type>{Type::kReformWorkers});
  EXPECT_EQ(actions[0].local_ranks, std::vector<int>{0});
}

TEST(AgentStateInProcessTest, ExitsBetweenRoundsAreNotReportedButListed) {
  AgentStateMachine sm = SpeakingGroup(3);
  sm.OnWorkerExited(ExitOf(0, 1));
  EXPECT_TRUE(sm.OnWorkerExited(ExitOf(1, 3)).empty());  // no second kReportFailed
  EXPECT_TRUE(sm.OnWorkerExited(ExitOf(2, 0)).empty());  // even a clean exit is replaced
  ASSERT_EQ(sm.other_failures().size(), 1u);
  EXPECT_EQ(sm.other_failures()[0].local_rank, 1);
  EXPECT_EQ(sm.live_workers(), 0);
  EXPECT_EQ(sm.phase(), Phase::kAwaitingRound);
  EXPECT_EQ(sm.OnAssignment(RoundAssignment(1)).at(0).local_ranks, (std::vector<int>{0, 1, 2}));
}

TEST(AgentStateInProcessTest, ACloseWhileAwaitingStopsEverySurvivorAndExitsWithItsCode) {
  AgentStateMachine sm = SpeakingGroup(2);
  sm.OnWorkerExited(ExitOf(0, 1));
  auto actions = sm.OnClosed(absl::ResourceExhaustedError("restart budget spent"), std::nullopt);
  ASSERT_EQ(TypesOf(actions), std::vector<Type>{Type::kStopWorkers});
  EXPECT_EQ(actions[0].local_rank, -1);
  EXPECT_EQ(sm.phase(), Phase::kStopping);
  EXPECT_TRUE(sm.OnAssignment(RoundAssignment(1)).empty());  // too late: the exit wins
  actions = sm.OnWorkerExited(ExitOf(1, 0, SIGTERM));
  ASSERT_EQ(TypesOf(actions), std::vector<Type>{Type::kExit});
  EXPECT_EQ(actions[0].exit_code, kExitWorkersFailed);
  EXPECT_EQ(sm.phase(), Phase::kDone);
  // With no survivor left there is nothing to stop.
  AgentStateMachine empty = SpeakingGroup(1);
  empty.OnWorkerExited(ExitOf(0, 1));
  actions = empty.OnClosed(absl::UnavailableError("server lost"), std::nullopt);
  ASSERT_EQ(TypesOf(actions), std::vector<Type>{Type::kExit});
  EXPECT_EQ(actions[0].exit_code, kExitRendezvous);
}

TEST(AgentStateInProcessTest, AStopSignalWhileAwaitingLeavesStopsAndExits128PlusN) {
  AgentStateMachine sm = SpeakingGroup(2);
  WorkerExit hung = ExitOf(1, 0);
  hung.hang = "no progress";
  sm.OnHang(hung, 0);
  sm.OnAssignment(RoundAssignment(1));  // held until the hung worker exits
  auto actions = sm.OnStopSignal(SIGTERM);
  ASSERT_EQ(TypesOf(actions), (std::vector<Type>{Type::kLeave, Type::kStopWorkers}));
  EXPECT_EQ(actions[1].local_rank, -1);
  EXPECT_EQ(sm.phase(), Phase::kStopping);
  EXPECT_TRUE(sm.OnWorkerExited(ExitOf(1, 0, SIGKILL)).empty());  // no re-form now
  actions = sm.OnWorkerExited(ExitOf(0, 0, SIGTERM));
  ASSERT_EQ(TypesOf(actions), std::vector<Type>{Type::kExit});
  EXPECT_EQ(actions[0].exit_code, 128 + SIGTERM);
}

TEST(AgentStateInProcessTest, AHungWorkerStoppedByACloseIsNotAnotherFailure) {
  AgentStateMachine sm = SpeakingGroup(2);
  WorkerExit hung = ExitOf(1, 0);
  hung.hang = "no progress";
  sm.OnHang(hung, 0);
  // The run closes while its stacks are being taken: the group stops gracefully, but the hung
  // worker's SIGABRT (ours, for the stacks) is still not a failure of its own.
  sm.OnClosed(absl::ResourceExhaustedError("restart budget spent"), std::nullopt);
  EXPECT_TRUE(sm.OnWorkerExited(ExitOf(1, 0, SIGABRT)).empty());
  EXPECT_EQ(TypesOf(sm.OnWorkerExited(ExitOf(0, 0, SIGTERM))), std::vector<Type>{Type::kExit});
  ASSERT_TRUE(sm.root_cause().has_value());
  EXPECT_EQ(sm.root_cause()->local_rank, 1);
  EXPECT_TRUE(sm.other_failures().empty());
}

TEST(AgentStateInProcessTest, EveryWorkerSucceedingEndsTheRunAsInColdMode) {
  AgentStateMachine sm = SpeakingGroup(2);
  EXPECT_TRUE(sm.OnWorkerExited(ExitOf(0, 0)).empty());
  auto actions = sm.OnWorkerExited(ExitOf(1, 0));
  EXPECT_EQ(TypesOf(actions), (std::vector<Type>{Type::kReportSucceeded, Type::kExit}));
  EXPECT_EQ(actions[1].exit_code, kExitSuccess);
}

// Issue 40: the round was re-formed for a replacement, and every other rank waits for it there;
// one that exits 0 before its hello never joined it. That is a failure (restarted as any other),
// not one of the node's workers done. Once it has said hello, exit 0 is a success again; a
// worker of a cold start, of which no hello is expected, succeeds with exit 0 before any.
TEST(AgentStateInProcessTest, AReplacementThatExitsZeroBeforeItsHelloFailed) {
  AgentStateMachine sm = ReformedForRank0();
  auto actions = sm.OnWorkerExited(ExitOf(0, 0));
  ASSERT_EQ(TypesOf(actions), (std::vector<Type>{Type::kReportFailed, Type::kStopWorkers}));
  EXPECT_EQ(actions[0].failure.local_rank, 0);
  EXPECT_EQ(actions[0].failure.never_started, NeverStarted::kNoHello);
  EXPECT_FALSE(actions[0].failure.ok());
  ASSERT_TRUE(sm.root_cause().has_value());
  EXPECT_EQ(sm.root_cause()->never_started, NeverStarted::kNoHello);

  AgentStateMachine spoke = ReformedForRank0();
  spoke.OnWorkerSpeaks(0);
  EXPECT_TRUE(spoke.OnWorkerExited(ExitOf(0, 0)).empty());
  EXPECT_EQ(TypesOf(spoke.OnWorkerExited(ExitOf(1, 0))),
            (std::vector<Type>{Type::kReportSucceeded, Type::kExit}));

  AgentStateMachine first(2, RestartMode::kInProcess);
  first.OnAssignment(RoundAssignment(0));
  EXPECT_TRUE(first.OnWorkerExited(ExitOf(0, 0)).empty());
  EXPECT_EQ(TypesOf(first.OnWorkerExited(ExitOf(1, 0))),
            (std::vector<Type>{Type::kReportSucceeded, Type::kExit}));
}

// A spare that never read the start handed to it (WorkerExit::never_started, from the worker
// group) failed, whatever the mode: reported as the root cause, never as the node's success.
TEST(AgentStateTest, AnExitZeroOfAWorkerThatNeverReadItsHandOverIsAFailure) {
  for (RestartMode mode : {RestartMode::kCold, RestartMode::kInProcess}) {
    AgentStateMachine sm(1, mode);
    sm.OnAssignment(RoundAssignment(0));
    WorkerExit exit = ExitOf(0, 0);
    exit.never_started = NeverStarted::kHandOverUnread;
    auto actions = sm.OnWorkerExited(exit);
    ASSERT_FALSE(actions.empty());
    EXPECT_EQ(actions[0].type, Type::kReportFailed);
    for (const AgentAction& a : actions) EXPECT_NE(a.type, Type::kReportSucceeded);
    ASSERT_TRUE(sm.root_cause().has_value());
    EXPECT_EQ(sm.root_cause()->never_started, NeverStarted::kHandOverUnread);
  }
}

TEST(AgentStateInProcessTest, ColdModeIgnoresSpeakers) {
  AgentStateMachine sm(2);  // --restart-mode=cold, the default
  sm.OnAssignment(RoundAssignment(0));
  sm.OnWorkerSpeaks(0);
  sm.OnWorkerSpeaks(1);
  auto actions = sm.OnWorkerExited(ExitOf(1, 1));
  ASSERT_EQ(TypesOf(actions), (std::vector<Type>{Type::kReportFailed, Type::kStopWorkers}));
  EXPECT_EQ(actions[1].local_rank, -1);
  EXPECT_EQ(sm.phase(), Phase::kStopping);
  sm.OnWorkerExited(ExitOf(0, 0, SIGTERM));
  EXPECT_EQ(TypesOf(sm.OnAssignment(RoundAssignment(1))), std::vector<Type>{Type::kStartWorkers});
  // A hang stops everyone, stacks first; a new round while running stops the group.
  sm.OnWorkerSpeaks(0);
  sm.OnWorkerSpeaks(1);
  WorkerExit hung = ExitOf(0, 0);
  hung.hang = "no progress";
  actions = sm.OnHang(hung, 0);
  ASSERT_EQ(TypesOf(actions), (std::vector<Type>{Type::kReportFailed, Type::kStopWorkers}));
  EXPECT_EQ(actions[1].local_rank, -1);
  EXPECT_EQ(actions[1].stop_mode, StopMode::kTakeStacksFirst);
  AgentStateMachine restarted(1);
  restarted.OnAssignment(RoundAssignment(0));
  restarted.OnWorkerSpeaks(0);
  EXPECT_EQ(TypesOf(restarted.OnRestart("node 2 joined", std::nullopt)),
            std::vector<Type>{Type::kStopWorkers});
  AgentStateMachine reassigned(1);
  reassigned.OnAssignment(RoundAssignment(0));
  reassigned.OnWorkerSpeaks(0);
  EXPECT_EQ(TypesOf(reassigned.OnAssignment(RoundAssignment(1))),
            std::vector<Type>{Type::kStopWorkers});
}

TEST(AgentStateTest, CloseCodes) {
  EXPECT_EQ(AgentStateMachine::ExitCodeForClose(absl::OkStatus()), 0);
  EXPECT_EQ(AgentStateMachine::ExitCodeForClose(absl::ResourceExhaustedError("x")), 1);
  EXPECT_EQ(AgentStateMachine::ExitCodeForClose(absl::UnauthenticatedError("x")), 3);
  EXPECT_EQ(AgentStateMachine::ExitCodeForClose(absl::DeadlineExceededError("x")), 3);
}

// kAborted alone is no crash loop (a stale round is kAborted too): only the breaker's marked
// close exits 4.
TEST(AgentStateTest, TheCrashLoopCloseIsToldApartFromAnotherAborted) {
  EXPECT_EQ(AgentStateMachine::ExitCodeForClose(rendezvous::CrashLoopStop(
                rendezvous::CrashLoopMessage("exit code 1 (exit): boom"))),
            kExitCrashLoop);
  EXPECT_EQ(AgentStateMachine::ExitCodeForClose(
                absl::AbortedError("status for round 3 but the run is at round 4 (running)")),
            kExitRendezvous);
}

}  // namespace
}  // namespace ddprun::launcher
