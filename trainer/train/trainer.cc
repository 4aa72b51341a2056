#include "trainer/train/trainer.h"

#include <signal.h>
#include <stdlib.h>

#include <iostream>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "trainer/io/archive_check.h"
#include "trainer/io/fault_injection.h"
#include "trainer/train/checkpoint_broadcast.h"
#include "trainer/train/state_sync.h"

namespace ddprun::trainer {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

Trainer::Trainer(const TrainOptions& options, const DistEnv& env, StopSignal* stop,
                 std::ostream& log, int control_slots, bool keeps_best)
    : options_(options),
      env_(env),
      log_(log),
      stop_(stop),
      control_slots_(control_slots),
      keeps_best_(keeps_best),
      start_(Clock::now()),
      step_reports_(env.progress_file),
      last_checkpoint_at_(start_),
      restart_count_(env.restart_count) {}

absl::Status Trainer::ConnectOnDevice() {
  const bool cuda = torch::cuda::is_available();
  if (options_.device == "cuda" && !cuda) {
    return absl::FailedPreconditionError(
        "--device=cuda: no CUDA device (or this ddp-train was built without CUDA)");
  }
  if (options_.deterministic) {
    // Before the first cuBLAS handle exists: cuBLAS reads its workspace setting then.
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
  }
  if (options_.device == "cuda" || (options_.device == "auto" && cuda)) {
    device_ = torch::Device(
        torch::kCUDA, static_cast<c10::DeviceIndex>(env_.local_rank %
                                                    static_cast<int>(torch::cuda::device_count())));
  }
  // cuDNN picks the fastest algorithm for each shape by timing them (torch.backends.cudnn.
  // benchmark, as PyTorch's own ImageNet example sets): the shapes of a training run repeat.
  if (device_.is_cuda() && !options_.deterministic) at::globalContext().setBenchmarkCuDNN(true);
  DDPRUN_ASSIGN_OR_RETURN(backend_, ParseCommBackend(options_.backend));
  if (backend_ == CommBackend::kNccl && !device_.is_cuda()) {
    return absl::InvalidArgumentError("--backend=nccl needs --device=cuda");
  }
  if (options_.threads > 0) {
    torch::set_num_threads(options_.threads);
  } else if (env_.omp_num_threads.has_value()) {
    torch::set_num_threads(*env_.omp_num_threads);
  } else if (env_.local_world_size > 1) {
    torch::set_num_threads(1);  // processes share the cores; one thread each is fastest
  }
  CommOptions comm_options;
  comm_options.backend = backend_;
  comm_options.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(options_.comm_timeout_s * 1000));
  if (!env_.control_socket.empty()) {
    if (backend_ == CommBackend::kGloo) return ConnectControl(comm_options);
    // An NCCL communicator cannot be abandoned without ncclCommAbort; a worker that never says
    // hello makes ddprun restart this node cold, which is correct, only slower.
    log_ << "ddp-train: rank " << env_.rank
         << ": in-process recovery needs --backend=gloo; DDPRUN_CONTROL_SOCKET ignored"
         << std::endl;
  }
  DDPRUN_ASSIGN_OR_RETURN(comm_, ConnectCommunicator(env_, comm_options));
  return absl::OkStatus();
}

absl::Status Trainer::SetupLocal(bool fresh_start) {
  DDPRUN_RETURN_IF_ERROR(SetupData());
  const std::string& dir = options_.checkpoint_dir;
  if (!dir.empty()) {
    store_ = std::make_unique<CheckpointStore>(dir, options_.keep_checkpoints);
    if (keeps_best_) best_store_ = std::make_unique<CheckpointStore>(dir + "/best", 1);
    if (leader()) {
      DDPRUN_RETURN_IF_ERROR(fresh_start
                                 ? CheckCheckpointDirectory(store_.get(), dir, options_.resume)
                                 : store_->CheckWritable());
      if (best_store_ != nullptr) DDPRUN_RETURN_IF_ERROR(best_store_->CheckWritable());
    }
  }
  if (leader() && !options_.metrics_file.empty()) {
    DDPRUN_RETURN_IF_ERROR(metrics_.Open(options_.metrics_file));
  }
  return absl::OkStatus();
}

