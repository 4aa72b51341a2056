// The skeleton both `ddp-train` trainers share, written once: device and communicator, a setup
// all ranks agree on, resume (or rank 0's initial broadcast), the epoch loop with its per-step
// bookkeeping, step reports to ddprun, stop requests (finish the step, checkpoint, exit),
// periodic and end-of-epoch checkpoints, metrics, --fault, and the edge where LibTorch
// exceptions become a Status. A trainer (mnist_trainer.cc, imagenet_trainer.cc) brings its data,
// model, step and evaluation through the hooks below.
//
// With DDPRUN_LEASE_FD set (ddprun's local lease, commit_guard.h), nothing is committed past
// the lease: no step counted (the step is undone in-process), no checkpoint written; the
// worker then waits for the next round (in-process) or the trainer fails with
// IsLeaseExpired (ddp-train exits kExitLeaseExpired).
//
// With DDPRUN_CONTROL_SOCKET set (ddprun --restart-mode=in-process), the same skeleton speaks
// the worker side of in-process recovery (docs/design.md §6b; trainer_rounds.cc): the group
// comes from the agent's round messages, and a failed collective or an aborted round abandons
// the step in progress, drops the group and joins the next round, where the ranks agree on the
// newest state and train on.
#ifndef DDPRUN_TRAINER_TRAIN_TRAINER_H_
#define DDPRUN_TRAINER_TRAIN_TRAINER_H_

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "control/control_client.h"
#include "trainer/io/checkpoint_store.h"
#include "trainer/io/commit_guard.h"
#include "trainer/io/dist_env.h"
#include "trainer/io/metrics.h"
#include "trainer/io/step_report.h"
#include "trainer/io/stop_signal.h"
#include "trainer/train/comm.h"
#include "trainer/train/grad_sync.h"
#include "trainer/train/round_group.h"
#include "trainer/train/train_options.h"
#include "trainer/train/train_progress.h"

namespace ddprun::trainer {

// What one optimizer step tells the loop. Sums are over all ranks.
struct StepResult {
  int64_t consumed = 0;  // positions of the epoch's global (padded) sample order it used
  int64_t samples = 0;   // training samples it trained on
  double loss = 0;       // the global mean batch loss
  double lr = 0;         // the learning rate it used
  bool stop = false;     // some rank was asked to stop (the votes are summed with the gradients)
};

class Trainer {
 public:
  virtual ~Trainer() = default;
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

 protected:
  // A sign of life for ddprun's hang detection during work that takes no steps (evaluation,
  // long saves): reports the current step again.
  void ReportAlive() { step_reports_.Report(state_.global_step); }
  // `control_slots`: floats TrainStep sums with the last gradient bucket, the stop vote first.
  // `keeps_best`: a second store, <checkpoint dir>/best, keeps the best-validated model.
  Trainer(const TrainOptions& options, const DistEnv& env, StopSignal* stop, std::ostream& log,
          int control_slots, bool keeps_best);

  // Device, communicator, a local setup every rank agrees on, the model (seeded with --seed),
  // then resume or rank 0's broadcast; logs Banner(). In-process recovery: joins the agent's
  // round instead (and the next ones while joining fails).
  absl::Status Start();
  // Trains epochs until --epochs are done (returns 0) or a stop was requested: then every rank
  // has finished the same step, rank 0 has saved a checkpoint, and it returns the signal.
  // In-process recovery: re-forms after failures of a round and trains on.
  absl::StatusOr<int> TrainEpochs();

  // ---- what a trainer provides ----
  // Local, no communication: load and check the data and whatever else only it checks.
  virtual absl::Status SetupData() = 0;
  // The model and optimizer, after manual_seed(--seed); the loop syncs Model()'s gradients.
  virtual absl::Status BuildModel() = 0;
  virtual torch::nn::Module& Model() = 0;
  // The checkpoint payload and back; Restore sets state_ and anything else Serialize saved.
  virtual absl::StatusOr<std::string> Serialize() = 0;
  virtual absl::Status Restore(absl::string_view payload) = 0;
  // Said after "resumed from checkpoint: epoch E, sample offset O, step S".
  virtual std::string ResumeDetail() const { return ""; }
  // The line rank 0 logs once the model is ready: world, device, data sizes.
  virtual std::string Banner() const = 0;
  // Prepares the epoch state_.epoch from sample state_.epoch_offset on (order, lr, train mode).
  virtual absl::Status BeginEpoch() = 0;
  // One optimizer step with `stop_vote` in control slot 0; nullopt when the epoch's data is done.
  virtual absl::StatusOr<std::optional<StepResult>> TrainStep(bool stop_vote) = 0;
  // Rank 0, after each step (state_ already counts it).
  virtual void ShowProgress(const StepResult& step, double samples_per_s) = 0;
  // After the epoch's last step, stopped or not.
  virtual void EndEpoch() {}
  // After a whole epoch: validation; fills m's test_* and lr, logs, says whether it is the best.
  virtual absl::Status Evaluate(EpochMetrics* m, bool* best) = 0;

