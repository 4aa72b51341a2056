#include "launcher/agent/in_process_rounds.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace ddprun::launcher {

absl::StatusOr<std::unique_ptr<InProcessRounds>> InProcessRounds::Start(
    EventLoop* loop, int nproc_per_node, std::chrono::milliseconds reform_timeout,
    const std::string& socket_path, Hooks hooks) {
  std::unique_ptr<InProcessRounds> rounds(
      new InProcessRounds(loop, nproc_per_node, reform_timeout, std::move(hooks)));
  auto server = ControlServer::Listen(loop, socket_path, rounds.get());
  if (!server.ok()) return server.status();
  rounds->server_ = *std::move(server);
  return rounds;
}

InProcessRounds::InProcessRounds(EventLoop* loop, int nproc,
                                 std::chrono::milliseconds reform_timeout, Hooks hooks)
    : loop_(loop),
      nproc_(nproc),
      reform_timeout_(reform_timeout),
      hooks_(std::move(hooks)),
      ranks_(nproc) {}

InProcessRounds::~InProcessRounds() {
  for (int lr = 0; lr < nproc_; ++lr) CancelDeadline(lr);
}

control::RoundMessage InProcessRounds::RoundFor(int lr) const {
  control::RoundMessage m;
  m.round = round_.round;
  m.rank = round_.rank_offset + lr;
  m.world_size = round_.world_size;
  m.local_rank = lr;
  m.local_world_size = nproc_;
  m.group_rank = round_.group_rank;
  m.group_world_size = round_.group_world_size;
  m.master_addr = round_.master_addr;
  m.master_port = round_.master_port;
  m.restart_count = round_.restart_count;
  m.store_prefix = control::RoundStorePrefix(round_.round);
  m.deadline_ms = reform_timeout_.count();
  return m;
}

void InProcessRounds::CancelDeadline(int lr) {
  if (ranks_[lr].deadline != 0) loop_->CancelTimer(ranks_[lr].deadline);
  ranks_[lr].deadline = 0;
}

void InProcessRounds::SendRound(int lr) {
  ranks_[lr].ready = false;
  CancelDeadline(lr);
  if (!server_->Send(lr, RoundFor(lr))) return;  // its exit, or the closed channel, follows
  ArmDeadline(lr, round_.round);
}

void InProcessRounds::ArmDeadline(int lr, int64_t round) {
  CancelDeadline(lr);
  ranks_[lr].deadline = loop_->AddTimerAfter(reform_timeout_, [this, lr, round] {
    PerRank& r = ranks_[lr];
    r.deadline = 0;
    if (r.ready || round != round_.round) return;
    r.kill_reason = absl::StrCat("did not re-form round ", round, " within ",
                                 std::chrono::duration<double>(reform_timeout_).count(),
                                 " s (--reform-timeout)");
    LogWarning(absl::StrCat("local rank ", lr, " ", r.kill_reason, "; killing it"));
    hooks_.kill_worker(lr);
  });
}

void InProcessRounds::OnChannelBroken(int lr, const std::string& why) {
  if (lr < 0 || lr >= nproc_) return;
  CancelDeadline(lr);
  ranks_[lr].kill_reason = absl::StrCat("its control channel broke (", why, ")");
  LogWarning(absl::StrCat("local rank ", lr, ": ", ranks_[lr].kill_reason,
                          "; it cannot re-form: killing it"));
  hooks_.kill_worker(lr);
}

void InProcessRounds::OnGroupReplaced() {
  for (int lr = 0; lr < nproc_; ++lr) {
    server_->Disconnect(lr);
    CancelDeadline(lr);
    ranks_[lr] = PerRank{};
  }
  have_round_ = false;
}