absl::Status Trainer::AgreeOnSetup(const absl::Status& local) {
  // Every rank learns whether any rank failed, so all stop before training with a clear line
  // instead of the healthy ones hanging in the first collective.
  torch::Tensor failed = torch::tensor({local.ok() ? 0.0f : 1.0f}).to(device_);
  DDPRUN_RETURN_IF_ERROR(comm_->AllReduceSum(failed));
  DDPRUN_RETURN_IF_ERROR(local);
  if (failed.item<float>() > 0) {
    return absl::FailedPreconditionError("another rank failed during setup (see its error)");
  }
  return absl::OkStatus();
}

absl::Status Trainer::RestoreFromPeer(absl::string_view payload) {
  DDPRUN_RETURN_IF_ERROR(CheckDataOnlyArchive(payload));
  return Restore(payload);
}

absl::Status Trainer::ResumeOrBroadcast() {
  DDPRUN_ASSIGN_OR_RETURN(
      std::optional<std::string> payload,
      ReadCheckpointOnAllRanks(store_.get(), options_.resume != ResumeMode::kNever, comm_.get(),
                               device_, log_));
  if (!payload.has_value()) {
    std::vector<torch::Tensor> tensors = Model().parameters();
    for (const torch::Tensor& b : Model().buffers()) tensors.push_back(b);
    return GradientSynchronizer::BroadcastFromRankZero(tensors, comm_.get());
  }
  const auto t0 = Clock::now();
  absl::Status s = RestoreFromPeer(*payload);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint in ", options_.checkpoint_dir, ": ", s.message()));
  }
  Log(absl::StrFormat(
      "resumed from checkpoint: epoch %d, sample offset %d, step %d%s (saved by world size %d) "
      "(load %.1f ms)",
      state_.epoch, state_.epoch_offset, state_.global_step, ResumeDetail(), state_.world_size,
      SecondsSince(t0) * 1e3));
  return absl::OkStatus();
}

void Trainer::NewSynchronizer() {
  sync_.reset();  // its hooks go before the new ones come
  GradSyncOptions sync_options;
  sync_options.bucket_cap_bytes = options_.bucket_cap_bytes;
  sync_options.control_slots = control_slots_;
  sync_ = std::make_unique<GradientSynchronizer>(Model().parameters(), comm_.get(), sync_options);
}

absl::Status Trainer::Start() {
  DDPRUN_ASSIGN_OR_RETURN(commit_guard_, CommitGuard::Open(env_.lease_fd));
  DDPRUN_RETURN_IF_ERROR(ConnectOnDevice());
  if (control_ != nullptr) return JoinRounds(control_->current_round());
  DDPRUN_RETURN_IF_ERROR(AgreeOnSetup(SetupLocal(/*fresh_start=*/true)));
  torch::manual_seed(options_.seed);
  DDPRUN_RETURN_IF_ERROR(BuildModel());
  NewSynchronizer();
  DDPRUN_RETURN_IF_ERROR(ResumeOrBroadcast());
  Log(Banner());
  return absl::OkStatus();
}

absl::Status Trainer::SaveCheckpoint(const char* why, bool best) {
  if (store_ == nullptr || !leader()) return absl::OkStatus();
  best = best && best_store_ != nullptr;
  state_.world_size = world();
  const auto t0 = Clock::now();
  DDPRUN_ASSIGN_OR_RETURN(std::string payload, Serialize());
  const double serialize_ms = SecondsSince(t0) * 1e3;
  // After serializing, which takes time: nothing of a node that may have been given up reaches
  // the checkpoint directory (the file nor its pointer).
  if (absl::Status lease =
          commit_guard_.MayCommit(absl::StrCat("the checkpoint of step ", state_.global_step));
      !lease.ok()) {
    Log(std::string(lease.message()));
    return lease;
  }
  const auto t1 = Clock::now();
  absl::Status s = store_->Save(state_.global_step, payload);
  if (s.ok() && best) s = best_store_->Save(state_.global_step, payload);
  if (!s.ok()) {
    // The previous checkpoint is untouched; training goes on and the next save tries again.
    log_ << "warning: checkpoint at step " << state_.global_step << " not saved: " << s.message()
         << std::endl;
    return s;
  }
  last_checkpoint_at_ = Clock::now();
  last_checkpoint_ms_ = SecondsSince(t0) * 1e3;  // what the job waited for: the whole save
  Log(absl::StrFormat(
      "checkpoint: saved step %d (%s%s, epoch %d offset %d, %.1f MB) serialize %.1f ms, "
      "write+fsync %.1f ms",
      state_.global_step, why, best ? ", best so far" : "", state_.epoch, state_.epoch_offset,
      payload.size() / 1e6, serialize_ms, SecondsSince(t1) * 1e3));
  ReportAlive();
  return absl::OkStatus();
}