  // ---- for the trainers ----
  bool leader() const { return comm_->rank() == 0; }
  int world() const { return comm_->world_size(); }
  // The restart round: TORCHELASTIC_RESTART_COUNT, or the current round's (in-process).
  int restart_count() const { return restart_count_; }
  void Log(const std::string& line) {
    if (leader()) log_ << line << std::endl;
  }
  // Whether the next step may go on past the local lease (CommitGuard). Asked before the step's
  // collectives (a worker of a node given up meets nobody's group), and by TrainStep between the
  // gradient all-reduce and the optimizer update: a step that ran across a stop of this host
  // (SIGSTOP, a frozen VM) makes no update, as its node may have been given up and its ranks
  // taken over meanwhile. After the update it would be too late: the step would not be counted
  // while its update stayed in the parameters and the optimizer.
  absl::Status MayCommitStep();
  // The step just taken (`step_took` in all): how long it computed, its wall time less its wait
  // for the gradient all-reduce, for the next step report (ddprun's slow-node judge).
  void NoteComputeTime(std::chrono::steady_clock::duration step_took);

  const TrainOptions& options_;
  const DistEnv& env_;
  std::ostream& log_;
  std::unique_ptr<Communicator> comm_;
  CommBackend backend_ = CommBackend::kGloo;
  torch::Device device_{torch::kCPU};
  std::unique_ptr<GradientSynchronizer> sync_;
  TrainProgress state_;

 private:
  using Clock = std::chrono::steady_clock;

  absl::Status ConnectOnDevice();
  // `fresh_start`: also check the checkpoint directory against --resume / --no-resume (not when
  // this process joins a run whose state the others hold).
  absl::Status SetupLocal(bool fresh_start);
  absl::Status AgreeOnSetup(const absl::Status& local);
  absl::Status ResumeOrBroadcast();
  // Restore of bytes another rank sent (a checkpoint rank 0 read, a survivor's state): checked
  // to be data only (archive_check.h) before LibTorch loads them.
  absl::Status RestoreFromPeer(absl::string_view payload);
  void NewSynchronizer();  // for comm_ and Model()
  absl::StatusOr<int> TrainEpochsInRound();
  // True when a stop was requested. Adds the epoch's samples and seconds to the arguments.
  absl::StatusOr<bool> TrainEpoch(int64_t* samples, double* train_s);
  void MaybeInjectFault();  // --fault, after a step's report (or the start report)
  // Metrics of the finished epoch; `best` from Evaluate.
  absl::Status FinishEpoch(int64_t samples, double train_s, bool resumed, bool* best);
  absl::StatusOr<int> StopWithCheckpoint();
  absl::Status SaveCheckpoint(const char* why, bool best);
  // After a step: whether a periodic checkpoint is due (--checkpoint-every N or auto).
  bool PeriodicCheckpointDue();
  // --checkpoint-every=auto: seconds of training between checkpoints now.
  double AdvisedInterval();

  // ---- in-process recovery (trainer_rounds.cc) ----
  absl::Status ConnectControl(const CommOptions& comm_options);
  // Joins `round`, and the next rounds while joining fails recoverably.
  absl::Status JoinRounds(control::RoundMessage round);
  // Forms the round's group, agrees on the state and the setup, sends ready.
  absl::Status JoinRound(const control::RoundMessage& round);
  // After `error` in the current round: `error` itself unless it is a failed collective or the
  // round is over; else logs why, drops the group and waits for the next round (the original
  // error, annotated, when none comes within the round's deadline; kCancelled when a stop
  // signal came first).
  absl::StatusOr<control::RoundMessage> NextRound(const absl::Status& error);
  // A stop signal while waiting for a round: the last round's rank 0 saves its state; returns
  // the signal.
  absl::StatusOr<int> StopBetweenRounds();
  void DropGroup();
  bool RoundOver() const { return control_ != nullptr && control_->RoundOver(round_.round); }

  StopSignal* stop_;
  const int control_slots_;
  const bool keeps_best_;
  const Clock::time_point start_;
  StepReporter step_reports_;
  std::optional<double> last_compute_ms_;  // the last step's, until the next report sends it
  // --checkpoint-every=auto (rank 0, which alone saves): when the last periodic checkpoint was
  // saved (or training began), the last save's time until a report sends it, and the advice
  // last logged.
  Clock::time_point last_checkpoint_at_;
  std::optional<double> last_checkpoint_ms_;
  double advice_logged_s_ = 0;
  std::unique_ptr<CheckpointStore> store_, best_store_;
  // ddprun's local lease: no step counted, no checkpoint written past it (commit_guard.h).
  CommitGuard commit_guard_;
  MetricsWriter metrics_;
  int peer_stop_ = 0;  // SIGTERM when another rank's signal stopped this one
  int restart_count_;

  // In-process recovery; control_ is null in cold mode.
  std::unique_ptr<control::ControlClient> control_;
  std::unique_ptr<RoundGroup> rounds_;  // declared after control_: destroyed before it
  control::RoundMessage round_;         // the round comm_ belongs to (or is forming for)
  bool set_up_ = false;                 // SetupLocal done
  bool built_ = false;                  // BuildModel done
  bool has_state_ = false;              // state_ and the model hold a step's state
  bool joined_once_ = false;
};

// A LibTorch message's first line (they carry C++ stack traces after it).
std::string FirstLine(const std::string& s);

// The LibTorch exception edge of both trainers: runs `body` (returning an absl::StatusOr) and
// turns any c10::Error or std::exception escaping it into kInternal.
template <typename Body>
auto CatchLibTorchErrors(Body body) -> decltype(body()) {
  try {
    return body();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("LibTorch: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(FirstLine(e.what()));
  }
}

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_TRAINER_H_