void InProcessRounds::BeginRound(const rendezvous::Assignment& a, const std::vector<int>& kept,
                                 const std::vector<int>& started) {
  round_ = a;
  have_round_ = true;
  for (int lr = 0; lr < nproc_; ++lr) {
    ranks_[lr].ready = false;
    ranks_[lr].step = -1;
    if (ranks_[lr].stale_readies > 1) {
      LogWarning(absl::StrCat("local rank ", lr, ": ", ranks_[lr].stale_readies - 1,
                              " more stale ready message(s) ignored"));
    }
    ranks_[lr].stale_readies = 0;
  }
  for (int lr : kept) SendRound(lr);
  for (int lr : started) {
    ranks_[lr].kill_reason.clear();
    ArmDeadline(lr, round_.round);
  }
}

void InProcessRounds::Abort(int64_t round, const std::string& why) {
  control::AbortMessage abort;
  abort.round = round;
  abort.reason = why;
  // A ready for the aborted round, already on its way, must not count as restored state.
  if (round == round_.round) have_round_ = false;
  for (int lr = 0; lr < nproc_; ++lr) {
    CancelDeadline(lr);
    server_->Send(lr, abort);
  }
}

void InProcessRounds::OnWorkerExited(int lr) {
  if (lr < 0 || lr >= nproc_) return;
  CancelDeadline(lr);
  server_->Disconnect(lr);
}

std::string InProcessRounds::KillReason(int lr) const {
  return lr >= 0 && lr < nproc_ ? ranks_[lr].kill_reason : "";
}

int64_t InProcessRounds::IgnoredReadies(int lr) const {
  return lr >= 0 && lr < nproc_ ? ranks_[lr].ignored_readies : 0;
}

pid_t InProcessRounds::WorkerOf(pid_t peer_pid) {
  const int lr = hooks_.local_rank_of_pid(peer_pid);
  const pid_t worker = lr >= 0 && lr < nproc_ && hooks_.worker_pid ? hooks_.worker_pid(lr) : 0;
  return worker > 0 ? worker : 0;
}

std::string InProcessRounds::CheckHello(const control::HelloMessage& hello, pid_t peer_pid) {
  if (hello.local_rank >= nproc_) {
    return absl::StrCat("local rank ", hello.local_rank,
                        " does not exist (--nproc-per-node=", nproc_, ")");
  }
  const int actual = hooks_.local_rank_of_pid(peer_pid);
  if (actual != hello.local_rank) {
    return absl::StrCat("pid ", peer_pid, " said it is local rank ", hello.local_rank,
                        actual < 0 ? ", but it is no worker of this node (nor a descendant "
                                     "of one)"
                                   : absl::StrCat(", but it belongs to local rank ", actual));
  }
  ranks_[hello.local_rank].takes_advice = hello.advice;
  return "";
}

void InProcessRounds::Advise(double checkpoint_interval_s) {
  for (int lr = 0; lr < nproc_; ++lr) {
    if (ranks_[lr].takes_advice && server_->Connected(lr)) {
      server_->Send(lr, control::AdviceMessage{checkpoint_interval_s});
    }
  }
}

void InProcessRounds::OnHello(int lr) {
  ranks_[lr].kill_reason.clear();
  hooks_.on_speaks(lr);
  // Between rounds the next round message comes with BeginRound.
  if (have_round_ && hooks_.round_running()) SendRound(lr);
}

void InProcessRounds::OnReady(int lr, const control::ReadyMessage& ready) {
  if (!have_round_ || ready.round != round_.round) {
    // Logged once per round and rank: a worker repeating it must not fill the log.
    ++ranks_[lr].ignored_readies;
    if (ranks_[lr].stale_readies++ == 0) {
      LogWarning(absl::StrCat("local rank ", lr, " said ready for round ", ready.round,
                              ", but the current round is ", round_.round,
                              "; ignored (stale; more of these are counted, not logged)"));
    }
    return;
  }
  PerRank& r = ranks_[lr];
  CancelDeadline(lr);
  if (r.ready) return;
  r.ready = true;
  r.step = ready.step;
  for (const PerRank& other : ranks_) {
    if (!other.ready) return;
  }
  int64_t step = -1;
  for (const PerRank& other : ranks_) step = std::max(step, other.step);
  hooks_.on_all_ready(round_.round, step);
}

}  // namespace ddprun::launcher