void Trainer::MaybeInjectFault() {
  if (options_.fault.has_value() &&
      FaultDue(*options_.fault, comm_->rank(), state_.global_step, restart_count_)) {
    Hang(comm_->rank(), state_.global_step, std::cerr);
  }
}

absl::StatusOr<bool> Trainer::TrainEpoch(int64_t* samples, double* train_s) {
  DDPRUN_RETURN_IF_ERROR(BeginEpoch());
  const auto t0 = Clock::now();
  bool stop = false;
  while (!stop) {
    // Before the step, not only after it: a state resumed (or taken from another rank) right
    // after the epoch's last allowed step must not take one more.
    if (options_.max_steps > 0 && state_.epoch_loss_steps >= options_.max_steps) break;
    const bool stop_vote = stop_ != nullptr && stop_->received() != 0;
    // "Starting step N": a rank stuck outside a collective then shows one step fewer than the
    // ranks waiting for it inside the next one, which is how ddprun names the straggler.
    step_reports_.Report(state_.global_step + 1, std::exchange(last_compute_ms_, std::nullopt),
                         std::exchange(last_checkpoint_ms_, std::nullopt));
    // Before the step's collectives: a worker of a node given up meets nobody's group.
    DDPRUN_RETURN_IF_ERROR(MayCommitStep());
    std::optional<StepUndo> undo;
    if (control_ != nullptr) {
      // A round can end without any collective of this rank failing (world size 1, or between
      // collectives).
      if (RoundOver()) {
        return absl::AbortedError(absl::StrCat("round ", round_.round, " is over"));
      }
      undo.emplace(Model().buffers(), device_);
    }
    // Marked for the stop watcher: a stop signal in a step that never ends (a peer is gone)
    // ends the process instead of waiting for the launcher's SIGKILL (stop_signal.h).
    if (stop_ != nullptr) stop_->StepBegan();
    const auto step_began = Clock::now();
    absl::StatusOr<std::optional<StepResult>> result = TrainStep(stop_vote);
    if (stop_ != nullptr) stop_->StepEnded();
    NoteComputeTime(Clock::now() - step_began);
    if (!result.ok()) {
      // The optimizer update comes after the gradient all-reduce and MayCommitStep, so a failed or
      // refused step never made one; what the step did change before it is put back.
      if (undo.has_value()) undo->Apply(Model().parameters());
      return result.status();
    }
    std::optional<StepResult>& step = *result;
    if (!step.has_value()) break;
    state_.epoch_offset += step->consumed;
    state_.global_step += 1;
    state_.epoch_loss_sum += step->loss;
    state_.epoch_loss_steps += 1;
    *samples += step->samples;
    stop = step->stop;
    if (stop && !stop_vote) peer_stop_ = SIGTERM;
    MaybeInjectFault();
    if (leader()) {
      const double dt = SecondsSince(t0);
      ShowProgress(*step, dt > 0 ? *samples / dt : 0);
    }
    if (!stop && PeriodicCheckpointDue()) {
      SaveCheckpoint("periodic", false).IgnoreError();  // logged; the previous one stays valid
    }
  }
  *train_s = SecondsSince(t0);
  EndEpoch();
  return stop;
}

bool Trainer::PeriodicCheckpointDue() {
  if (options_.checkpoint_every > 0) return state_.global_step % options_.checkpoint_every == 0;
  // Only rank 0 saves (SaveCheckpoint), so only its clock decides: no rank waits on another's.
  if (!options_.checkpoint_auto || !leader()) return false;
  return SecondsSince(last_checkpoint_at_) >= AdvisedInterval();
}

double Trainer::AdvisedInterval() {
  // Before any advice (no save time measured yet): soon, since the first save is what tells the
  // advice its cost; a cold restart starts the clock again, and under failures more frequent
  // than a longer wait no save would ever come (nor advice, nor a checkpoint to go back to).
  constexpr double kIntervalBeforeAdvice = 5;
  std::optional<double> advice = env_.checkpoint_advice_s;
  if (control_ != nullptr) {
    if (std::optional<double> newer = control_->checkpoint_advice()) advice = newer;
  }
  if (!advice.has_value()) return kIntervalBeforeAdvice;
  // The advice moves a little at every report as the run trains on: said when it moved by a
  // fifth.
  if (advice_logged_s_ == 0 || *advice < 0.8 * advice_logged_s_ ||
      *advice > 1.2 * advice_logged_s_) {
    advice_logged_s_ = *advice;
    Log(absl::StrFormat("checkpoint: every %.1f s of training, as ddprun advises", *advice));
  }
  return *advice;
}

