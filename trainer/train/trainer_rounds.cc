// The Trainer's side of in-process recovery (docs/design.md §6b), apart from the cold path in
// trainer.cc: the control channel, joining a round (group, state agreement, ready) and leaving
// one after a failure.
#include <torch/torch.h>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "trainer/train/state_sync.h"
#include "trainer/train/trainer.h"

namespace ddprun::trainer {
namespace {

// What a collective returns when a peer is gone or the round ended under it.
bool CollectiveFailed(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded || s.code() == absl::StatusCode::kAborted;
}

// How long a worker waits for the next round: the last round's deadline (ddprun's
// --reform-timeout); an agent that sent none gets ddprun's default.
absl::Duration NextRoundTimeout(const control::RoundMessage& round) {
  return round.deadline_ms > 0 ? absl::Milliseconds(round.deadline_ms) : absl::Seconds(60);
}

double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

absl::Status Trainer::ConnectControl(const CommOptions& comm_options) {
  DDPRUN_ASSIGN_OR_RETURN(control_,
                          control::ControlClient::Connect(env_.control_socket, env_.local_rank,
                                                          absl::FromChrono(comm_options.timeout)));
  rounds_ = std::make_unique<RoundGroup>(control_.get(), comm_options);
  return absl::OkStatus();
}

absl::Status Trainer::JoinRounds(control::RoundMessage round) {
  while (true) {
    absl::Status s = JoinRound(round);
    if (s.ok()) return s;
    DDPRUN_ASSIGN_OR_RETURN(round, NextRound(s));
  }
}

absl::Status Trainer::JoinRound(const control::RoundMessage& round) {
  const auto t0 = Clock::now();
  const int was_rank = round_.rank;  // in the last round this process took part in
  round_ = round;
  restart_count_ = round.restart_count;
  DDPRUN_ASSIGN_OR_RETURN(comm_, rounds_->Form(RoundEnv(env_, round), round.round));
  // Every rank, new or surviving, makes the same collectives from here on, in this order.
  DDPRUN_ASSIGN_OR_RETURN(StateSource source,
                          AgreeOnStateSource({has_state_ ? state_.global_step : -1, joined_once_},
                                             comm_.get(), device_));
  for (const auto& [rank, why] : source.refused) {
    Log(absl::StrFormat("round %d: the state of rank %d is not taken: it %s", round.round, rank,
                        why));
  }
  // A process's first round: the local setup and its checks as at a cold start, except that a
  // run whose state the others hold makes --resume / --no-resume moot.
  absl::Status local;
  if (!set_up_) {
    local = SetupLocal(/*fresh_start=*/source.rank < 0);
    set_up_ = local.ok();
  }
  DDPRUN_RETURN_IF_ERROR(AgreeOnSetup(local));
  if (!built_) {
    torch::manual_seed(options_.seed);
    DDPRUN_RETURN_IF_ERROR(BuildModel());
    built_ = true;
  }
  NewSynchronizer();
  if (source.rank < 0) {
    DDPRUN_RETURN_IF_ERROR(ResumeOrBroadcast());
  } else {
    const auto t1 = Clock::now();
    DDPRUN_ASSIGN_OR_RETURN(
        int64_t bytes, SyncStateFrom(
                           source, comm_.get(), device_,
                           [this] {
                             state_.world_size = world();
                             return Serialize();
                           },
                           [this](absl::string_view payload) { return RestoreFromPeer(payload); }));
    Log(
        absl::StrFormat("round %d: the state of step %d (epoch %d, sample offset %d) from rank "
                        "%d to %d ranks (%.1f MB, %.1f ms)",
                        round.round, state_.global_step, state_.epoch, state_.epoch_offset,
                        source.rank, world(), bytes / 1e6, MsSince(t1)));
  }
  has_state_ = true;
  DDPRUN_RETURN_IF_ERROR(control_->SendReady(round.round, state_.global_step));
  if (!joined_once_) {
    Log(Banner());
  } else {
    log_ << absl::StrFormat("rank %d: round %d: re-formed as rank %d of %d at step %d (%.0f ms)",
                            was_rank, round.round, comm_->rank(), world(), state_.global_step,
                            MsSince(t0))
         << std::endl;
  }
  joined_once_ = true;
  return absl::OkStatus();
}

absl::StatusOr<control::RoundMessage> Trainer::NextRound(const absl::Status& error) {
  const bool over = RoundOver();
  if (!over && !CollectiveFailed(error) && !IsLeaseExpired(error)) return error;
  const int rank = comm_ != nullptr ? comm_->rank() : round_.rank;
  auto give_up = [&](const absl::Status& why) {
    // The agent treats the exit as a failed worker, as in cold mode.
    return absl::Status(error.code(),
                        absl::StrCat(error.message(), " (rank ", rank, ", round ", round_.round,
                                     "; no next round: ", why.message(), ")"));
  };
  // A channel the agent closed (or garbled) ends everything at once, before any "re-forming".
  absl::StatusOr<control::RoundMessage> next =
      control_->WaitForRound(round_.round, absl::ZeroDuration());
  if (next.status().code() == absl::StatusCode::kUnavailable) return give_up(next.status());
  if (over) {
    const std::string reason = control_->abort_reason();
    log_ << absl::StrFormat("rank %d: round %d over%s: re-forming", rank, round_.round,
                            reason.empty() ? "" : absl::StrCat(" (", reason, ")"))
         << std::endl;
  } else {
    log_ << absl::StrFormat("rank %d: round %d: %s: waiting for the next round", rank, round_.round,
                            error.message())
         << std::endl;
  }
  DropGroup();
  // A stop request (ddprun stopping, or the user) ends the wait: there is no group left to agree
  // on a step with. StopSignal has no wakeup to wait on, so this wait, and only this one, is
  // sliced.
  const absl::Duration timeout = NextRoundTimeout(round_);
  const absl::Time deadline = absl::Now() + timeout;
  while (!next.ok()) {
    if (stop_ != nullptr && stop_->received() != 0) {
      return absl::CancelledError(absl::StrFormat(
          "stop requested (signal %d) while waiting for the next round", stop_->received()));
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return give_up(absl::DeadlineExceededError(
          absl::StrCat("no new round from the agent within ", absl::FormatDuration(timeout))));
    }
    next = control_->WaitForRound(round_.round, std::min(left, absl::Milliseconds(100)));
    if (next.status().code() == absl::StatusCode::kUnavailable) return give_up(next.status());
  }
  return next;
}

absl::StatusOr<int> Trainer::StopBetweenRounds() {
  const int signal = stop_->received();
  // The last round's rank 0 keeps what a stop promises, a checkpoint, from its own state: the
  // state of a completed step (an abandoned one was undone), possibly one step behind another
  // survivor's.
  if (round_.rank == 0 && has_state_ && store_ != nullptr) {
    DDPRUN_RETURN_IF_ERROR(
        commit_guard_.MayCommit(absl::StrCat("the checkpoint of step ", state_.global_step)));
    state_.world_size = round_.world_size;
    DDPRUN_ASSIGN_OR_RETURN(std::string payload, Serialize());
    DDPRUN_RETURN_IF_ERROR(store_->Save(state_.global_step, payload));
    log_ << absl::StrFormat(
                "rank 0: stop requested (signal %d) between rounds: checkpoint of step %d saved",
                signal, state_.global_step)
         << std::endl;
  } else {
    log_ << absl::StrFormat("rank %d: stop requested (signal %d) between rounds", round_.rank,
                            signal)
         << std::endl;
  }
  return signal;
}

void Trainer::DropGroup() {
  sync_.reset();  // its hooks go; the works it started keep their own buffers alive
  rounds_->Drop(std::move(comm_));
}

}  // namespace ddprun::trainer
