// The agent's half of in-process recovery (docs/design.md §6b), apart from the decisions, which
// are AgentStateMachine's: the control channel's server, the round message each worker gets,
// the abort to the survivors, and the deadline between a round message and the worker's ready
// (a worker that misses it is killed: its exit is then a failure like any other).
//
// Single-threaded: every method runs on the agent's EventLoop thread.
#ifndef DDPRUN_LAUNCHER_AGENT_IN_PROCESS_ROUNDS_H_
#define DDPRUN_LAUNCHER_AGENT_IN_PROCESS_ROUNDS_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/event_loop.h"
#include "control/control_message.h"
#include "launcher/control/control_server.h"
#include "rendezvous/api/rendezvous.h"

namespace ddprun::launcher {

class InProcessRounds final : public ControlServer::Listener {
 public:
  struct Hooks {
    // The local rank whose current worker is `pid` or an ancestor of it (its process tree,
    // not merely its process group, which any process of the session may join); -1: none.
    std::function<int(pid_t pid)> local_rank_of_pid;
    // The pid of the current worker of a local rank (0: none).
    std::function<pid_t(int local_rank)> worker_pid;
    // A worker said hello (AgentStateMachine::OnWorkerSpeaks).
    std::function<void(int local_rank)> on_speaks;
    // Whether the round of the last BeginRound is still the current one (not aborted).
    std::function<bool()> round_running;
    // SIGKILLs the worker of a local rank (it missed its deadline).
    std::function<void(int local_rank)> kill_worker;
    // Every local worker of `round` is ready, holding the state of `step`.
    std::function<void(int64_t round, int64_t step)> on_all_ready;
  };

  // Listens at `socket_path`.
  ~InProcessRounds() override;
  static absl::StatusOr<std::unique_ptr<InProcessRounds>> Start(
      EventLoop* loop, int nproc_per_node, std::chrono::milliseconds reform_timeout,
      const std::string& socket_path, Hooks hooks);

  // DDPRUN_CONTROL_SOCKET of every worker.
  const std::string& socket_path() const { return server_->path(); }

  // A new worker group replaces the old one (a cold start): every channel goes.
  void OnGroupReplaced();
  // Round `a` begins: the workers of `kept` (survivors, already speaking) get their round
  // message now; a worker started for it gets the message in reply to its hello. `started`:
  // replacements started for an in-process re-formation, whose deadline runs from now (a
  // replacement that never says hello must not hold the survivors forever); empty at a cold
  // start, where a worker that never speaks is simply a cold worker.
  void BeginRound(const rendezvous::Assignment& a, const std::vector<int>& kept,
                  const std::vector<int>& started = {});
  // The current round is over: abort to every speaking worker; no deadline runs meanwhile.
  void Abort(int64_t round, const std::string& why);
  void OnWorkerExited(int local_rank);
  // The run's checkpoint advice changed: to every worker that speaks and takes advice.
  void Advise(double checkpoint_interval_s);
  // Why the worker of `local_rank` was killed by this class ("" when it was not).
  std::string KillReason(int local_rank) const;
  // Stale ready messages of `local_rank` ignored since its worker group started.
  int64_t IgnoredReadies(int local_rank) const;

  // ControlServer::Listener
  pid_t WorkerOf(pid_t peer_pid) override;
  std::string CheckHello(const control::HelloMessage& hello, pid_t peer_pid) override;
  void OnHello(int local_rank) override;
  void OnReady(int local_rank, const control::ReadyMessage& ready) override;
  void OnChannelBroken(int local_rank, const std::string& why) override;

 private:
  InProcessRounds(EventLoop* loop, int nproc, std::chrono::milliseconds reform_timeout,
                  Hooks hooks);
  control::RoundMessage RoundFor(int local_rank) const;
  void SendRound(int local_rank);
  void CancelDeadline(int local_rank);
  // Kills `local_rank`'s worker unless it is ready for `round` when the deadline comes.
  void ArmDeadline(int local_rank, int64_t round);

  EventLoop* loop_;
  const int nproc_;
  const std::chrono::milliseconds reform_timeout_;
  Hooks hooks_;
  std::unique_ptr<ControlServer> server_;
  rendezvous::Assignment round_{};
  bool have_round_ = false;
  struct PerRank {
    EventLoop::TimerId deadline = 0;
    bool ready = false;
    int64_t step = -1;
    std::string kill_reason;
    int64_t stale_readies = 0;    // since the last round began: the first is logged
    int64_t ignored_readies = 0;  // stale ones, in all
    bool takes_advice = false;    // its hello said so (control::HelloMessage::advice)
  };
  std::vector<PerRank> ranks_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_AGENT_IN_PROCESS_ROUNDS_H_