void Trainer::NoteComputeTime(std::chrono::steady_clock::duration step_took) {
  // On a CUDA device the host returns before the kernels finish: its clock does not time the
  // step (that needs CUDA events), so nothing is reported there.
  if (!device_.is_cpu() || sync_ == nullptr) return;
  const auto computed = step_took - sync_->last_wait();
  last_compute_ms_ = std::chrono::duration<double, std::milli>(computed).count();
}

absl::Status Trainer::MayCommitStep() {
  return commit_guard_.MayCommit(absl::StrCat("step ", state_.global_step + 1));
}

absl::Status Trainer::FinishEpoch(int64_t samples, double train_s, bool resumed, bool* best) {
  // Evaluation's collectives and the metrics line commit the epoch: not past the lease.
  DDPRUN_RETURN_IF_ERROR(commit_guard_.MayCommit(absl::StrCat("the end of epoch ", state_.epoch)));
  EpochMetrics m;
  m.epoch = state_.epoch;
  m.world_size = world();
  m.samples = samples;
  m.train_s = train_s;
  m.samples_per_s = train_s > 0 ? samples / train_s : 0;
  m.train_loss = state_.epoch_loss_steps > 0 ? state_.epoch_loss_sum / state_.epoch_loss_steps : 0;
  m.global_step = state_.global_step;
  m.resumed = resumed;
  ReportAlive();
  DDPRUN_RETURN_IF_ERROR(Evaluate(&m, best));
  m.wall_s = SecondsSince(start_);
  if (leader() && !options_.metrics_file.empty() && !metrics_.is_open()) {
    // This process became rank 0 in a later round of in-process recovery.
    DDPRUN_RETURN_IF_ERROR(metrics_.Open(options_.metrics_file));
  }
  if (leader() && metrics_.is_open()) DDPRUN_RETURN_IF_ERROR(metrics_.Write(m));
  return absl::OkStatus();
}

absl::StatusOr<int> Trainer::StopWithCheckpoint() {
  const int signal = stop_ != nullptr && stop_->received() != 0 ? stop_->received() : peer_stop_;
  Log(absl::StrFormat("stop requested (signal %d): saving a checkpoint and exiting", signal));
  absl::Status saved = SaveCheckpoint("stop", false);
  if (IsLeaseExpired(saved)) return saved;  // no barrier with a group that may have moved on
  // The others wait until rank 0's checkpoint is durable: a launcher that sees one rank exit
  // tears the group down.
  DDPRUN_RETURN_IF_ERROR(comm_->Barrier());
  DDPRUN_RETURN_IF_ERROR(saved);
  return signal;
}

absl::StatusOr<int> Trainer::TrainEpochs() {
  while (true) {
    absl::StatusOr<int> done = TrainEpochsInRound();
    if (done.ok() || control_ == nullptr) return done;
    absl::StatusOr<control::RoundMessage> next = NextRound(done.status());
    absl::Status joined = next.ok() ? JoinRounds(*std::move(next)) : next.status();
    if (absl::IsCancelled(joined)) return StopBetweenRounds();
    DDPRUN_RETURN_IF_ERROR(joined);
  }
}

absl::StatusOr<int> Trainer::TrainEpochsInRound() {
  bool resumed = state_.global_step > 0;
  if (state_.epoch > options_.epochs) {
    Log(absl::StrFormat("nothing to train: the checkpoint is past epoch %d (--epochs %d)",
                        state_.epoch - 1, options_.epochs));
  }
  step_reports_.Report(state_.global_step);  // a resumed run shows its step at once
  MaybeInjectFault();                        // hang@0, or at the step a run resumes from
  while (state_.epoch <= options_.epochs) {
    int64_t samples = 0;
    double train_s = 0;
    DDPRUN_ASSIGN_OR_RETURN(bool stop, TrainEpoch(&samples, &train_s));
    if (stop) return StopWithCheckpoint();
    bool best = false;
    DDPRUN_RETURN_IF_ERROR(FinishEpoch(samples, train_s, resumed, &best));
    resumed = false;
    state_.epoch += 1;
    state_.epoch_offset = 0;
    state_.epoch_loss_sum = 0;
    state_.epoch_loss_steps = 0;
    if (store_ != nullptr) SaveCheckpoint("end of epoch", best).IgnoreError();
  }
  return 0;
}

}  // namespace ddprun::trainer
